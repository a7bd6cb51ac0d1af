"""Writing files so that nothing half-written is ever left under a final name.

``atomic_path`` gives a temporary name beside the target and renames it into place on success.
``StagedOutputs`` does the same for a group of files that must appear together (preprocess shards):
all are renamed at the end, or all are removed if anything fails.
"""
import contextlib
import os
import tempfile

from onmt_lite.utils.errors import UserError

_UMASK = os.umask(0)
os.umask(_UMASK)


def _temp_name(path):
    directory, base = os.path.split(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{base}.", suffix=".tmp", dir=directory)
    os.close(fd)
    os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; give the file the mode open() would
    return tmp


def require_directory(path, option):
    """The directory that ``path`` will be written in; a UserError naming ``option`` if it is missing
    or not writable."""
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise UserError(f"{option} {path}: directory {directory} does not exist")
    if not os.access(directory, os.W_OK):
        raise UserError(f"{option} {path}: directory {directory} is not writable")
    return directory


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


def save_tensors(obj, path):
    """``torch.save`` plain data and tensors to ``path`` atomically."""
    import torch  # imported here so that text-only tools do not pay for loading torch

    with atomic_path(path) as tmp:
        torch.save(obj, tmp)


def write_text(path, text):
    """Write a UTF-8 text file atomically."""
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)


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
        import torch

        torch.save(obj, self.path_for(final))

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
