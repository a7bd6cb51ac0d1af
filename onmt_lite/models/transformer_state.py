"""The Transformer decoder's state between calls (``TransformerState``): its self-attention cache
and the columns each row's new positions may see.

Shapes: L layers, B rows, h heads, C cache columns (P of them decoded so far), d = H / h per head,
T new positions.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch
from torch import Tensor


def spare_room(columns: int) -> int:
    """The columns of a cache buffer made for ``columns`` used ones: a quarter more, at least 4."""
    return columns + max(4, columns // 4)


class TransformerState:
    """The Transformer decoder's state between calls: its self-attention cache.

    Attributes:
        cache: every layer's keys and values in one buffer ``[2*L x B x h x C x d]`` (layer i's
            keys at 2i, its values at 2i+1), of which the first ``cached`` columns hold the P
            positions decoded so far (P = 0 at first); the columns after them are spare room for
            the next positions (``with_room``). One buffer, so that the search's reorder and a
            step's growth are one copy whatever the layers.
        start: ``[B]`` long, each row's first cache column. Rows of examples that joined a running
            search later have fewer positions: their cache is padded on the left, and columns before
            ``start`` are masked. A row's next position is ``P - start``.

    A state made of the layers' own tensors (``[2 x B x h x P x d]`` each: teacher forcing and
    ``-truncated_decoder``'s windows, which concatenate) joins them into ``cache`` when first read:
    training's forward pass, whose state nobody reads, copies nothing.

    A fixed-shape step (``translate/graphed.py``, one position at a time) gives ``cached`` as a
    device scalar instead: the position is written at that column of the same buffer, and the
    attention reads all C columns, those after it masked (``fixed``). Only the decoder's
    ``forward`` takes such a state; its owner reorders it.
    """

    def __init__(
        self, cache: Tensor | Sequence[Tensor], start: Tensor, cached: int | Tensor | None = None
    ):
        self._cache = cache if torch.is_tensor(cache) else None
        self._layers = None if torch.is_tensor(cache) else tuple(cache)
        self.start = start
        self.cached = self.columns() if cached is None else cached

    @property
    def cache(self) -> Tensor:
        """``[2*L x B x h x C x d]``, the layers' tensors joined at the first read."""
        if self._cache is None:
            self._cache = torch.cat(self._layers)
            self._layers = None
        return self._cache

    def layer(self, i: int) -> Tensor:
        """Layer ``i``'s keys and values ``[2 x B x h x C x d]`` (a view of ``cache``)."""
        if self._cache is None:
            return self._layers[i]
        return self._cache[2 * i : 2 * i + 2]

    def columns(self) -> int:
        """C: the cache's columns, used and spare."""
        return (self._cache if self._cache is not None else self._layers[0]).size(3)

    @property
    def fixed(self) -> bool:
        """Whether ``cached`` is a device scalar (a fixed-shape step)."""
        return torch.is_tensor(self.cached)

    def last_column(self) -> int:
        """A host bound of the columns a step may use: P, or C for a fixed-shape step."""
        return self.columns() if self.fixed else self.cached

    def with_room(self, length: int) -> TransformerState:
        """This state with spare columns for ``length`` new positions, for a step without gradients
        (decoding) to write them in place; the buffer is grown by a quarter when too small (one
        copy for every layer). Unchanged for a fixed-shape step, with gradients (the layers then
        concatenate) and for a whole target from an empty cache (teacher forcing: nothing to keep
        room for)."""
        if self.fixed or torch.is_grad_enabled() or (self.cached == 0 and length > 1):
            return self
        total = self.cached + length
        if self.columns() >= total:
            return self
        cache = self.cache
        grown = cache.new_empty(*cache.shape[:3], spare_room(total), cache.size(4))
        grown[:, :, :, : self.cached] = cache[:, :, :, : self.cached]
        return TransformerState(grown, self.start, self.cached)

    def writes_in_place(self, length: int) -> bool:
        """Whether a step of ``length`` positions writes into this cache (a fixed-shape step, or
        room for them and no gradients) rather than concatenating (``multihead.appended``)."""
        if self.fixed:
            return True
        return not torch.is_grad_enabled() and self.columns() >= self.cached + length

    def self_masks(self, length: int) -> tuple[Tensor, Tensor]:
        """The self-attention's bool masks of ``length`` new positions after the P cached ones: the
        columns each row has ``[B x 1 x 1 x P+T]`` (from its ``start``), and those each new position
        may see ``[B x 1 x T x P+T]`` (the ones before it). A fixed-shape step's (one position):
        the C columns from each row's ``start`` to the one being written, ``[B x 1 x 1 x C]``
        both."""
        start = self.start
        if self.fixed:
            columns = torch.arange(self.columns(), device=start.device)  # [C]
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
        return TransformerState(fn(self.cache, 1), fn(self.start, 0), self.cached)

    def detach(self) -> TransformerState:
        """The same state cut from the graph (between truncated BPTT windows; the layers' tensors
        left apart, as they were)."""
        if self._cache is None:
            layers = [t.detach() for t in self._layers]
            return TransformerState(layers, self.start.detach(), self.cached)
        return self.map(lambda t, dim: t.detach())

    def concat(self, other: TransformerState) -> TransformerState:
        """The rows of ``self`` then those of ``other``, the shorter cache padded on the left (with
        zeros: masked, but finite). The buffer gets spare room (``with_room``'s), so that the next
        position is written in place rather than the buffer copied again."""
        width = max(self.cached, other.cached)
        mine = self.cache
        theirs = other.cache
        n_rows = mine.size(1)
        shape = (
            mine.size(0),
            n_rows + theirs.size(1),
            mine.size(2),
            spare_room(width),
            mine.size(4),
        )
        cache = mine.new_zeros(shape)  # [2*L x B x h x C x d]
        if self.cached:  # (examples join with no position decoded: nothing of theirs to copy)
            cache[:, :n_rows, :, width - self.cached : width] = mine[:, :, :, : self.cached]
        if other.cached:
            cache[:, n_rows:, :, width - other.cached : width] = theirs[:, :, :, : other.cached]
        starts = [
            state.start if state.cached == width else state.start + (width - state.cached)
            for state in (self, other)
        ]
        return TransformerState(cache, torch.cat(starts), width)

    def parts(self) -> list[tuple[Tensor, tuple]]:
        """The tensors that hold the rows, each with its (row, source position, column) dimensions
        (None: it has none): what a fixed-shape step keeps in buffers (``translate/graphed.py``)."""
        return [(self.cache, (1, None, 3)), (self.start, (0, None, None))]

    def of_parts(self, tensors: list[Tensor]) -> TransformerState:
        """A state like this one (its ``cached``) made of ``tensors``, in ``parts``'s order."""
        cache, start = tensors
        return TransformerState(cache, start, self.cached)

    def compact(self, unused: int) -> TransformerState:
        """The same state without its first ``unused`` columns, which no row uses any more (rows
        left). The caller counts them (``BeamState.keep``: the columns before every remaining
        example's first): reading ``start`` here would wait for the device."""
        if unused == 0:
            return self
        return TransformerState(
            self.cache[:, :, :, unused:], self.start - unused, self.cached - unused
        )
