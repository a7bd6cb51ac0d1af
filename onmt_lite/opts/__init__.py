"""Every command-line option of onmt_lite, in groups, with OpenNMT-py 1.x names and defaults.

Each group is a function that adds its options to a parser, so the commands and the tests build
parsers the same way::

    parser = build_parser("onmt_lite_preprocess", [config_opts, preprocess_opts])
    opt = parse(parser, ["-train_src", "a.txt", ...])

Every option is spelled ``-name`` and ``--name``. On the command line, an OpenNMT-py 1.x option may
be abbreviated as 1.x's argparse allowed: to any prefix of its name that no other 1.x option of the
same command shares (``-beam 5`` is ``-beam_size 5`` in onmt_lite_translate). The abbreviation is
read as the full name and logged once at INFO; a prefix of several 1.x names (``-src_seq`` in
preprocessing) is refused naming them, and the abbreviation of a 1.x option onmt_lite does not have
is refused with the reason. Only 1.x's names are matched (``opennmt_py_1x.py`` lists them per
command): onmt_lite's own options, the tools' options and the keys of a ``-config`` file must be
spelled in full. A YAML file given with ``-config`` sets the same keys (``train_src: a.txt``) and
gives the same result as the command line; ``-save_config FILE`` writes such a file for the current
options and exits, as in OpenNMT-py 1.x. OpenNMT-py 1.x options that onmt_lite does not have are
refused by name, with the reason.
"""

from onmt_lite.opts.model import model_opts
from onmt_lite.opts.parser import (
    COMPATIBILITY_GROUP,
    UNSUPPORTED_OPTIONS,
    OptionParser,
    add,
    build_parser,
    check_values,
    compatibility_group,
    config_dict,
    config_opts,
    option_defaults,
    option_values,
    parse,
)
from onmt_lite.opts.preprocess import preprocess_opts
from onmt_lite.opts.train import train_opts
from onmt_lite.opts.translate import translate_opts
from onmt_lite.opts.values import choice, float_in, int_at_least

__all__ = [
    "COMPATIBILITY_GROUP",
    "UNSUPPORTED_OPTIONS",
    "OptionParser",
    "add",
    "build_parser",
    "check_values",
    "choice",
    "compatibility_group",
    "config_dict",
    "config_opts",
    "float_in",
    "int_at_least",
    "option_defaults",
    "option_values",
    "parse",
    "preprocess_opts",
    "model_opts",
    "train_opts",
    "translate_opts",
]
