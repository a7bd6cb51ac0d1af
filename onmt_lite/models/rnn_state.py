"""The RNN decoders' state between calls (``DecoderState``): the layers' hidden states, the input
feed and the coverage, kept so that a search reorders them with one index.

Shapes: L layers, B rows, H hidden size, S source positions.
"""

from __future__ import annotations

from typing import Callable, Iterable

import torch
from torch import Tensor

from onmt_lite.utils.tensors import pad_to


class DecoderState:
    """The decoder's state between calls.

    Attributes:
        hidden: tuple of ``[layers x B x H]`` (``(h, c)`` for LSTM, ``(h,)`` for GRU).
        input_feed: ``[B x H]``, the previous attentional output (input-feed decoder), or None.
        coverage: ``[B x S]``, the sum of the attention of all earlier steps, or None.

    The hidden states and the input feed are ``rows``: one ``[B x H]`` tensor for each kind and
    layer (h of each layer, then c), then the input feed. A search reorders them at every step as
    one buffer ``[n x B x H]`` (``buffer``; one index for all where there were three); a decoder's
    step leaves each layer's tensors as they are (``of_layers``), joined only when reordered, so
    that no step stacks them.
    """

    def __init__(
        self,
        hidden: Iterable[Tensor],
        input_feed: Tensor | None = None,
        coverage: Tensor | None = None,
    ):
        hidden = tuple(hidden)
        rows = [row for kind in hidden for row in kind.unbind(0)]
        self._set(rows, len(hidden), input_feed, coverage)
        self._hidden = hidden

    def _set(self, rows, n_kinds, input_feed, coverage, buffer=None):
        self.n_kinds = n_kinds
        self.rows = rows if input_feed is None else [*rows, input_feed]
        self.has_feed = input_feed is not None
        self.coverage = coverage
        self._buffer = buffer  # [n x B x H], whose rows ``rows`` are, or None
        self._hidden = None  # made when read

    @classmethod
    def of_layers(
        cls, layers: list[tuple[Tensor, ...]], input_feed: Tensor | None, coverage: Tensor | None
    ) -> DecoderState:
        """The state of each layer's own ``(h, c)`` (or ``(h,)``) ``[B x H]``, no stack made."""
        state = cls.__new__(cls)
        n_kinds = len(layers[0])
        rows = [layer[kind] for kind in range(n_kinds) for layer in layers]
        state._set(rows, n_kinds, input_feed, coverage)
        return state

    def _like(self, rows: list[Tensor], coverage: Tensor | None, buffer=None) -> DecoderState:
        """A state of this one's kinds and layers made of ``rows`` (the feed last, if it has one),
        views of ``buffer`` if given."""
        state = DecoderState.__new__(DecoderState)
        feed = rows[-1] if self.has_feed else None
        state._set(rows[: len(rows) - self.has_feed], self.n_kinds, feed, coverage, buffer)
        return state

    def _of_buffer(self, buffer: Tensor, coverage: Tensor | None) -> DecoderState:
        """A state like this one whose rows are ``buffer``'s ``[n x B x H]``."""
        return self._like(list(buffer.unbind(0)), coverage, buffer)

    @property
    def n_layers(self) -> int:
        return (len(self.rows) - self.has_feed) // self.n_kinds

    @property
    def input_feed(self) -> Tensor | None:
        return self.rows[-1] if self.has_feed else None

    @property
    def hidden(self) -> tuple[Tensor, ...]:
        if self._hidden is None:
            L = self.n_layers
            if self._buffer is not None:  # views
                self._hidden = tuple(self._buffer[k * L : (k + 1) * L] for k in range(self.n_kinds))
            else:
                self._hidden = tuple(
                    torch.stack(self.rows[k * L : (k + 1) * L]) for k in range(self.n_kinds)
                )
        return self._hidden

    def layers(self) -> list[tuple[Tensor, ...]]:
        """Each layer's state: a tuple ``(h, c)`` (or ``(h,)``) of ``[B x H]``."""
        L = self.n_layers
        return [tuple(self.rows[k * L + i] for k in range(self.n_kinds)) for i in range(L)]

    def _one_dtype(self) -> bool:
        """Whether the rows share a dtype; under autocast they may not, and a stack would convert
        them: such a state keeps and moves its rows one by one."""
        return len({row.dtype for row in self.rows}) == 1

    def buffer(self) -> Tensor | None:
        """The rows as one tensor ``[n x B x H]`` (stacked once if need be); None unless they
        share a dtype (``_one_dtype``)."""
        if self._buffer is None and self._one_dtype():
            self._buffer = torch.stack(self.rows)
        return self._buffer

    def map(self, fn: Callable[[Tensor, int], Tensor]) -> DecoderState:
        """A new state with ``fn(tensor, batch_dim)`` applied to every tensor (e.g.
        index_select): to the rows' one buffer, and the coverage."""
        coverage = None if self.coverage is None else fn(self.coverage, 0)
        buffer = self.buffer()
        if buffer is None:
            return self._like([fn(row, 0) for row in self.rows], coverage)
        return self._of_buffer(fn(buffer, 1), coverage)

    def detach(self) -> DecoderState:
        """The same state cut from the graph (between truncated BPTT windows), in its form: a
        state of unstacked rows stays so (a stack would copy them)."""
        coverage = None if self.coverage is None else self.coverage.detach()
        if self._buffer is not None:
            return self._of_buffer(self._buffer.detach(), coverage)
        return self._like([row.detach() for row in self.rows], coverage)

    def concat(self, other: DecoderState) -> DecoderState:
        """The rows of ``self`` then those of ``other`` (coverage padded to the longer source)."""
        coverage = None
        if self.coverage is not None:
            width = max(self.coverage.size(1), other.coverage.size(1))
            coverage = torch.cat(
                [pad_to(self.coverage, 1, width), pad_to(other.coverage, 1, width)]
            )
        mine = self.buffer()
        theirs = other.buffer()
        if mine is not None and theirs is not None and mine.dtype == theirs.dtype:
            return self._of_buffer(torch.cat([mine, theirs], 1), coverage)
        return self._like([torch.cat(pair) for pair in zip(self.rows, other.rows)], coverage)

    def compact(self, unused: int) -> DecoderState:
        """The state itself: it holds nothing per past position (see
        ``TransformerState.compact``)."""
        return self

    def parts(self) -> list[tuple[Tensor, tuple]]:
        """The tensors that hold the rows, each with its (row, source position, column) dimensions
        (None: it has none): what a fixed-shape step keeps in buffers (``translate/graphed.py``)."""
        buffer = self.buffer()
        if buffer is not None:
            parts = [(buffer, (1, None, None))]  # [n x B x H]
        else:
            parts = [(row, (0, None, None)) for row in self.rows]  # [B x H] each
        if self.coverage is not None:
            parts.append((self.coverage, (0, 1, None)))  # [B x S]
        return parts

    def of_parts(self, tensors: list[Tensor]) -> DecoderState:
        """A state like this one made of ``tensors``, in ``parts``'s order."""
        coverage = tensors[-1] if self.coverage is not None else None
        if self._one_dtype():
            return self._of_buffer(tensors[0], coverage)
        return self._like(list(tensors[: len(self.rows)]), coverage)
