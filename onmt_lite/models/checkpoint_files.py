"""The checkpoint files of a run on disk: their names (``PREFIX_step_N.pt``, ``PREFIX_best.pt``,
``PREFIX.lock``), ``CheckpointWriter``, which writes them under the lock and keeps the newest
(-keep_checkpoint), and the refusal to write over an earlier run's (``refuse_an_earlier_run``).
What a checkpoint holds, and how it is read, is ``models/checkpoint.py``'s.
"""

import contextlib
import glob
import os
import re

from onmt_lite.utils.errors import UserError
from onmt_lite.utils.files import save_tensors
from onmt_lite.utils.locks import lock_holder, release_lock, remove_stale_temporaries, try_lock
from onmt_lite.utils.logging import logger
from onmt_lite.utils.output_paths import make_directories, remove_directories


def checkpoint_path(prefix, step):
    return f"{prefix}_step_{step}.pt"


def checkpoint_directory(prefix):
    """The directory the checkpoints of ``prefix`` go into (``runs/`` for ``runs/m`` and for
    ``runs/``), as an absolute path."""
    return os.path.dirname(os.path.abspath(checkpoint_path(prefix, 0)))


def best_path(prefix):
    return f"{prefix}_best.pt"


def lock_path(prefix):
    return f"{prefix}.lock"


def saved_checkpoints(prefix):
    """The steps N of the ``PREFIX_step_N.pt`` files on disk, in no order."""
    pattern = re.compile(re.escape(os.path.basename(prefix)) + r"_step_(\d+)\.pt")
    names = (os.path.basename(path) for path in glob.glob(glob.escape(prefix) + "_step_*.pt"))
    return [int(match.group(1)) for match in map(pattern.fullmatch, names) if match]


class CheckpointWriter:
    """Writes ``PREFIX_step_N.pt`` atomically and keeps only the newest ``keep`` of those on disk,
    earlier runs' included (-1: all; see ``prune``).

    It holds ``PREFIX.lock`` (an exclusive ``flock``) from its creation to ``close()`` or the end of
    the process, so that a second run on the same prefix is refused instead of overwriting this
    one's checkpoints and removing its temporaries. A run started after another one ended is refused
    too while that run's checkpoints are there (``PREFIX_step_N.pt``, ``PREFIX_best.pt``), unless it
    resumes one of them (``train_from``) or ``overwrite`` lets it write over them. A missing
    directory of the checkpoints is made, with its parents, and removed at ``close()`` if nothing
    was written in it. Usable as a context manager (``close()`` at the end).
    """

    def __init__(self, prefix: str, keep: int = -1, overwrite: bool = False, train_from: str = ""):
        self.prefix = prefix
        self.keep = keep
        self.written = []
        self._lock = None
        # as OpenNMT-py does: -save_model runs/m makes runs/
        self._made = make_directories(checkpoint_directory(prefix), f"-save_model {prefix}")
        try:
            self._lock_prefix(overwrite, train_from)
        except UserError:
            self.close()  # a refused run leaves neither a lock file nor a directory behind
            raise
        # only now, under the lock: a temporary here is not another live run's
        for stale in remove_stale_temporaries(
            checkpoint_path(prefix, "*")
        ) + remove_stale_temporaries(best_path(prefix)):
            logger.info(f"removed {stale}, left by an interrupted checkpoint write")

    def _lock_prefix(self, overwrite: bool, train_from: str) -> None:
        """Take ``PREFIX.lock``; a UserError if another run holds it, or if an earlier run's
        checkpoints are there without ``overwrite`` (see ``refuse_an_earlier_run``)."""
        prefix = self.prefix
        self._lock = try_lock(lock_path(prefix))
        if self._lock is None:
            holder = lock_holder(lock_path(prefix))
            raise UserError(
                f"-save_model {prefix}: another run is using this prefix ({lock_path(prefix)} is "
                f"held{f' by process {holder}' if holder else ''}); wait for it to end or choose "
                "another -save_model"
            )
        if not overwrite:
            refuse_an_earlier_run(prefix, train_from)

    def close(self):
        """Remove and release ``PREFIX.lock``, and remove the directories made for ``prefix`` if
        nothing was written there (a refused or failed run leaves none behind)."""
        if self._lock is not None:
            release_lock(self._lock)
            self._lock = None
        remove_directories(self._made)
        self._made = []

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self.close()
        return False

    def last_path(self):
        """The newest checkpoint this writer saved, or None."""
        return self.written[-1] if self.written else None

    def save(self, checkpoint):
        path = checkpoint_path(self.prefix, checkpoint["step"])
        save_tensors(checkpoint, path)
        if path in self.written:
            self.written.remove(path)
        self.written.append(path)
        if self.keep > 0:
            self.prune()
        return path

    def prune(self):
        """Delete all but the newest ``keep`` of the ``PREFIX_step_N.pt`` files on disk, whichever
        run wrote them (never ``PREFIX_best.pt``). Newest is by step, with this run's checkpoints
        newer than any earlier run's, so that a new run over older, higher steps never deletes what
        it just wrote."""
        mine = set(self.written)
        on_disk = sorted(
            saved_checkpoints(self.prefix),
            key=lambda step: (checkpoint_path(self.prefix, step) in mine, step),
        )
        for step in on_disk[: -self.keep]:
            old = checkpoint_path(self.prefix, step)
            with contextlib.suppress(FileNotFoundError):
                os.remove(old)
            if old in mine:
                self.written.remove(old)

    def save_best(self, checkpoint):
        path = best_path(self.prefix)
        save_tensors(checkpoint, path)
        return path


def earlier_checkpoints(prefix: str) -> list[str]:
    """The checkpoints of ``prefix`` on disk: ``PREFIX_step_N.pt`` by step, then
    ``PREFIX_best.pt``."""
    paths = [checkpoint_path(prefix, step) for step in sorted(saved_checkpoints(prefix))]
    best = best_path(prefix)
    return paths + [best] if os.path.exists(best) else paths


def refuse_an_earlier_run(prefix: str, train_from: str) -> None:
    """A UserError naming the checkpoints an earlier run left on ``prefix`` (-save_model), unless
    there are none or ``train_from`` is one of them (that run goes on, and writes on). Checked by
    ``CheckpointWriter`` under its lock, and by the command before it starts -world_size processes
    (one line, nothing started)."""
    earlier = earlier_checkpoints(prefix)
    if not earlier or any(_same_file(train_from, path) for path in earlier):
        return
    more = f" and {len(earlier) - 3} more" if len(earlier) > 3 else ""
    shown = ", ".join(earlier[:3]) + more
    newest = [path for path in earlier if path != best_path(prefix)] or earlier
    raise UserError(
        f"-save_model {prefix}: an earlier run's checkpoints are there ({shown}); "
        f"continue that run with -train_from {newest[-1]}, replace them with "
        f"-overwrite, or choose another -save_model"
    )


def _same_file(path: str, other: str) -> bool:
    """Whether ``path`` (possibly empty) and ``other`` name one file (through links too)."""
    try:
        return bool(path) and os.path.samefile(path, other)
    except OSError:
        return False
