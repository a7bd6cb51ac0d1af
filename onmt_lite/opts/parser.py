"""The option parser: -name and --name spellings, 1.x abbreviations, YAML configs, one-line errors,
unsupported options."""

import argparse
import re
import sys

import configargparse
import yaml

from onmt_lite.opts.opennmt_py_1x import OPENNMT_PY_1X_OPTIONS
from onmt_lite.opts.values import log_level
from onmt_lite.utils.errors import UserError, set_debug
from onmt_lite.utils.files import write_text
from onmt_lite.utils.logging import log_when_ready
from onmt_lite.utils.output_paths import require_file_path

# OpenNMT-py 1.x options that onmt_lite does not implement, with the reason given to the user. Each
# reason says what the option is for in 1.x and that onmt_lite lacks that (tests/unit/test_opts.py
# checks that unrelated options do not share a reason).
UNSUPPORTED_OPTIONS = {
    **dict.fromkeys(
        [
            "src_dir",
            "image_channel_size",
            "sample_rate",
            "window_size",
            "window_stride",
            "window",
            "n_stft",
            "audio_enc_pooling",
        ],
        "image and audio input are not supported (text only)",
    ),
    "exp_host": "Crayon logging servers are not supported (1.x declared it and never read it); "
    "use -tensorboard",
    **dict.fromkeys(
        ["bridge_extra_node", "bidir_edges", "state_dim", "n_edge_types", "n_node", "n_steps"],
        "a GGNN option: the GGNN (graph) encoder is not implemented",
    ),
    "src_vocab": "the vocabularies come from -data (in training this is the GGNN encoder's option)",
}


def _plain_help(text, default):
    if default in (None, "", [], False):
        return text
    return f"{text} (default: {default})"


def add(group, name, *aliases, help, **kwargs):  # noqa: A002  (argparse's own keyword)
    """Add option ``-name``/``--name`` (plus ``aliases``) with its default in the help text."""
    flags = [f"-{name}", f"--{name}"] + list(aliases)
    default = kwargs.get("default")
    if kwargs.get("action") == "store_true":
        default = None
    group.add_argument(*flags, help=_plain_help(help, default), **kwargs)


def log_file_opts(group):
    """``-log_file`` and ``-log_file_level``, as every command has them."""
    add(group, "log_file", default="", help="Also write the log to this file")
    add(
        group,
        "log_file_level",
        type=log_level,
        default=0,
        help="The least level the log file records (CRITICAL, ERROR, WARNING, INFO, DEBUG, NOTSET "
        "or 50 ... 0); the log records INFO and above",
    )


def opennmt_py_1x_command(command):
    """Mark an option group (a function such as ``train_opts``) as part of OpenNMT-py 1.x's
    ``command`` (preprocess, train or translate): a parser built with it matches that command's
    abbreviations."""

    def mark(add_group):
        add_group.opennmt_py_1x_command = command
        return add_group

    return mark


NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")  # argparse's own test: a value, not an option


