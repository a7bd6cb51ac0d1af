"""Reading and writing files safely: tensors only, and nothing half-written under a final name.

Every file is written under a temporary name beside its target (``.NAME.XXXX.tmp``), flushed to
disk, and renamed into place only when the whole write succeeded. ``StagedOutputs`` does the same for
a group of files that must appear together (preprocess shards): all are renamed at the end, or all
are removed if anything fails. A failed write (full disk, file size limit, read-only directory) is a
UserError naming the file and the reason.
"""
import contextlib
import glob
import io
import os
import re
import tempfile

from onmt_lite.utils.errors import UserError

_UMASK = os.umask(0)
os.umask(_UMASK)
TEMP_SUFFIX = ".tmp"


def _temp_name(path):
    directory, base = os.path.split(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{base}.", suffix=TEMP_SUFFIX, dir=directory)
    except OSError as err:
        raise UserError(f"{path}: cannot write ({err.strerror})") from None
    os.close(fd)
    os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; give the file the mode open() would
    return tmp


def remove_stale_temporaries(path_pattern):
    """Remove temporary files left by a killed writer of files matching ``path_pattern`` (a glob);
    returns their paths."""
    directory, base = os.path.split(os.path.abspath(path_pattern))
    stale = glob.glob(os.path.join(glob.escape(directory), f".{base}.*{TEMP_SUFFIX}"))
    for path in stale:
        os.remove(path)
    return stale


def require_directory(path, option):
    """The directory that ``path`` will be written in; a UserError naming ``option`` if it is missing
    or not writable."""
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise UserError(f"{option} {path}: directory {directory} does not exist")
    if not os.access(directory, os.W_OK):
        raise UserError(f"{option} {path}: directory {directory} is not writable")
    return directory


def require_file_path(path, option):
    """``require_directory`` for the path of one file to write: also a UserError naming ``option`` if
    ``path`` is a directory or ends with a path separator (so that a command refuses it before any
    work, rather than failing at the final rename)."""
    if str(path).endswith(("/", os.sep)) or os.path.isdir(path):
        raise UserError(f"{option} {path}: is a directory; give the path of a file")
    return require_directory(path, option)


def _write_bytes(tmp, data, final):
    """Write ``data`` to ``tmp`` and flush it to disk; a UserError naming ``final`` on failure."""
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except OSError as err:
        raise UserError(f"{final}: cannot write ({err.strerror})") from None


def _serialize(obj):
    """``torch.save`` into memory (so that a failed write reports its OS error, which torch's own
    file writer hides)."""
    import torch  # imported here so that text-only tools do not pay for loading torch

    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getbuffer()


@contextlib.contextmanager
def atomic_path(path):
    """Yield a temporary path beside ``path``; rename it to ``path`` if the block succeeds."""
    tmp = _temp_name(path)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def write_bytes(data, path):
    """Write ``data`` (bytes) to ``path`` atomically."""
    with atomic_path(path) as tmp:
        _write_bytes(tmp, data, path)


def save_tensors(obj, path):
    """``torch.save`` plain data and tensors to ``path`` atomically."""
    write_bytes(_serialize(obj), path)


def load_tensors(path, what):
    """``torch.load(path, weights_only=True)``: tensors and plain data only. A missing, corrupt or
    truncated file, or one that holds other pickled Python objects (which could run code when
    unpickled), is a UserError naming the file and calling it ``what``."""
    import pickle

    import torch

    if not os.path.isfile(path):
        raise UserError(f"{path}: {what} not found")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        code = re.search(r"GLOBAL (\S+)|unrecognized function (\S+)", str(err))
        if code:
            found = code.group(1) or code.group(2)
            raise UserError(f"{path}: refused: the {what} holds pickled Python objects ({found}), not only "
                            f"tensors and plain data (onmt_lite never unpickles code)") from None
        reason = str(err).split("WeightsUnpickler error:")[-1]
    except Exception as err:  # noqa: BLE001  (torch raises several types for corrupt files)
        reason = str(err) or type(err).__name__
    raise UserError(f"{path}: cannot load {what}: corrupt or truncated ({reason.strip().splitlines()[0]})")


def write_text(path, text):
    """Write a UTF-8 text file atomically."""
    write_bytes(text.encode("utf-8"), path)


class StagedOutputs:
    """Files written under temporary names and renamed together by ``commit()``.

    Used as a context manager: leaving the block with an exception removes every staged file.
    """

    def __init__(self):
        self._staged = []  # (tmp, final)

    def path_for(self, final):
        tmp = _temp_name(final)
        self._staged.append((tmp, final))
        return tmp

    def save(self, obj, final):
        _write_bytes(self.path_for(final), _serialize(obj), final)

    def write_text(self, text, final):
        """Stage the UTF-8 text file ``final``."""
        _write_bytes(self.path_for(final), text.encode("utf-8"), final)

    def final_paths(self):
        return [final for _, final in self._staged]

    def commit(self):
        for tmp, final in self._staged:
            os.replace(tmp, final)
        self._staged = []

    def discard(self):
        for tmp, _ in self._staged:
            if os.path.exists(tmp):
                os.remove(tmp)
        self._staged = []

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self.discard()
        return False
