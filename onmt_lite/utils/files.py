"""Reading and writing files safely: tensors only, and nothing half-written under a final name.

Every file is written under a temporary name beside its target (``.NAME.XXXX.tmp``), flushed to
disk, and renamed into place only when the whole write succeeded. ``StagedOutputs`` does the same
for a group of files that must appear together (preprocess shards, a translation's outputs): all are
renamed at the end, or all are removed if anything fails. A failed write (full disk, file size
limit, read-only directory) is a UserError naming the file and the reason.

A killed writer leaves its ``.NAME.XXXX.tmp`` behind; ``locks.remove_stale_temporaries`` removes
them at the next run. Where runs on the same names may overlap (translation), the writer holds a
``flock`` on each temporary while it lives, and the cleaner removes only temporaries it can lock.

What a path points at decides how it is written (``output_paths.destination``): a symbolic link
is followed, and the temporary is made beside its final target (the link stays a link); an existing
file that is not a regular file (a character device such as /dev/null, a FIFO, a socket) and a
name of an open file descriptor (/dev/stdout, /dev/stderr, /dev/fd/N, /proc/self/fd/N) are written
straight into, with no temporary and no rename, as a shell's ``>`` would.
"""

import contextlib
import io
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable

from onmt_lite.utils.errors import UserError
from onmt_lite.utils.locks import _UMASK, TEMP_SUFFIX, locked_temporary
from onmt_lite.utils.output_paths import destination, make_directories, remove_directories


def _open_stream(kind, where, buffering=-1):
    """A binary file object writing straight into a file descriptor (``kind`` "descriptor",
    after Python's own standard streams are flushed) or a non-regular file."""
    if kind == "descriptor":
        if where in (1, 2):
            getattr(sys, "stdout" if where == 1 else "stderr").flush()
        return os.fdopen(os.dup(where), "wb", buffering=buffering)
    return open(where, "wb", buffering=buffering)  # a FIFO: waits for a reader, as a shell's > does


def _write_stream(kind, where, data, final):
    """Write ``data`` straight into a file descriptor or a non-regular file; a UserError naming
    ``final`` on failure."""
    try:
        with _open_stream(kind, where) as f:
            f.write(data)
    except OSError as err:
        raise UserError(f"{final}: cannot write ({err.strerror})") from None


