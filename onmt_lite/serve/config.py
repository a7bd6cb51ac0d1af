"""The server's configuration file (OpenNMT-py 1.x's ``conf.json``) and each model's translation
options.

    {"models_root": "./available_models",
     "models": [{"id": 100, "model": "model_0.pt", "timeout": 600, "on_timeout": "to_cpu",
                 "load": true, "opt": {"gpu": 0, "beam_size": 5},
                 "tokenizer": {"type": "sentencepiece", "model": "wmtenfr.model"}}]}

A model's ``opt`` is checked as ``onmt_lite_translate``'s command line would check it (1.x builds
the same command line from it); options that belong to the file command (``src``, ``output``, ...)
are refused by name. Paths in the file are relative to ``models_root`` (or the model's
``model_root``), which is relative to the current directory as in 1.x. Everything is checked when
the server starts, before it listens: a bad file is one line naming the file, the model and the
problem.
"""

import dataclasses
import math
import os
import re

from onmt_lite.opts import translate_opts
from onmt_lite.opts.parser import NEGATIVE_NUMBER, OptionParser
from onmt_lite.serve.json_text import loads_strict
from onmt_lite.utils.errors import UserError

MODEL_KEYS = {
    "id",
    "model",
    "models",
    "model_root",
    "timeout",
    "on_timeout",
    "load",
    "opt",
    "tokenizer",
}
# 1.x's keys that onmt_lite's server does not have, with the reason
UNSUPPORTED_KEYS = {
    "preprocess": "custom preprocessing functions are not supported",
    "postprocess": "custom postprocessing functions are not supported",
    "custom_opt": "custom preprocessing functions are not supported",
    "ct2_model": "CTranslate2 models are not supported",
    "ct2_translator_args": "CTranslate2 models are not supported",
    "ct2_translate_batch_args": "CTranslate2 models are not supported",
    "features": "source word features are not supported",
}
# translation options with no meaning in the server, and why
SERVER_REFUSES = {
    "model": "the model's \"model\" key names its checkpoints",
    "src": "requests carry the text",
    "tgt": "requests carry the text",
    "output": "answers carry the text",
    "attn_plot": "the file command writes plots; the server answers requests",
    "attn_debug": "the file command logs attention; the server answers requests",
    "verbose": "the file command logs sentences; the server logs requests (--debug: their bodies)",
    "report_align": "the server's answers carry no alignments (onmt_lite_translate -report_align "
    "writes them)",
    "align_debug": "the file command logs alignments; the server answers requests",
    "report_time": "the server logs each request's time",
    "tgt_prefix": "requests carry no target prefixes",
    "dump_beam": "the file command writes beam dumps; the server answers requests",
    "log_file": "the server logs to its standard error",
    "threads": "the server uses PyTorch's threads for all models (set OMP_NUM_THREADS)",
    "config": "put the options in \"opt\" itself",
    "save_config": "put the options in \"opt\" itself",
}
# read from the model's root, as its checkpoints
PATH_OPTIONS = (
    "src_spm",
    "tgt_spm",
    "phrase_table",
)
OPTION_NAME = re.compile(r"[a-z][a-z0-9_]*")
MAX_TIMEOUT = 1e9  # seconds (31 years); Python's waits take at most threading.TIMEOUT_MAX
MAX_MODEL_ID = 2**31 - 1


class _RaisingParser(OptionParser):
    """The translate parser, whose errors are a UserError (a request's or the config's) instead of
    an exit."""

    def error(self, message):
        raise UserError(
            " ".join(line.strip() for line in str(message).splitlines() if line.strip())
        )


@dataclasses.dataclass
class ModelSpec:
    """One model of the server: its id, checkpoint paths (an ensemble for several), the user's
    translation options as given (``user_opt``) and parsed (``opt``), its tokenizer settings,
    whether to load it at start-up, and what to do after ``timeout`` idle seconds (-1: nothing)."""

    model_id: int
    paths: list
    root: str
    user_opt: dict
    opt: object
    tokenizer: dict = None
    load: bool = False
    timeout: float = -1
    on_timeout: str = "to_cpu"

    def to_dict(self, loaded):
        """What ``GET /models`` says of it (1.x's fields)."""
        out = {
            "model_id": self.model_id,
            "opt": self.user_opt,
            "models": self.paths,
            "loaded": loaded,
            "timeout": self.timeout,
        }
        if self.tokenizer is not None:
            out["tokenizer"] = self.tokenizer
        return out


