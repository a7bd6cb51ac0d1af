"""Where an output path leads, and whether a command may write there: checked before any work.

``destination`` says how a path is written (``files.py`` writes it so): a symbolic link is
followed to its final target; an existing file that is not a regular file (a device, a FIFO, a
socket) and a name of an open file descriptor (/dev/stdout, /dev/fd/N) are written straight into.
The checks (``require_*``) refuse what a command could not write, or would write twice, before it
loads a model or reads its data. ``make_directories`` makes an output's missing directories and
``remove_directories`` removes them again when the run wrote nothing there.
"""

import contextlib
import os
import re
import stat
from collections.abc import Sequence

from onmt_lite.utils.errors import UserError

_DESCRIPTOR_NAMES = {"/dev/stdin": 0, "/dev/stdout": 1, "/dev/stderr": 2}
_DESCRIPTOR_PATH = re.compile(r"/(?:dev/fd|proc/self/fd)/(\d+)")


def _descriptor(path):
    """The file descriptor that ``path`` names (/dev/stdout, /dev/fd/N, /proc/self/fd/N), or
    None."""
    name = os.path.normpath(os.path.abspath(path))
    if name in _DESCRIPTOR_NAMES:
        return _DESCRIPTOR_NAMES[name]
    match = _DESCRIPTOR_PATH.fullmatch(name)
    return int(match.group(1)) if match else None


def destination(path):
    """How to write ``path``: ``("descriptor", fd)`` for a name of an open file descriptor,
    ``("stream", path)`` for an existing file that is not a regular file (device, FIFO, socket), or
    ``("atomic", target)`` with symbolic links resolved, for a regular file or a new path."""
    fd = _descriptor(path)
    if fd is not None:
        return "descriptor", fd
    target = os.path.realpath(path)
    try:
        mode = os.stat(target).st_mode
    except OSError:
        return "atomic", target  # a new file (or a dangling link: its target is created)
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):  # a directory: the rename reports it
        return "atomic", target
    return "stream", target


def _identities(kind: str, where) -> set:
    """What names the file of a destination (``destination``): its real path, and its device and
    inode where it exists (an open descriptor: the file open there)."""
    names = set() if kind == "descriptor" else {where}
    try:
        found = os.fstat(where) if kind == "descriptor" else os.stat(where)
    except OSError:
        return names
    return names | {(found.st_dev, found.st_ino)}


def require_distinct_outputs(
    outputs: Sequence[tuple[str, str]], appended: Sequence[tuple[str, str]] = ()
) -> None:
    """A UserError naming both options when two of ``outputs`` (``(option, path)`` pairs, the files
    one command writes) are one file (links followed) and one of them is replaced by a rename (a
    regular file or a new path): the content written first would be lost. Two names of one device,
    FIFO or open descriptor (``-output -`` and ``/dev/stdout``) are allowed: both are written into,
    in turn. ``appended`` (the command's log file) must not be replaced by any of ``outputs``."""
    seen = []
    for option, path, appends in [(*o, False) for o in outputs] + [(*a, True) for a in appended]:
        kind, where = destination(path)
        replaced = kind == "atomic" and not appends
        names = _identities(kind, where)
        for other_option, other_path, other_replaced, other_names in seen:
            if (replaced or other_replaced) and names & other_names:
                raise UserError(
                    f"{option} {path}: the same file as {other_option} {other_path}; "
                    f"give each output a file of its own"
                )
        seen.append((option, path, replaced, names))


def require_outputs_not_inputs(
    outputs: Sequence[tuple[str, str]], inputs: Sequence[tuple[str, str]]
) -> None:
    """A UserError naming both options when one of ``outputs`` (``(option, path)`` pairs) is a
    regular file among ``inputs``, which the command reads: writing it would lose the input (a
    translation's -output over its -src). Inputs that do not exist are left to their reader."""
    read = {}
    for option, path in inputs:
        with contextlib.suppress(OSError):
            found = os.stat(path)
            if stat.S_ISREG(found.st_mode):
                read.setdefault((found.st_dev, found.st_ino), (option, path))
    for option, path in outputs:
        kind, where = destination(path)
        for identity in _identities(kind, where) & read.keys():
            input_option, input_path = read[identity]
            raise UserError(
                f"{option} {path}: the same file as {input_option} {input_path}, which this "
                "command reads; give the output a file of its own"
            )


def require_directory(path, option):
    """The directory that ``path`` will be written in (that of a symbolic link's target); a
    UserError naming ``option`` if it is missing or not writable. A path that is written straight
    into (a device, a FIFO, /dev/stdout) needs no writable directory: its own directory is returned
    unchecked."""
    kind, target = destination(path)
    if kind != "atomic":
        return os.path.dirname(os.path.abspath(path))
    directory = os.path.dirname(target)
    if not os.path.isdir(directory):
        raise UserError(f"{option} {path}: directory {directory} does not exist")
    if not os.access(directory, os.W_OK):
        raise UserError(f"{option} {path}: directory {directory} is not writable")
    return directory


def require_file_path(path, option):
    """``require_directory`` for the path of one file to write: also a UserError naming ``option``
    if ``path`` is a directory or ends with a path separator (so that a command refuses it before
    any work, rather than failing at the final rename)."""
    if str(path).endswith(("/", os.sep)) or os.path.isdir(path):
        raise UserError(f"{option} {path}: is a directory; give the path of a file")
    return require_directory(path, option)


def missing_directories(path: str) -> list[str]:
    """The directories that ``os.makedirs(path)`` would make, the outermost first."""
    missing = []
    while not os.path.lexists(path) and os.path.dirname(path) != path:
        missing.append(path)
        path = os.path.dirname(path)
    return missing[::-1]


def require_makeable_directory(directory: str, name: str) -> str:
    """``directory`` with symbolic links resolved, once checked to be a writable directory or one
    that can be made (its nearest existing parent a writable directory); a UserError starting with
    ``name`` (an option and its value) otherwise. Makes nothing."""
    target = os.path.realpath(directory)
    missing = missing_directories(target)
    existing = os.path.dirname(missing[0]) if missing else target
    if not os.path.isdir(existing):
        raise UserError(
            f"{name}: cannot create the directory {target} ({existing} is not a directory)"
        )
    if not os.access(existing, os.W_OK | os.X_OK):
        if existing == target:
            raise UserError(f"{name}: directory {target} is not writable")
        raise UserError(
            f"{name}: cannot create the directory {target} ({existing} is not writable)"
        )
    return target


def make_directories(directory: str, name: str) -> list[str]:
    """Make ``directory`` and its missing parents, after ``require_makeable_directory``'s checks
    (a UserError starting with ``name``); returns those made, the outermost first, for
    ``remove_directories``."""
    target = require_makeable_directory(directory, name)
    made = missing_directories(target)
    try:
        os.makedirs(target, exist_ok=True)
    except OSError as err:
        remove_directories(made)
        raise UserError(f"{name}: cannot create the directory {target} ({err.strerror})") from None
    return made


def remove_directories(made: list[str]) -> None:
    """Remove the directories ``make_directories`` made, the innermost first, while they are
    empty: one that another writer put a file into stays, and so do those above it."""
    for directory in reversed(made):
        with contextlib.suppress(OSError):
            os.rmdir(directory)