def _temp_name(path):
    directory, base = os.path.split(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{base}.", suffix=TEMP_SUFFIX, dir=directory)
    except OSError as err:
        raise UserError(f"{path}: cannot write ({err.strerror})") from None
    os.close(fd)
    os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; give the file the mode open() would
    return tmp


def _write_file(tmp, write, final):
    """Open ``tmp``, call ``write(file)`` and flush the file to disk; a UserError naming ``final``
    on failure."""
    try:
        with open(tmp, "wb") as f:
            write(f)
            _flush_to_disk(f, final)
    except OSError as err:
        raise UserError(f"{final}: cannot write ({err.strerror})") from None


def _write_bytes(tmp, data, final):
    """Write ``data`` to ``tmp`` and flush it to disk; a UserError naming ``final`` on failure."""
    _write_file(tmp, lambda f: f.write(data), final)


def _torch_save(obj, f):
    """``torch.save`` into the Python file object ``f``, whose write reports an OS error as
    ``OSError`` (torch's own file writer, given a path, hides it)."""
    import torch  # imported here so that text-only tools do not pay for loading torch

    try:
        torch.save(obj, f)
    except RuntimeError as err:  # the zip writer fails again closing the file: report the OS error
        if isinstance(err.__context__, OSError):
            raise err.__context__ from None
        raise


def _serialize(obj):
    """``torch.save`` into memory, for a destination written straight into (see
    ``destination``)."""
    buffer = io.BytesIO()
    _torch_save(obj, buffer)
    return buffer.getbuffer()


@contextlib.contextmanager
def atomic_path(path):
    """Yield a temporary path beside ``path`` (beside its final target if it is a symbolic link);
    rename it to that target if the block succeeds."""
    target = os.path.realpath(path)
    tmp = _temp_name(target)
    try:
        yield tmp
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def write_bytes(data, path):
    """Write ``data`` (bytes) to ``path``: atomically for a regular file or a new path (through a
    symbolic link to its target), straight into a device, a FIFO or an open file descriptor."""
    kind, where = destination(path)
    if kind != "atomic":
        _write_stream(kind, where, data, path)
        return
    with atomic_path(where) as tmp:
        _write_bytes(tmp, data, path)


def save_tensors(obj, path):
    """``torch.save`` plain data and tensors to ``path`` atomically: straight into a temporary file,
    so that a checkpoint is not held in memory a second time as bytes."""
    kind, where = destination(path)
    if kind != "atomic":
        write_bytes(_serialize(obj), path)
        return
    with atomic_path(where) as tmp:
        _write_file(tmp, lambda f: _torch_save(obj, f), path)


def load_tensors(path, what):
    """``torch.load(path, weights_only=True)``: tensors and plain data only. A missing, corrupt or
    truncated file, or one that holds other pickled Python objects (which could run code when
    unpickled), is a UserError naming the file and calling it ``what``."""
    import pickle

    import torch

    if os.path.isdir(path):
        raise UserError(f"{path}: a directory, not a {what}")
    if not os.path.isfile(path):
        raise UserError(f"{path}: {what} not found")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        code = re.search(r"GLOBAL (\S+)|unrecognized function (\S+)", str(err))
        if code:
            found = code.group(1) or code.group(2)
            raise UserError(
                f"{path}: refused: the {what} holds pickled Python objects ({found}), not only "
                f"tensors and plain data (onmt_lite never unpickles code)"
            ) from None
        reason = str(err).split("WeightsUnpickler error:")[-1]
    except Exception as err:  # noqa: BLE001  (torch raises several types for corrupt files)
        reason = str(err) or type(err).__name__
    raise UserError(
        f"{path}: cannot load {what}: corrupt or truncated ({reason.strip().splitlines()[0]})"
    )


def write_text(path, text):
    """Write a UTF-8 text file, as ``write_bytes`` does."""
    write_bytes(text.encode("utf-8"), path)


def _text_writer(f, final: str) -> Callable[[str], None]:
    """``write(text)``: UTF-8 text into the unbuffered binary file ``f``; a UserError naming
    ``final`` on failure."""

    def write(text: str) -> None:
        data = memoryview(text.encode("utf-8"))
        try:
            while data:  # an unbuffered write may write part (a file size limit): the next fails
                data = data[f.write(data) :]
        except OSError as err:
            raise UserError(f"{final}: cannot write ({err.strerror})") from None

    return write


def _flush_to_disk(f, final):
    """Flush ``f`` to disk; a UserError naming ``final`` on failure."""
    try:
        f.flush()
        os.fsync(f.fileno())
    except OSError as err:
        raise UserError(f"{final}: cannot write ({err.strerror})") from None


class StagedOutputs:
    """Files written under temporary names and renamed together by ``commit()``.

    Used as a context manager: leaving the block with an exception removes every staged file. A
    symbolic link's target is replaced (the link stays); a file that is written straight into (a
    device, a FIFO: see ``destination``) is held in memory and written by ``commit()``, or, opened
    with ``open_text``, written into as the text comes (nothing there can be taken back).

    The temporaries of ``open_text`` and ``stage_directory`` are held with a ``flock`` until
    ``commit()`` or ``discard()``: ``remove_stale_temporaries`` removes those of a killed process
    only, never those of a live one.
    """

    STAGING = "staging"  # stage_directory(DIR) stages into DIR/.staging.XXXX.tmp

    def __init__(self):
        self._staged = []  # (tmp, final, target)
        self._streamed = []  # (kind, where, data, final)
        self._open = []  # (file, final, staged): written piece by piece, open until commit()
        self._directories = []  # (tmp, target, descriptor holding its lock)
        self._made = []  # the directories made for the outputs, the outermost first

    def path_for(self, final):
        """A temporary path to write ``final``'s content into (for a regular file or a new path)."""
        target = os.path.realpath(final)
        tmp = _temp_name(target)
        self._staged.append((tmp, final, target))
        return tmp

    def open_text(self, final: str) -> Callable[[str], None]:
        """``write(text)``, which appends UTF-8 text to ``final`` piece by piece: into a locked
        temporary that ``commit()`` renames, or straight into a device, a FIFO or an open file
        descriptor (opened now, as a shell's ``>`` would)."""
        kind, where = destination(final)
        if kind != "atomic":
            try:
                f = _open_stream(kind, where, buffering=0)
            except OSError as err:
                raise UserError(f"{final}: cannot write ({err.strerror})") from None
            self._open.append((f, final, False))
            return _text_writer(f, final)
        tmp, fd = locked_temporary(where, final)
        self._staged.append((tmp, final, where))
        f = os.fdopen(fd, "wb", buffering=0)  # unbuffered: a failed write fails there, not at close
        self._open.append((f, final, True))
        return _text_writer(f, final)

    def make_directory(self, directory: str, name: str) -> None:
        """Make ``directory`` and its missing parents now (a UserError starting with ``name`` if
        that cannot be done): ``commit()`` keeps them, ``discard()`` removes them if left empty."""
        self._made += make_directories(directory, name)

    def stage_directory(self, final: str) -> str:
        """A new, locked directory inside the directory ``final`` to write files into; ``commit()``
        moves them into ``final`` (replacing files of the same names). ``final`` and its missing
        parents are made now: ``commit()`` keeps them, ``discard()`` removes them."""
        target = os.path.realpath(final)
        self.make_directory(target, final)
        tmp, fd = locked_temporary(os.path.join(target, self.STAGING), final, directory=True)
        self._directories.append((tmp, target, fd))
        return tmp

    def _stage(self, data, final):
        """Stage the bytes ``data`` as ``final`` (held in memory when ``final`` is written straight
        into)."""
        kind, where = destination(final)
        if kind != "atomic":
            self._streamed.append((kind, where, data, final))
            return
        _write_bytes(self.path_for(final), data, final)

    def save(self, obj, final):
        """Stage plain data and tensors as ``final`` (``torch.save``, into the temporary file
        itself)."""
        if destination(final)[0] != "atomic":
            self._stage(_serialize(obj), final)
            return
        _write_file(self.path_for(final), lambda f: _torch_save(obj, f), final)

    def write_text(self, text, final):
        """Stage the UTF-8 text file ``final``."""
        self._stage(text.encode("utf-8"), final)

    def final_paths(self):
        return [final for _, final, _ in self._staged] + [s[3] for s in self._streamed]

    def commit(self):
        for f, final, staged in self._open:
            if staged:
                _flush_to_disk(f, final)
        for tmp, _, target in self._staged:
            os.replace(tmp, target)
        for tmp, target, _ in self._directories:
            for name in sorted(os.listdir(tmp)):
                os.replace(os.path.join(tmp, name), os.path.join(target, name))
            os.rmdir(tmp)
        for kind, where, data, final in self._streamed:
            _write_stream(kind, where, data, final)
        self._close()
        self._staged = []
        self._streamed = []
        self._made = []

    def discard(self):
        for tmp, _, _ in self._staged:
            if os.path.exists(tmp):
                os.remove(tmp)
        for tmp, _, _ in self._directories:
            shutil.rmtree(tmp, ignore_errors=True)
        self._close()  # after the removals: the locks kept other processes off them meanwhile
        remove_directories(self._made)
        self._staged = []
        self._streamed = []
        self._made = []

    def _close(self):
        """Close the files written piece by piece and release the locks of the temporaries."""
        for f, _, _ in self._open:
            f.close()
        for _, _, fd in self._directories:
            os.close(fd)
        self._open = []
        self._directories = []

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self.discard()
        return False