class OptionParser(configargparse.ArgumentParser):
    """configargparse with YAML configs, one-line errors (exit 2) and OpenNMT-py 1.x's
    abbreviations.

    ``opennmt_py_1x_command`` (preprocess, train or translate; ``build_parser`` sets it from the
    option groups) names the 1.x command whose abbreviations the parser accepts, as 1.x's argparse
    did: a prefix of exactly one of that command's 1.x option names (``-beam`` for ``-beam_size``),
    on the command line, is read as the full name and logged once at INFO. A prefix of several 1.x
    names is refused, naming them; a prefix of an option that onmt_lite refuses is refused with the
    reason. Only 1.x names are abbreviated: onmt_lite's own options (and every option of a parser
    without a 1.x command, such as the tools') must be spelled in full, and so must the keys of a
    -config file. An exact onmt_lite option name is never read as an abbreviation (``-gpu`` in
    training, ``-out``).
    """

    def __init__(self, prog, description=None, opennmt_py_1x_command=None):
        super().__init__(
            prog=prog,
            description=description,
            config_file_parser_class=configargparse.YAMLConfigFileParser,
            formatter_class=argparse.HelpFormatter,
            allow_abbrev=False,
        )
        self.opennmt_py_1x_command = opennmt_py_1x_command
        self.given_options = set()  # the dests the last parse was given (see _get_values)
        self.add_argument(
            "-debug",
            "--debug",
            action="store_true",
            help="On an error, print the Python traceback as well as the one-line message",
        )

    def _get_option_tuples(self, option_string):
        # argparse (3.11) matches single-dash abbreviations even with allow_abbrev=False:
        # "-src_vocab_s 5" would match onmt_lite's own names. Abbreviations are expanded by
        # expand_abbreviations before argparse sees the arguments, against 1.x's names only.
        return []

    def convert_item_to_command_line_arg(self, action, key, value):
        # a -config file's empty list for an option of one value or more (configargparse's
        # -save_config, OpenNMT-py 1.x's, writes a default [] so): the default, not a refusal
        if action is not None and action.nargs == "+" and value == []:
            return []
        return super().convert_item_to_command_line_arg(action, key, value)

    def parse_known_args(self, args=None, namespace=None, **kwargs):
        args = sys.argv[1:] if args is None else [args] if isinstance(args, str) else list(args)
        self.given_options = set()
        return super().parse_known_args(self.expand_abbreviations(args), namespace, **kwargs)

    def _get_values(self, action, arg_strings):
        # argparse reads a value this way only for an option given (on the command line or, as
        # configargparse passes it, in a -config file), never for a default: the record of what
        # the user asked for, against which a default or a checkpoint's value can be told apart
        self.given_options.add(action.dest)
        return super()._get_values(action, arg_strings)

    def abbreviated_name(self, token):
        """The 1.x option name that ``token`` (``-name``, ``--name`` or ``--name=value``)
        abbreviates, or None when it is no abbreviation (an exact name, a value, or a prefix of no
        1.x name); exits (status 2) when it is ambiguous."""
        names = OPENNMT_PY_1X_OPTIONS.get(self.opennmt_py_1x_command, ())
        option = token.split("=", 1)[0]
        if (
            not names
            or not option.startswith("-")
            or option in ("-", "--")
            or " " in token
            or option in self._option_string_actions
            or NEGATIVE_NUMBER.match(token)
        ):
            return None
        bare = option[2:] if option.startswith("--") else option[1:]
        if bare in names:
            return None
        matches = [name for name in names if name.startswith(bare)]
        if len(matches) > 1:
            self.error(
                f"ambiguous option: -{bare} could match {', '.join('-' + m for m in matches)} "
                f"(OpenNMT-py 1.x option names); give more of the name"
            )
        return matches[0] if matches else None

    def expand_abbreviations(self, args):
        """``args`` with each abbreviated 1.x option name replaced by the full name (see the
        class)."""
        expanded = []
        notes = []
        for i, token in enumerate(args):
            if token == "--":
                return expanded + list(args[i:])
            name = self.abbreviated_name(token)
            if name is None:
                expanded.append(token)
                continue
            option, sep, value = token.partition("=")
            if f"-{name}" not in self._option_string_actions:
                if name in UNSUPPORTED_OPTIONS:
                    self.error(
                        f"option {option} (read as -{name}) is not supported by onmt_lite: "
                        f"{UNSUPPORTED_OPTIONS[name]}"
                    )
                expanded.append(token)
                continue
            dashes = "--" if option.startswith("--") else "-"
            expanded.append(f"{dashes}{name}{sep}{value}")
            note = f"{option} read as {dashes}{name}"
            if note not in notes:
                notes.append(note)
        for note in notes:
            log_when_ready(note)
        return expanded

    def error(self, message):
        # one line
        message = " ".join(line.strip() for line in str(message).splitlines() if line.strip())
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        sys.exit(2)


COMPATIBILITY_GROUP = "OpenNMT-py 1.x compatibility"


def compatibility_group(parser):
    """The ``-h`` group of the options that exist only so that OpenNMT-py 1.x command lines parse:
    each takes 1.x's one text-model value (and refuses the others with the reason), or is a switch
    that onmt_lite does not need; none changes what the command does."""
    for group in parser._action_groups:
        if group.title == COMPATIBILITY_GROUP:
            return group
    return parser.add_argument_group(
        COMPATIBILITY_GROUP, "Accepted for OpenNMT-py 1.x compatibility; no effect."
    )


def config_opts(parser):
    group = parser.add_argument_group("Config")
    group.add_argument(
        "-config",
        "--config",
        is_config_file_arg=True,
        help="Read options from this YAML file (keys are option names)",
    )
    add(
        group,
        "save_config",
        default=None,
        help="Write the options as a YAML config to this file and exit",
    )


