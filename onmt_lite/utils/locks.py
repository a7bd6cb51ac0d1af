"""Locks held with ``flock``, which end with their process however it ends: a run's lock file
(``try_lock``: one training or preprocessing run on one output prefix at a time) and the locked
temporaries of writers whose runs may overlap, so that the temporaries a killed writer left are
removed at the next run and a live writer's are kept (``remove_stale_temporaries``)."""

import contextlib
import errno
import fcntl
import glob
import os
import shutil
import stat
import tempfile

from onmt_lite.utils.errors import UserError

_UMASK = os.umask(0)
os.umask(_UMASK)
TEMP_SUFFIX = ".tmp"


def locked_temporary(target: str, final: str, directory: bool = False) -> tuple[str, int]:
    """A new temporary beside ``target`` (``.NAME.XXXX.tmp``, a directory with ``directory``) and a
    descriptor of it that holds an exclusive ``flock`` on it until closed: while this process
    lives, ``remove_stale_temporaries`` leaves it. A UserError naming ``final`` if it cannot be
    made."""
    parent, base = os.path.split(target)
    while True:
        try:
            if directory:
                tmp = tempfile.mkdtemp(prefix=f".{base}.", suffix=TEMP_SUFFIX, dir=parent)
                try:
                    fd = os.open(tmp, os.O_RDONLY | os.O_DIRECTORY)
                except FileNotFoundError:
                    continue  # a cleaner removed it before it was locked: make another
            else:
                fd, tmp = tempfile.mkstemp(prefix=f".{base}.", suffix=TEMP_SUFFIX, dir=parent)
                os.fchmod(fd, 0o666 & ~_UMASK)  # mkstemp makes 0600; give it the mode open() would
        except OSError as err:
            raise UserError(f"{final}: cannot write ({err.strerror})") from None
        # waits while a cleaner holds the lock: one that took it before this process did removes it
        fcntl.flock(fd, fcntl.LOCK_EX)
        if _same_file_at(fd, tmp):
            return tmp, fd
        os.close(fd)


def _same_file_at(fd: int, path: str) -> bool:
    """Whether ``path`` (not followed if a link) is the file open as ``fd``."""
    try:
        return os.path.samestat(os.fstat(fd), os.lstat(path))
    except OSError:
        return False


def remove_stale_temporaries(path_pattern):
    """Remove the temporaries (``.NAME.XXXX.tmp`` files, or staging directories) that a killed
    writer of files matching ``path_pattern`` (a glob) left; returns their paths. One that a live
    process holds a ``flock`` on (``StagedOutputs.open_text``, ``stage_directory``) is its writer's
    and kept, as is one that this process cannot open to tell."""
    directory, base = os.path.split(os.path.abspath(path_pattern))
    candidates = glob.glob(os.path.join(glob.escape(directory), f".{base}.*{TEMP_SUFFIX}"))
    return [path for path in candidates if _remove_unless_locked(path)]


def _remove_unless_locked(path: str) -> bool:
    """Remove ``path`` (a file or a directory tree) unless another process holds a ``flock`` on it;
    whether it was removed."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as err:
        if err.errno != errno.ELOOP:
            return False  # gone meanwhile (renamed into place), or not this process's to open
        return _remove(path, tree=False)  # a symbolic link: no writer's temporary
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False  # its writer is alive
        if not _same_file_at(fd, path):
            return False
        # removed with the lock held: a writer that made it and waits for the lock makes another
        return _remove(path, tree=stat.S_ISDIR(os.fstat(fd).st_mode))
    finally:
        os.close(fd)


def _remove(path: str, tree: bool) -> bool:
    try:
        if tree:
            shutil.rmtree(path)
        else:
            os.remove(path)
    except FileNotFoundError:
        return False
    return True


def try_lock(path):
    """Open ``path`` (created if missing) and take an exclusive ``flock`` on it without waiting.

    Returns the open file, which holds the lock until ``release_lock`` or the end of the process,
    however it ends (a lock file left by a killed process does not block: only a live holder does);
    its content is the holder's process id. Returns None if another process holds the lock."""
    while True:
        try:
            f = open(path, "a+", encoding="utf-8")
        except OSError as err:
            raise UserError(f"{path}: cannot open the lock file ({err.strerror})") from None
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # BlockingIOError: held by another process (or another open of it here)
            f.close()
            return None
        if _names(f, path):
            break
        f.close()  # its holder removed it meanwhile (release_lock): lock the file now at ``path``
    f.seek(0)
    f.truncate()
    f.write(f"{os.getpid()}\n")
    f.flush()
    return f


def _names(f, path):
    """Whether ``path`` is still the file open as ``f``."""
    try:
        return os.path.samestat(os.fstat(f.fileno()), os.stat(path))
    except OSError:
        return False


def release_lock(f):
    """Remove the lock file ``try_lock`` returned, then release the lock: a process that opened the
    removed file meanwhile sees, once it has locked it, that it is gone, and locks a new one
    (``try_lock``'s loop)."""
    if _names(f, f.name):
        with contextlib.suppress(OSError):
            os.remove(f.name)
    f.close()


def lock_holder(path):
    """The process id written in a lock file, as text ("" if unknown)."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip()
    except (OSError, UnicodeDecodeError):
        return ""
