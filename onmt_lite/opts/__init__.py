"""Every command-line option of onmt_lite, in groups, with OpenNMT-py 1.x names and defaults.

Each group is a function that adds its options to a parser, so the commands and the tests build
parsers the same way::

    parser = build_parser("onmt_lite_preprocess", [config_opts, preprocess_opts])
    opt = parse(parser, ["-train_src", "a.txt", ...])

Every option is spelled ``-name`` and ``--name``. Abbreviations are not accepted (``-train`` is not
``-train_src``). A YAML file given with ``-config`` sets the same keys (``train_src: a.txt``) and gives
the same result as the command line; ``-save_config FILE`` writes such a file for the current
options and exits, as in OpenNMT-py 1.x. OpenNMT-py 1.x options that onmt_lite does not have are
refused by name, with the reason.
"""
from onmt_lite.opts.model import model_opts
from onmt_lite.opts.parser import (COMPATIBILITY_GROUP, UNSUPPORTED_OPTIONS, OptionParser, add, build_parser,
                                   check_values, choice, compatibility_group, config_dict, config_opts, float_in,
                                   int_at_least, option_defaults, parse)
from onmt_lite.opts.preprocess import preprocess_opts
from onmt_lite.opts.train import train_opts
from onmt_lite.opts.translate import translate_opts

__all__ = ["COMPATIBILITY_GROUP", "UNSUPPORTED_OPTIONS", "OptionParser", "add", "build_parser", "check_values",
           "choice", "compatibility_group", "config_dict", "config_opts", "float_in", "int_at_least",
           "option_defaults", "parse", "preprocess_opts", "model_opts", "train_opts", "translate_opts"]
