"""Shared test helpers: paths to ../shared/data, running the commands, writing small corpora."""

import os
import resource
import subprocess
import sys

import pytest
import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED_DATA = os.path.join(os.path.dirname(REPO), "shared", "data")


def shared_data(*parts):
    """Path under ../shared/data, or skip the test (visibly) when it is absent."""
    path = os.path.join(SHARED_DATA, *parts)
    if not os.path.exists(path):
        pytest.skip(f"needs {path} (../shared is absent)")
    return path


COMMAND_NAMES = (
    "preprocess",
    "train",
    "translate",
    "convert",
)  # the commands ``invoke`` runs in this process


def _commands():
    """``{name: main}`` of the commands (imported when first used): COMMAND_NAMES', and the
    server's, whose start-up errors run here too."""
    from onmt_lite.bin import convert, preprocess, server, train, translate

    return {
        "preprocess": preprocess.main,
        "train": train.main,
        "translate": translate.main,
        "convert": convert.main,
        "server": server.main,
    }


def invoke(name, args, capsys, file_size_limit=None):
    """Run a command or tool in this process (a new process costs seconds of imports); returns
    (exit status, stderr lines)."""
    code, _, err = invoke_captured(name, args, capsys, file_size_limit)
    return code, err.strip().splitlines()


def invoke_captured(name, args, capsys, file_size_limit=None):
    """``invoke``, returning (exit status, standard output, standard error) as text."""
    capsys.readouterr()  # what ran before is not this command's
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    if file_size_limit is not None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_limit, hard))
    try:
        code = exit_status(name, args)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def exit_status(name, args) -> int:
    """Run the command or tool ``name`` with ``args`` in this process; its exit status: 0, or its
    SystemExit's code (a message is printed, status 1, as a process would). Exceptions other than
    SystemExit go on to the caller. The thread count is put back (-threads is the command's own,
    not the tests')."""
    commands = _commands()
    main = commands[name] if name in commands else tool(name).main
    threads = torch.get_num_threads()
    try:
        main([str(a) for a in args])
        return 0
    except SystemExit as exc:
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
            return 1
        return 0 if exc.code is None else exc.code
    finally:
        torch.set_num_threads(threads)


def one_line_error(invoked):
    """The error line of an ``invoke`` that failed on bad input: exit 2, no traceback."""
    code, lines = invoked
    assert code == 2, lines
    assert not any("Traceback" in line for line in lines)
    return lines[-1]


def run_cli(command, *args, cwd=None):
    """Run ``python -m onmt_lite.bin.<command> args`` in a new process; returns the
    CompletedProcess. For what only a process shows (signals, writes to descriptor 1, console
    scripts, several processes at once); the rest is ``run_in_process``'s, seconds faster."""
    return subprocess.run(
        [sys.executable, "-m", f"onmt_lite.bin.{command}", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
    )


def run_in_process(command, *args, cwd=None):
    """``run_cli`` in this process (a new one spends 2 to 3 seconds importing PyTorch): the
    command's ``exit_status`` with ``sys.stdout`` and ``sys.stderr`` captured; an exception it lets
    out is exit status 1 and its traceback, as the process would give. Threads, warning filters,
    the working directory and the logger are put back as they were."""
    import contextlib
    import io
    import traceback
    import warnings

    from onmt_lite.utils.logging import logger

    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)
    err = io.StringIO()
    directory = os.getcwd()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            with warnings.catch_warnings():
                if cwd is not None:
                    os.chdir(cwd)
                try:
                    code = exit_status(command, args)
                except Exception:  # noqa: BLE001 - the process would print it and exit 1
                    traceback.print_exc()
                    code = 1
    finally:
        os.chdir(directory)
        for handler in list(logger.handlers):  # the command's, writing into the captured streams
            logger.removeHandler(handler)
            handler.close()
    out.seek(0)
    return subprocess.CompletedProcess([command, *map(str, args)], code, out.read(), err.getvalue())


_tools = {}


