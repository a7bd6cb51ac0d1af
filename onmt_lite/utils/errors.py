"""The error type for bad input, and the wrapper that turns it into exit status 2."""
import functools
import sys


class UserError(Exception):
    """Bad input from the user (file, option or data): reported as one line, exit status 2."""


def where(path, line=None):
    """Format a location for an error message: ``path`` or ``path:line``."""
    return f"{path}:{line}" if line is not None else str(path)


def run_command(name):
    """Decorate a command's ``main``: a UserError prints ``name: error: message`` and exits 2."""

    def decorate(main):
        @functools.wraps(main)
        def wrapped(*args, **kwargs):
            try:
                return main(*args, **kwargs)
            except UserError as err:
                print(f"{name}: error: {err}", file=sys.stderr)
                sys.exit(2)
            except KeyboardInterrupt:
                print(f"{name}: interrupted", file=sys.stderr)
                sys.exit(130)

        return wrapped

    return decorate
