"""The Transformer decoder's state between calls (``TransformerState``): its self-attention cache
and the columns each row's new positions may see.

Shapes: B rows, h heads, C cache columns (P of them decoded so far), d = H / h per head, T new
positions.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from onmt_lite.models.multihead import spare_room


class TransformerState:
    """The Transformer decoder's state between calls: its self-attention cache.

    Attributes:
        cache: per layer, keys then values ``[B x h x C x d]`` (``2 x layers`` tensors), of which
            the first ``cached`` columns hold the P positions decoded so far (P = 0 at first); the
            columns after them are spare room for the next positions (see ``appended``).
        start: ``[B]`` long, each row's first cache column. Rows of examples that joined a running
            search later have fewer positions: their cache is padded on the left, and columns before
            ``start`` are masked. A row's next position is ``P - start``.

    A fixed-shape step (``translate/graphed.py``, one position at a time) gives ``cached`` as a
    device scalar instead: the position is written at that column of the same buffers, and the
    attention reads all C columns, those after it masked (``fixed``). Only the decoder's
    ``forward`` takes such a state; its owner reorders it.
    """

    def __init__(
        self, cache: tuple[Tensor, ...], start: Tensor, cached: int | Tensor | None = None
    ):
        self.cache = tuple(cache)
        self.start = start
        self.cached = self.cache[0].size(2) if cached is None else cached

    @property
    def fixed(self) -> bool:
        """Whether ``cached`` is a device scalar (a fixed-shape step)."""
        return torch.is_tensor(self.cached)

    def last_column(self) -> int:
        """A host bound of the columns a step may use: P, or C for a fixed-shape step."""
        return self.cache[0].size(2) if self.fixed else self.cached

    def self_masks(self, length: int) -> tuple[Tensor, Tensor]:
        """The self-attention's bool masks of ``length`` new positions after the P cached ones: the
        columns each row has ``[B x 1 x 1 x P+T]`` (from its ``start``), and those each new position
        may see ``[B x 1 x T x P+T]`` (the ones before it). A fixed-shape step's (one position):
        the C columns from each row's ``start`` to the one being written, ``[B x 1 x 1 x C]``
        both."""
        start = self.start
        if self.fixed:
            columns = torch.arange(self.cache[0].size(2), device=start.device)  # [C]
            started = columns.unsqueeze(0) >= start.unsqueeze(1)  # [B x C]
            seen = (started & (columns <= self.cached))[:, None, None, :]
            return seen, seen
        columns = torch.arange(self.cached + length, device=start.device)
        started = (columns.unsqueeze(0) >= start.unsqueeze(1))[:, None, None, :]
        if length == 1:  # one new position (a search's step) sees every column
            return started, started
        new = self.cached + torch.arange(length, device=start.device)
        return started, started & (columns.unsqueeze(0) <= new.unsqueeze(1))

    def map(self, fn: Callable[[Tensor, int], Tensor]) -> TransformerState:
        """A new state with ``fn(tensor, batch_dim)`` applied to every tensor (e.g.
        index_select)."""
        return TransformerState(tuple(fn(t, 0) for t in self.cache), fn(self.start, 0), self.cached)

    def detach(self) -> TransformerState:
        """The same state cut from the graph (between truncated BPTT windows)."""
        return self.map(lambda t, dim: t.detach())

    def concat(self, other: TransformerState) -> TransformerState:
        """The rows of ``self`` then those of ``other``, the shorter cache padded on the left (with
        zeros: masked, but finite). The buffers get spare room (``appended``'s), so that the next
        position is written in place rather than the buffers copied again."""
        width = max(self.cached, other.cached)
        capacity = spare_room(width)
        n_rows = self.start.size(0)
        cache = []
        for mine, theirs in zip(self.cache, other.cache):
            rows = n_rows + theirs.size(0)
            buffer = mine.new_zeros(rows, mine.size(1), capacity, mine.size(3))  # [B x h x C x d]
            if self.cached:  # (examples join with no position decoded: nothing of theirs to copy)
                buffer[:n_rows, :, width - self.cached : width] = mine[:, :, : self.cached]
            if other.cached:
                buffer[n_rows:, :, width - other.cached : width] = theirs[:, :, : other.cached]
            cache.append(buffer)
        starts = [
            state.start if state.cached == width else state.start + (width - state.cached)
            for state in (self, other)
        ]
        return TransformerState(cache, torch.cat(starts), width)

    def parts(self) -> list[tuple[Tensor, tuple]]:
        """The tensors that hold the rows, each with its (row, source position, column) dimensions
        (None: it has none): what a fixed-shape step keeps in buffers (``translate/graphed.py``)."""
        return [(t, (0, None, 2)) for t in self.cache] + [(self.start, (0, None, None))]

    def of_parts(self, tensors: list[Tensor]) -> TransformerState:
        """A state like this one (its ``cached``) made of ``tensors``, in ``parts``'s order."""
        return TransformerState(tensors[:-1], tensors[-1], self.cached)

    def compact(self, unused: int) -> TransformerState:
        """The same state without its first ``unused`` columns, which no row uses any more (rows
        left). The caller counts them (``BeamState.keep``: the columns before every remaining
        example's first): reading ``start`` here would wait for the device."""
        if unused == 0:
            return self
        return TransformerState(
            tuple(t[:, :, unused:] for t in self.cache), self.start - unused, self.cached - unused
        )
