"""The options a ``-loss_class`` declares: a researcher's loss adds an argument group of its own
(``LossComputeBase.add_options``), which ``onmt_lite_train`` parses and checks with its own options,
shows with ``-h``, saves in the checkpoint and restores on ``-train_from``.

The command learns the class before it parses: ``add_loss_class_options`` reads ``-loss_class``
(from the command line or the ``-config`` file) in a first, quiet pass, loads the class and lets it
add its options, with no default in the parsed namespace, so that ``fill_loss_options`` can tell a
value given now from one to restore: given, it is used; else the resumed checkpoint's, else the
class's default.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys

from onmt_lite.loss.build import load_loss_class, loss_option_defaults


def named_loss_class(parser: argparse.ArgumentParser, args: list[str] | None) -> str:
    """The ``-loss_class`` that ``args`` (default ``sys.argv[1:]``) or their ``-config`` file name,
    or "": a first pass of ``parser`` that asks for nothing and says nothing (the real parse
    reports the errors, and shows the help)."""
    args = sys.argv[1:] if args is None else list(args)
    required = [(action, action.required) for action in parser._actions]
    for action, _ in required:
        action.required = False
    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            known, _ = parser.parse_known_args([a for a in args if a not in ("-h", "--help")])
    except SystemExit:
        return ""
    finally:
        for action, was in required:
            action.required = was
    return getattr(known, "loss_class", "") or ""


def add_loss_class_options(parser: argparse.ArgumentParser, args: list[str] | None = None) -> None:
    """Let the class ``args`` name with ``-loss_class`` add its options to ``parser``; they are
    parsed and checked like the command's own, but left out of the namespace unless given."""
    spec = named_loss_class(parser, args)
    if not spec:
        return
    before = set(map(id, parser._actions))
    load_loss_class(spec).add_options(parser)
    for action in parser._actions:
        if id(action) not in before:
            action.default = argparse.SUPPRESS  # absent unless given: see fill_loss_options


def fill_loss_options(opt: argparse.Namespace, saved: dict | None = None) -> argparse.Namespace:
    """``opt`` with each option its ``-loss_class`` declares and the command did not give set to
    the ``saved`` value (a resumed checkpoint's options) or else the class's default."""
    if not getattr(opt, "loss_class", ""):
        return opt
    for name, default in loss_option_defaults(load_loss_class(opt.loss_class)).items():
        if not hasattr(opt, name):
            setattr(opt, name, (saved or {}).get(name, default))
    return opt