class PickledCall:
    """Pickled as the call ``function(*args)``: a checkpoint that runs code if a plain unpickler
    reads it (the restricted ones must refuse it)."""

    def __init__(self, function, *args):
        self.function = function
        self.args = args

    def __reduce__(self):
        return (self.function, self.args)


def tool(name):
    """The module tools/NAME.py, loaded by path (tools/ is not a package)."""
    import importlib.util

    if name not in _tools:
        spec = importlib.util.spec_from_file_location(
            f"tool_{name}", os.path.join(REPO, "tools", f"{name}.py")
        )
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _tools[name] = module
    return _tools[name]


def write_lines(path, lines):
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines))
    return str(path)


def reversal_corpus(directory, n_train=300, n_valid=40, seed=0, vocab=20):
    """A small task a model can learn: the target is the source reversed. Returns the file paths."""
    import random

    rng = random.Random(seed)
    words = [f"w{i}" for i in range(vocab)]
    paths = {}
    for split, n in (("train", n_train), ("valid", n_valid)):
        sources = [[rng.choice(words) for _ in range(rng.randint(2, 7))] for _ in range(n)]
        paths[f"src_{split}"] = write_lines(
            os.path.join(directory, f"src-{split}.txt"), [" ".join(s) for s in sources]
        )
        paths[f"tgt_{split}"] = write_lines(
            os.path.join(directory, f"tgt-{split}.txt"), [" ".join(reversed(s)) for s in sources]
        )
    return paths


def preprocess_in_process(directory, *extra, **corpus_args):
    """Preprocess a reversal corpus into ``directory/data``; returns the -data prefix."""
    from onmt_lite.opts import build_parser, config_opts, parse, preprocess_opts
    from onmt_lite.preprocess import preprocess

    paths = reversal_corpus(directory, **corpus_args)
    prefix = os.path.join(directory, "data")
    opt = parse(
        build_parser("p", [config_opts, preprocess_opts]),
        [
            "-train_src",
            paths["src_train"],
            "-train_tgt",
            paths["tgt_train"],
            "-valid_src",
            paths["src_valid"],
            "-valid_tgt",
            paths["tgt_valid"],
            "-save_data",
            prefix,
            "-overwrite",
            *map(str, extra),
        ],
    )
    preprocess(opt)
    return prefix


TINY_MODEL = ["-rnn_size", "16", "-word_vec_size", "8", "-layers", "1", "-batch_size", "8"]


def train_in_process(data, save_model, *args):
    """Run training in this process with ``args``; returns (options, list of logged step lines)."""
    from onmt_lite.opts import build_parser, config_opts, model_opts, parse, train_opts
    from onmt_lite.train.main import train
    from onmt_lite.utils.logging import init_logger

    from onmt_lite.loss.options import add_loss_class_options

    log = f"{save_model}.log"
    parser = build_parser("t", [config_opts, model_opts, train_opts])
    args = ["-data", data, "-save_model", save_model, "-log_file", log, *map(str, args)]
    add_loss_class_options(parser, args)  # as onmt_lite_train does
    opt = parse(parser, args)
    init_logger(log)
    train(opt)
    with open(log, encoding="utf-8") as f:
        lines = f.read().splitlines()
    return opt, lines


def assert_resumes_exactly(data, directory, *args, steps=8) -> list[str]:
    """Train ``steps`` steps straight, and again stopped half way and resumed with -train_from the
    checkpoint there (checkpoints ``directory/full_step_N.pt`` and ``part_step_N.pt``): the same
    loss logged at every step, every step's its own (a resume at another step would differ).
    Returns the resumed run's log lines."""
    half = steps // 2
    _, full = train_in_process(data, os.path.join(directory, "full"), *args, "-train_steps", steps)
    part = os.path.join(directory, "part")
    _, first = train_in_process(data, part, *args, "-train_steps", half)
    resume = ["-train_steps", steps, "-train_from", f"{part}_step_{half}.pt"]
    _, second = train_in_process(data, part, *args, *resume)
    full_losses = step_losses(full)
    assert sorted(full_losses) == list(range(1, steps + 1))
    assert len(set(full_losses.values())) == steps  # the steps really differ
    assert {**step_losses(first), **step_losses(second)} == full_losses
    return second