def seconds(value, name: str, where: str) -> float:
    """A config's or a clone's ``timeout``: -1 (never) or a finite number of seconds up to
    ``MAX_TIMEOUT``; a UserError naming ``where`` otherwise."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or not (value == -1 or 0 <= value <= MAX_TIMEOUT)
    ):
        raise UserError(
            f"{where}: \"{name}\" must be -1 (never) or a number of seconds from 0 to "
            f"{MAX_TIMEOUT:g} (got {value!r})"
        )
    return value


def _option_arguments(key, value, action, where):
    """The command-line arguments of one ``opt`` entry, checked against its option's ``action``:
    a value that the parser could read as another option never reaches it."""
    if value is True or value is False:
        if action.nargs != 0:
            raise UserError(f"{where}: option {key!r} takes a value, not true/false")
        return [f"-{key}"] if value else []
    values = value if isinstance(value, list) else [value]
    if isinstance(value, list) and action.nargs not in ("+", "*"):
        raise UserError(f"{where}: option {key!r} takes one value, not a list")
    if action.nargs == 0:
        raise UserError(f"{where}: option {key!r} is a switch: true or false")
    if not values and action.nargs == "+":
        raise UserError(f"{where}: option {key!r} needs at least one value")
    for text in values:  # a JSON number is a value; a string argparse might read as an option
        if isinstance(text, str) and text.startswith("-") and not NEGATIVE_NUMBER.match(text):
            raise UserError(f"{where}: option {key!r}: a value may not start with '-' ({text!r})")
    texts = [str(v) for v in values]
    if isinstance(value, list):
        return [f"-{key}", *texts]
    return [f"-{key}={texts[0]}"]  # one argument: the parser reads it as this option's value


def translation_options(user_opt, paths, root, where):
    """The parsed translation options of a model's ``opt`` dict (1.x: each key ``k`` is ``-k v``,
    ``true`` a switch, ``false`` left out); a UserError naming ``where`` for anything the command
    line would refuse and for the options that have no meaning in a server. Each key must be a
    translation option's full name and each value of that option's kind, checked before the
    parser reads them: the checkpoints are ``paths`` and nothing in ``user_opt`` changes that."""
    if not isinstance(user_opt, dict):
        raise UserError(f"{where}: \"opt\" must be an object of translation options")
    parser = _RaisingParser("onmt_lite_server")  # full option names only, as in a -config file
    translate_opts(parser)
    args = ["-model", *paths, "-src", "(requests)"]
    for key, value in user_opt.items():
        if key in SERVER_REFUSES:
            raise UserError(f"{where}: option {key!r} is not for the server: {SERVER_REFUSES[key]}")
        known = OPTION_NAME.fullmatch(key)
        action = parser._option_string_actions.get(f"-{key}") if known else None
        if action is None or action.dest in ("help", "debug"):
            raise UserError(f"{where}: unknown translation option {key!r}")
        if (
            not isinstance(value, (str, int, float, bool, list))
            or isinstance(value, list)
            and not all(isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in value)
        ):
            raise UserError(
                f"{where}: option {key!r} must be a string, a number, true/false or a list of them"
            )
        if key in PATH_OPTIONS and isinstance(value, str) and value:
            value = os.path.join(root, value)
        args += _option_arguments(key, value, action, where)
    try:
        opt, unknown = parser.parse_known_args(args)
    except UserError as err:
        raise UserError(f"{where}: {err}") from None
    if unknown:
        raise UserError(f"{where}: unknown translation option(s) {' '.join(unknown)}")
    if opt.model != list(paths) or opt.src != "(requests)":  # the checks above make it so
        raise UserError(f"{where}: the options named files: only the configuration does")
    if opt.n_best > opt.beam_size:
        raise UserError(f"{where}: n_best {opt.n_best} is larger than beam_size {opt.beam_size}")
    return opt


def _tokenizer(conf, root, where):
    """The model's sentencepiece model paths ``(source, target)`` from its ``tokenizer`` (one for
    both sides, or ``{"src": ..., "tgt": ...}``); ("", "") without one."""
    if conf is None:
        return "", ""
    if not isinstance(conf, dict):
        raise UserError(f"{where}: \"tokenizer\" must be an object")
    if "src" in conf or "tgt" in conf:
        if set(conf) != {"src", "tgt"}:
            raise UserError(
                f"{where}: \"tokenizer\" with \"src\" needs \"tgt\" too, and nothing else"
            )
        return _tokenizer(conf["src"], root, where)[0], _tokenizer(conf["tgt"], root, where)[0]
    kind = conf.get("type")
    if kind != "sentencepiece":
        reason = " (pyonmttok is not supported)" if kind == "pyonmttok" else ""
        raise UserError(
            f"{where}: tokenizer type {kind!r} is not supported{reason}; use \"sentencepiece\""
        )
    if not isinstance(conf.get("model"), str):
        raise UserError(f"{where}: a sentencepiece tokenizer needs \"model\" (a file)")
    path = os.path.join(root, conf["model"])
    if not os.path.isfile(path):
        raise UserError(f"{where}: tokenizer model {path} does not exist")
    return path, path


def model_spec(conf, model_id, models_root, where):
    """The ModelSpec of one entry of ``models`` (``where`` names it in errors)."""
    if not isinstance(conf, dict):
        raise UserError(f"{where}: must be an object")
    for key in conf:
        if key in UNSUPPORTED_KEYS:
            raise UserError(f"{where}: {key!r} is not supported: {UNSUPPORTED_KEYS[key]}")
        if key not in MODEL_KEYS:
            raise UserError(
                f"{where}: unknown key {key!r} (known: {', '.join(sorted(MODEL_KEYS))})"
            )
    root = conf.get("model_root", models_root)
    names = conf.get("models", conf.get("model"))
    names = [names] if isinstance(names, str) else names
    if not names or not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
        raise UserError(
            f"{where}: \"model\" must name a checkpoint file (or a list of them: an ensemble)"
        )
    paths = [os.path.join(root, name) for name in names]
    for path in paths:
        if not os.path.isfile(path):
            raise UserError(f"{where}: model file {path} does not exist")
    timeout = seconds(conf.get("timeout", -1), "timeout", where)
    on_timeout = conf.get("on_timeout", "to_cpu")
    if on_timeout not in ("to_cpu", "unload"):
        raise UserError(
            f"{where}: \"on_timeout\" must be \"to_cpu\" or \"unload\" (got {on_timeout!r})"
        )
    if not isinstance(conf.get("load", False), bool):
        raise UserError(f"{where}: \"load\" must be true or false")
    user_opt = conf.get("opt", {})
    opt = translation_options(user_opt, paths, root, where)
    src_spm, tgt_spm = _tokenizer(conf.get("tokenizer"), root, where)
    opt.src_spm, opt.tgt_spm = src_spm or opt.src_spm, tgt_spm or opt.tgt_spm
    return ModelSpec(
        model_id,
        names,
        root,
        dict(user_opt),
        opt,
        conf.get("tokenizer"),
        conf.get("load", False),
        timeout,
        on_timeout,
    )


def read_config(path):
    """The ModelSpecs of a server configuration file."""
    try:
        with open(path, "rb") as f:
            conf = loads_strict(f.read())
    except OSError as err:
        raise UserError(f"{path}: cannot read the configuration ({err.strerror})") from None
    except ValueError as err:
        raise UserError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(conf, dict) or not isinstance(conf.get("models"), list) or not conf["models"]:
        raise UserError(f"{path}: expected an object with a non-empty list \"models\"")
    unknown = set(conf) - {"models_root", "models"}
    if unknown:
        raise UserError(
            f"{path}: unknown key(s) {', '.join(sorted(unknown))} (known: models_root, models)"
        )
    models_root = conf.get("models_root", "./available_models")
    if not isinstance(models_root, str):
        raise UserError(f"{path}: \"models_root\" must be a directory")
    specs = {}
    next_id = 0
    for i, entry in enumerate(conf["models"]):
        where = f"{path}: models[{i}]"
        model_id = entry.get("id") if isinstance(entry, dict) else None
        if model_id is None:  # 1.x: the next id not taken
            while next_id in specs:
                next_id += 1
            model_id = next_id
        elif (
            isinstance(model_id, bool)
            or not isinstance(model_id, int)
            or not 0 <= model_id <= MAX_MODEL_ID
        ):
            raise UserError(f"{where}: \"id\" must be a whole number from 0 to {MAX_MODEL_ID}")
        if model_id in specs:
            raise UserError(f"{where}: id {model_id} is already taken")
        specs[model_id] = model_spec(entry, model_id, models_root, where)
    return list(specs.values())
