"""Statistics: loss, word and accuracy counts, accumulated over shards, batches and reports.

A shard's numbers are sums on the device. Reading each one to the host would stall a GPU once per
shard, so ``Statistics.on_device`` keeps them there: adding statistics up adds the tensors, and the
first read of ``loss``, ``n_words`` or ``n_correct`` (or ``settle``, which a trainer that checks
each step before its update calls, reading the gradient norm in the same go) brings them to the host
in one read; ``device_loss`` gives the loss, unread, to a check kept on the device.
"""

from __future__ import annotations

import math
import time

import torch
from torch import Tensor


class _Settled:
    """A count of ``Statistics`` (its value in ``_NAME``), read or set after the part still on the
    device has been brought to the host (``Statistics.settle``)."""

    def __init__(self, cast):
        self.cast = cast

    def __set_name__(self, owner, name):
        self.field = f"_{name}"

    def __get__(self, stats, owner=None):
        if stats is None:
            return self
        stats.settle()
        return getattr(stats, self.field)

    def __set__(self, stats, value):
        stats.settle()
        setattr(stats, self.field, self.cast(value))


class Statistics:
    """Sums over target words (padding excluded).

    Attributes:
        loss: summed negative log-likelihood (the unsmoothed cross-entropy, in nats).
        n_words: target words counted. n_correct: of them, those the model's argmax predicts.
        n_src_words: source words of the batches (for throughput; set by the trainer).
    """

    loss = _Settled(float)
    n_words = _Settled(int)
    n_correct = _Settled(int)

    def __init__(self, loss=0.0, n_words=0, n_correct=0, n_src_words=0):
        self._loss = float(loss)
        self._n_words = int(n_words)
        self._n_correct = int(n_correct)
        self._on_device: Tensor | None = None  # [3] float64: loss, n_words, n_correct not yet read
        self.n_src_words = int(n_src_words)
        self.start_time = time.time()

    @classmethod
    def on_device(cls, loss: Tensor, n_words: Tensor, n_correct: Tensor) -> Statistics:
        """Statistics of three 0-dim tensors (``loss`` may be a number), left where they are until
        read (no host sync)."""
        stats = cls()
        loss = torch.as_tensor(loss, dtype=torch.float64, device=n_words.device).detach()
        stats._on_device = torch.stack([loss, n_words.double(), n_correct.double()])
        return stats

    def device_loss(self, device: torch.device) -> Tensor:
        """The summed loss as a 0-dim float64 tensor on ``device``, read from nothing (the part
        already on the host added to the part still on the device)."""
        if self._on_device is None:
            return torch.tensor(self._loss, dtype=torch.float64, device=device)
        part = self._on_device[0]
        return part + self._loss if self._loss else part

    def settle(self, *extra: Tensor) -> list[float]:
        """Bring the numbers still on the device to the host, with the 0-dim tensors ``extra`` in
        the same read (one host sync); returns the values of ``extra``."""
        parts = [] if self._on_device is None else [self._on_device]
        parts += [value.detach().double().reshape(1) for value in extra]
        if not parts:
            return []
        values = torch.cat([part.to(parts[0].device) for part in parts]).tolist()
        if self._on_device is not None:
            self._loss += values[0]
            self._n_words += int(values[1])
            self._n_correct += int(values[2])
            self._on_device = None
            values = values[3:]
        return values

    def update(self, other):
        self._loss += other._loss
        self._n_words += other._n_words
        self._n_correct += other._n_correct
        if other._on_device is not None:  # added on the device: no read
            mine = self._on_device
            self._on_device = other._on_device if mine is None else mine + other._on_device
        self.n_src_words += other.n_src_words
        return self

    def xent(self):
        """Cross-entropy per word."""
        return self.loss / max(self.n_words, 1)

    def ppl(self):
        """Perplexity, ``exp(xent)`` (capped at exp(100))."""
        return math.exp(min(self.xent(), 100))

    def accuracy(self):
        """Percentage of words predicted right."""
        return 100.0 * self.n_correct / max(self.n_words, 1)

    def elapsed_time(self):
        return time.time() - self.start_time

    def __eq__(self, other):
        return (
            isinstance(other, Statistics)
            and math.isclose(self.loss, other.loss, rel_tol=1e-9, abs_tol=1e-9)
            and (self.n_words, self.n_correct) == (other.n_words, other.n_correct)
        )

    def __repr__(self):
        return (
            f"Statistics(loss={self.loss:.6g}, n_words={self.n_words}, n_correct={self.n_correct})"
        )