def build_parser(prog, groups, description=None):
    """A parser for ``prog`` holding the option ``groups`` (functions such as
    ``preprocess_opts``)."""
    commands = {getattr(add_group, "opennmt_py_1x_command", None) for add_group in groups} - {None}
    parser = OptionParser(prog, description, commands.pop() if len(commands) == 1 else None)
    for add_group in groups:
        add_group(parser)
    return parser


def option_defaults(groups):
    """``{name: default}`` of every option the groups define (e.g. to complete a checkpoint's
    options)."""
    parser = build_parser("defaults", groups)
    return {a.dest: a.default for a in parser._actions if a.option_strings and a.dest != "help"}


def check_values(groups, values, source):
    """Check option ``values`` (a plain dict, e.g. a checkpoint's options) as the command line
    would: types, ranges and choices of every option the groups define; a UserError naming
    ``source``."""
    parser = build_parser("check", groups)
    for action in parser._actions:
        if action.dest not in values or values[action.dest] is None or not action.option_strings:
            continue
        value = values[action.dest]
        for item in value if isinstance(value, (list, tuple)) else [value]:
            try:
                parsed = (
                    action.type(item if isinstance(item, str) else str(item))
                    if action.type
                    else item
                )
            except (argparse.ArgumentTypeError, ValueError, TypeError) as err:
                raise UserError(
                    f"{source}: option -{action.dest} {item!r} is not valid ({err})"
                ) from None
            if action.choices is not None and parsed not in action.choices:
                raise UserError(
                    f"{source}: option -{action.dest} {item!r} is not one of {list(action.choices)}"
                )


def _refuse_unknown(parser, unknown):
    for token in unknown:
        name = token.lstrip("-").split("=", 1)[0]
        if token.startswith("-") and name in UNSUPPORTED_OPTIONS:
            parser.error(
                f"option -{name} is not supported by onmt_lite: {UNSUPPORTED_OPTIONS[name]}"
            )
    # the command line's abbreviations are expanded: these come from a -config file
    for token in unknown:
        full = parser.abbreviated_name(token)
        if full is not None:
            parser.error(
                f"-{token.lstrip('-').split('=', 1)[0]} in a -config file: keys must be full "
                f"option names (-{full}?)"
            )
    parser.error(f"unrecognized arguments: {' '.join(unknown)}")


def config_dict(parser, opt):
    """The options of ``opt`` that a -config file can give back, as a plain dict keyed by option
    name (a -config file's keys), without the config options and without None and 1.x's [None]
    (-train_ids, -data_ids: no names; YAML would give back "None"), defaults that leaving the key
    out gives back. An option's key is its dest where an option of that name exists (``-brnn`` sets
    ``-encoder_type``'s), else its own name (``-from``, whose dest is ``from_format``)."""
    names = {string.lstrip("-") for action in parser._actions for string in action.option_strings}
    values = {}
    for action in parser._actions:
        if action.dest in ("help", "config", "save_config", "debug") or not action.option_strings:
            continue
        value = getattr(opt, action.dest)
        if value is not None and value != [None]:
            key = action.dest if action.dest in names else action.option_strings[0].lstrip("-")
            values[key] = value
    return values


def option_values(values: dict) -> dict:
    """``values`` (``vars`` of a parsed namespace) without what ``parse`` records beside the
    options (``given_options``): what a checkpoint keeps."""
    return {name: value for name, value in values.items() if name != "given_options"}


def parse(parser, args=None):
    """Parse ``args`` (default ``sys.argv[1:]``); handle ``-save_config``; refuse unknown
    options. ``opt.given_options`` holds the dests of the options given, on the command line or in
    a -config file (the others hold their defaults)."""
    opt, unknown = parser.parse_known_args(args)
    if unknown:
        _refuse_unknown(parser, unknown)
    opt.given_options = frozenset(parser.given_options)
    set_debug(opt.debug)
    if getattr(opt, "save_config", None):
        require_file_path(opt.save_config, "-save_config")
        values = config_dict(parser, opt)
        write_text(opt.save_config, yaml.safe_dump(values, sort_keys=False, allow_unicode=True))
        print(f"Wrote config file to {opt.save_config}")
        sys.exit(0)
    return opt