def translate_in_process(*args) -> str:
    """Run ``onmt_lite_translate args`` in this process, as the command does (options, log, output
    files); returns what it logged (its standard error). For tests that read its outputs: a
    command line's exit status and one-line errors are ``run_in_process``'s."""
    import io
    import logging

    from onmt_lite.opts import build_parser, config_opts, parse, translate_opts
    from onmt_lite.translate.run import translate
    from onmt_lite.utils.logging import init_logger

    parser = build_parser("onmt_lite_translate", [config_opts, translate_opts])
    opt = parse(parser, list(map(str, args)))
    log = init_logger(opt.log_file, file_level=opt.log_file_level)
    captured = logging.StreamHandler(io.StringIO())
    captured.setFormatter(log.handlers[0].formatter)
    log.addHandler(captured)
    threads = torch.get_num_threads()
    try:
        translate(opt)
    finally:
        torch.set_num_threads(threads)  # -threads: the command's own, not the tests'
        log.removeHandler(captured)
    return captured.stream.getvalue()


def trained_reversal_model(
    tmp_path_factory, name, preprocess_args, train_args, steps, **corpus_args
):
    """A model trained for ``steps`` steps on a reversal corpus of its own: ``{"model", "data",
    "src", "tgt"}`` (checkpoint, -data prefix, held-out source and target files)."""
    directory = str(tmp_path_factory.mktemp(name))
    prefix = preprocess_in_process(directory, *preprocess_args, **corpus_args)
    train_in_process(
        prefix,
        os.path.join(directory, "m"),
        *train_args,
        "-train_steps",
        steps,
        "-valid_steps",
        steps,
    )
    return {
        "model": os.path.join(directory, f"m_step_{steps}.pt"),
        "data": prefix,
        "src": os.path.join(directory, "src-valid.txt"),
        "tgt": os.path.join(directory, "tgt-valid.txt"),
    }


def lines(path):
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


def exact_match(hypotheses, references):
    return sum(h == r for h, r in zip(hypotheses, references)) / len(references)


# docs/usage.md, "What a line's output depends on": a score that sums n log-probabilities (the
# tokens and the end of sentence) is within n * SCORE_ROUNDING of the line's score decoded alone
SCORE_ROUNDING = 1e-4
PRINTED = 1e-4  # two scores printed to 4 decimals: each rounded by at most half of this


def scores_agree(a, b, n, printed=False):
    """Whether two scores of one line that sum ``n`` log-probabilities agree as docs/usage.md
    promises; ``printed``: as the command prints them (to 4 decimals)."""
    return abs(a - b) <= SCORE_ROUNDING * n + (PRINTED if printed else 0.0)


def assert_same_translation(a, b):
    """Two ``Result``s of one line decoded with different company: the same n-best words, and
    scores (gold scores too) that agree as docs/usage.md promises."""
    assert a.hypotheses == b.hypotheses
    for x, y, words in zip(a.scores, b.scores, a.tokens):
        assert scores_agree(x, y, len(words) + 1), (x, y, words)
    if a.gold_score is not None or b.gold_score is not None:
        assert a.gold_words == b.gold_words
        assert scores_agree(a.gold_score, b.gold_score, a.gold_words), (a.gold_score, b.gold_score)


def step_losses(lines):
    """``{step: "acc ...; ppl ...; xent ..."}`` from logged training lines."""
    out = {}
    for line in lines:
        if "] Step " in line:
            step = int(line.split("] Step ")[1].split("/")[0])
            out[step] = ";".join(line.split(";")[1:4])
    return out


def free_port():
    """A TCP port free on 127.0.0.1 now (another process may still take it before it is used)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
