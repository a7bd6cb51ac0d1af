"""Training batches made ahead of use by a thread (``-num_workers 1``).

On a GPU the host builds the next batch (gathering, padding, pinning) in a thread beside the one
that launches the step's kernels, instead of between two steps' launches (where, in a step that
reads the device before its update, the device waits for it).
The thread iterates the same stream in the same order and draws from no shared generator, so the
batches, and so the losses, are those of ``-num_workers 0``.

What a checkpoint records is the position after the last batch *handed out*, not after the last one
made: the thread runs ahead, so each batch travels with the stream's position read just after it
was made.
"""

from __future__ import annotations

import copy
import queue
import threading
from typing import Any, Iterable, Iterator

_END = object()


class PrefetchedBatches:
    """``source``'s batches, made up to ``depth`` ahead by one thread.

    Args:
        source: a batch stream with ``state_dict()`` / ``load_state_dict()`` (a ``BatchIterator``
            or ``WeightedBatches``); restore its position before the first ``iter``.
        depth: how many batches may wait, made, for the loop (each holds its tensors).
        pin: pin each batch's tensors in page-locked memory in the thread (for copies to CUDA that
            do not block the host).
    """

    def __init__(self, source: Any, depth: int = 2, pin: bool = False):
        self.source = source
        self.depth = depth
        self.pin = pin
        self._handed_out: dict | None = None  # the position after the last batch handed out
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def state_dict(self) -> dict:
        """The position of the next batch the loop will get (not the next the thread makes)."""
        if self._handed_out is None:
            return self.source.state_dict()
        return self._handed_out

    def load_state_dict(self, state: dict) -> None:
        self.source.load_state_dict(state)

    def __getattr__(self, name: str) -> Any:
        # what else the loop asks of the stream (a WeightedBatches' round) is the source's
        if name == "source":
            raise AttributeError(name)
        return getattr(self.source, name)

    def __iter__(self) -> Iterator:
        made: queue.Queue = queue.Queue(self.depth)
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._make, args=(iter(self.source), made), name="batches", daemon=True
        )
        self._thread.start()
        try:
            while True:
                item = made.get()
                if item is _END:
                    return
                if isinstance(item, BaseException):
                    raise item
                batch, position = item
                self._handed_out = position
                yield batch
        finally:
            self.close(made)

    def close(self, made: queue.Queue | None = None) -> None:
        """Stop the thread (it may be waiting to put a batch) and wait for it to end."""
        self._stop.set()
        while self._thread is not None and self._thread.is_alive():
            if made is not None:
                try:
                    made.get_nowait()  # room for the put it waits on; it then sees the stop
                except queue.Empty:
                    pass
            self._thread.join(timeout=0.05)
        self._thread = None

    def _make(self, batches: Iterable, made: queue.Queue) -> None:
        try:
            for batch in batches:
                if self.pin:
                    batch.pin_memory()
                # copied: the source's position changes as it makes the next batch
                position = copy.deepcopy(self.source.state_dict())
                if not self._put(made, (batch, position)):
                    return
            self._put(made, _END)
        except BaseException as err:  # the loop raises it where it waits for the batch
            self._put(made, err)

    def _put(self, made: queue.Queue, item: Any) -> bool:
        """Put ``item``, waiting for room unless told to stop; False once stopped."""
        while not self._stop.is_set():
            try:
                made.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False


def prefetched(source: Any, num_workers: int, pin: bool) -> Any:
    """``source`` itself with ``num_workers`` 0, else a ``PrefetchedBatches`` of it."""
    if num_workers == 0:
        return source
    return PrefetchedBatches(source, depth=2, pin=pin)
