"""Errors and how a command reports them.

``run_command`` wraps a command's ``main``: a UserError (bad input: a file, an option, the data, a
file that cannot be written) prints ``NAME: error: MESSAGE`` and exits 2; a signal that stopped
training cleanly (``Stopped``) exits 128 + the signal number; any other exception is an internal
error: one line and exit 1. ``-debug`` (or ``set_debug(True)``) shows the Python traceback instead.
The line also goes to the -log_file once the command has opened one (a stop: a WARNING record).
"""

import functools
import logging
import sys
import traceback

_DEBUG = False


class UserError(Exception):
    """Bad input from the user (file, option or data): reported as one line, exit status 2."""


class Stopped(Exception):
    """A run ended early, cleanly, on a signal; ``exit_code`` is 128 + the signal number."""

    def __init__(self, message, exit_code):
        super().__init__(message)
        self.exit_code = exit_code


def set_debug(debug):
    """Show tracebacks of errors (the -debug option)."""
    global _DEBUG
    _DEBUG = bool(debug)


def where(path, line=None):
    """Format a location for an error message: ``path`` or ``path:line`` (``-``: standard
    input)."""
    name = "standard input" if str(path) == "-" else str(path)
    return f"{name}:{line}" if line is not None else name


def _one_line(text):
    return " ".join(str(text).split())


def _report(err):
    """``(exit status, message)`` for an exception that ended a command."""
    if isinstance(err, UserError):
        return 2, f"error: {_one_line(err)}"
    if isinstance(err, Stopped):
        return err.exit_code, _one_line(err)
    if isinstance(err, KeyboardInterrupt):
        return 130, "interrupted"
    hint = "" if _DEBUG else " (run with -debug for the traceback)"
    return 1, f"internal error: {type(err).__name__}: {_one_line(err)}{hint}"


def _to_log_files(line: str, level: int) -> None:
    """``line`` as a record of ``level`` in the -log_file, if the command opened one: a run in the
    background is read there (the console has the line already)."""
    logger = logging.getLogger("onmt_lite")  # utils.logging's, which imports this module
    record = logger.makeRecord(logger.name, level, __file__, 0, line, None, None)
    for handler in logger.handlers:
        if isinstance(handler, logging.FileHandler):
            handler.handle(record)


def report(name: str, err: BaseException) -> int:
    """Report ``err``, which ended the command ``name``, as ``run_command`` does (one line on
    stderr and in the -log_file; the traceback with -debug); returns the exit status."""
    code, message = _report(err)
    if _DEBUG:
        traceback.print_exception(err)
    if message:  # a Stopped without a message: the reason was reported already
        line = f"{name}: {message}"
        print(line, file=sys.stderr)
        # a stop on a signal (128 + its number) or Ctrl-C is no error
        _to_log_files(line, logging.ERROR if code < 128 else logging.WARNING)
    return code


def run_command(name):
    """Decorate a command's ``main`` so that every error is one line on stderr and an exit
    status."""

    def decorate(main):
        @functools.wraps(main)
        def wrapped(*args, **kwargs):
            try:
                return main(*args, **kwargs)
            except (KeyboardInterrupt, Exception) as err:  # every failure is reported
                sys.exit(report(name, err))

        return wrapped

    return decorate
