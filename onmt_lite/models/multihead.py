"""Multi-head attention of the Transformer: the heads (``MultiHeadAttention``, with relative
positions or the fused kernel), self-attention with its cache of earlier positions
(``SelfAttention``, ``appended``).

Shapes: B batch, T new query positions, K key positions, C cache columns (P of them used),
H model size, h heads, d = H / h per head; batch-first (``[B x T x H]``).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from onmt_lite.models.dropout import dropout
from onmt_lite.utils.cpu_paths import cpu_path


def relative_positions(query_len: int, key_len: int, max_distance: int, device) -> Tensor:
    """``[query_len x key_len]`` ids into a table of ``2 * max_distance + 1`` relative positions:
    the key's position minus the query's, clipped to ``±max_distance``, plus ``max_distance``. The
    queries are the last ``query_len`` of the ``key_len`` positions (the new ones, after the cached
    ones)."""
    keys = torch.arange(key_len, device=device)
    queries = keys[key_len - query_len :]
    return (keys.unsqueeze(0) - queries.unsqueeze(1)).clamp(
        -max_distance, max_distance
    ) + max_distance


# CUDA's memory-efficient attention (what takes a mask) copies a mask whose strides, but the last,
# are not multiples of 8 into one whose are, at every call: ours are made aligned once
MASK_ALIGNMENT = 16


def aligned_width(width: int) -> int:
    """``width`` rounded up to a multiple of ``MASK_ALIGNMENT``."""
    return -(-width // MASK_ALIGNMENT) * MASK_ALIGNMENT


def additive_mask(mask: Tensor, dtype: torch.dtype) -> Tensor:
    """A bool mask (True: may attend) as an addend to the scores, in ``dtype``: 0 where True, -inf
    where False. ``scaled_dot_product_attention`` turns a bool mask into this at every call (a few
    kernels each); the stacks do it once for all the layers that share the mask. The addend is a
    view of rows ``aligned_width`` long (``MASK_ALIGNMENT``)."""
    shape = (*mask.shape[:-1], aligned_width(mask.size(-1)))
    # two kernels: a where() of two scalars fills a tensor for each of them first
    addend = torch.full(shape, float("-inf"), dtype=dtype, device=mask.device)
    return addend[..., : mask.size(-1)].masked_fill_(mask, 0.0)


class StepMasks:
    """A decoding step's additive masks read from tables kept between steps: one kernel each (a
    gather of rows) where computing them takes four (a range, a comparison and ``additive_mask``).

    ``from_start(start, width)`` ``[B x 1 x 1 x width]``: 0 from each row's ``start`` on (the cache
    columns it has), -inf before. ``below(lengths, width)``: 0 below each row's length (its real
    source positions), -inf from it on. The tables grow to a power of two; for decoding without
    gradients only (a recorded CUDA graph would read a table by address, and a longer input makes it
    anew)."""

    def __init__(self):
        self._tables: dict = {}

    def _table(self, kind: str, width: int, like: Tensor, dtype: torch.dtype) -> Tensor:
        """``[N+1 x N]``, N >= ``width``: row r's mask of ``kind``."""
        key = (kind, like.device, dtype)
        table = self._tables.get(key)
        if table is None or table.size(1) < width:
            size = 1 << max(width - 1, 63).bit_length()  # a power of two: few remakes
            rows = torch.arange(size + 1, device=like.device).unsqueeze(1)  # [N+1 x 1]
            columns = torch.arange(size, device=like.device)  # [N]
            visible = columns >= rows if kind == "from_start" else columns < rows
            table = additive_mask(visible, dtype)
            self._tables[key] = table
        return table

    def from_start(self, start: Tensor, width: int, dtype: torch.dtype) -> Tensor:
        """``[B x 1 x 1 x width]``, its strides those of the table's rows (aligned)."""
        return self._rows("from_start", start, width, dtype)

    def below(self, lengths: Tensor, width: int, dtype: torch.dtype) -> Tensor:
        """``[B x 1 x 1 x width]``, as ``from_start``."""
        return self._rows("below", lengths, width, dtype)

    def _rows(self, kind: str, rows: Tensor, width: int, dtype: torch.dtype) -> Tensor:
        table = self._table(kind, width, rows, dtype)
        return table.index_select(0, rows).view(-1, 1, 1, table.size(1))[..., :width]


class MultiHeadAttention(nn.Module):
    """Scaled dot-product attention of ``heads`` heads, over given keys and values.

    ``forward`` takes queries, keys and values already projected and split into heads (the layers
    project them: self-attention in one product for all three, context attention once per source for
    keys and values) and returns the heads' outputs merged and projected ``[B x T x H]``, with the
    attention weights ``[B x h x T x K]`` when asked (K keys). Weights on masked keys are exactly 0.

    With ``max_relative_positions`` k > 0 (Shaw et al. 2018), a table of 2k + 1 vectors ``[d]`` per
    clipped relative position enters both the scores (``q · r``) and the output (``Σ w r``), one
    table for both as in 1.x. Both go through the 2k + 1 buckets (``q`` times the table, gathered
    per key; the weights summed per bucket, times the table): memory grows as T x K, not T x K x d.

    ``kernel_dropout`` (``-self_attn_type scaled-dot-flash``, set by ``use_kernel_dropout``): off
    the CPU, attention dropout in training is left to the fused kernel, which draws its masks from
    the device's generator and never writes the weights out. Without it (``scaled-dot``) training
    with attention dropout takes the written-out form.
    """

    def __init__(self, dim: int, heads: int, dropout: float, max_relative_positions: int = 0):
        super().__init__()
        if dim % heads:
            raise ValueError(f"model size {dim} is not a multiple of {heads} heads")
        self.heads = heads
        self.head_dim = dim // heads
        self.dropout_p = dropout
        self.kernel_dropout = False
        self.out = nn.Linear(dim, dim)
        self.max_relative_positions = max_relative_positions
        self.relative = (
            nn.Embedding(2 * max_relative_positions + 1, self.head_dim)
            if max_relative_positions > 0
            else None
        )

    def split(self, x: Tensor) -> Tensor:
        """``[B x T x H]`` -> ``[B x h x T x d]``."""
        batch, length, _ = x.shape
        return x.view(batch, length, self.heads, self.head_dim).transpose(1, 2)

    def forward(
        self, query: Tensor, keys: Tensor, values: Tensor, mask: Tensor, need_weights: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        """``query`` ``[B x h x T x d]``, ``keys``/``values`` ``[B x h x K x d]``, ``mask``
        ``[B x 1 x T|1 x K]``, bool (True: may attend) or ``additive_mask``'s addend in the
        query's dtype -> ``[B x T x H]``, weights ``[B x h x T x K]`` or None."""
        p = self.dropout_p if self.training else 0.0
        # the CPU's fused kernel writes the weights out with dropout, and draws masks more slowly
        kernel_drops = self.kernel_dropout and not cpu_path(query.device)
        if self.relative is None and not need_weights and (p == 0 or kernel_drops):
            # PyTorch's fused kernel: no [T x K] weights kept for the backward when it can avoid
            # them
            context = F.scaled_dot_product_attention(
                query, keys, values, attn_mask=mask, dropout_p=p
            )
            weights = None
        else:
            context, weights = self._attend(query, keys, values, mask, p)
        batch, _, length, _ = context.shape
        merged = context.transpose(1, 2).reshape(batch, length, self.heads * self.head_dim)
        return self.out(merged), weights

    def _attend(
        self, query: Tensor, keys: Tensor, values: Tensor, mask: Tensor, p: float
    ) -> tuple[Tensor, Tensor]:
        """The same attention written out, for the weights and for relative positions: ``query``
        ``[B x h x T x d]``, ``keys``/``values`` ``[B x h x K x d]`` -> context ``[B x h x T x d]``,
        weights ``[B x h x T x K]`` (before dropout)."""
        scores = torch.matmul(query, keys.transpose(2, 3))  # [B x h x T x K]
        ids = None
        if self.relative is not None:
            table = self.relative.weight  # [2k+1 x d]
            # the clipped distance of each key from each query; with a cache (T new positions after
            # P cached ones) the queries are the last T of the K columns, so steps see the same ids
            # [T x K]
            rows = relative_positions(
                query.size(2), keys.size(2), self.max_relative_positions, query.device
            )
            ids = rows.expand(scores.shape)  # [B x h x T x K], a view: nothing copied
            # q · r: each query against the 2k+1 table rows, then each key picks its row, so no
            # [T x K x d] tensor of gathered vectors is ever made
            by_bucket = torch.matmul(query, table.t())  # [B x h x T x 2k+1]
            scores = scores + by_bucket.gather(-1, ids)  # [B x h x T x K]
        scores = scores / self.head_dim**0.5
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, float("-inf"))
        else:
            scores = scores + mask.to(scores.dtype)  # 0 or -inf: the scores masked_fill gives
        weights = torch.softmax(scores, dim=-1)
        dropped = dropout(weights, p)
        context = torch.matmul(dropped, values)  # [B x h x T x d]
        if ids is not None:
            # Σ_j w_j r_j = Σ_b (Σ_{j in bucket b} w_j) r_b: the dropped weights summed per bucket
            buckets = dropped.new_zeros(*dropped.shape[:-1], table.size(0))  # [B x h x T x 2k+1]
            buckets = buckets.scatter_add(-1, ids, dropped)
            context = context + torch.matmul(buckets, table)  # [B x h x T x d]
        return context, weights


def appended(
    buffer: Tensor, used: int | Tensor, new: Tensor, in_place: bool
) -> tuple[Tensor, Tensor]:
    """A layer's self-attention cache, its keys and values ``[2 x B x h x C x d]``, with ``new``
    ``[2 x B x h x T x d]`` after the first ``used`` columns of ``buffer``: returns the buffer to
    keep and its used columns ``[2 x B x h x used+T x d]``.

    ``in_place`` (``TransformerState.writes_in_place``, decided once for every layer): decoding
    without gradients writes into the spare columns the decoder made for all layers
    (``TransformerState.with_room``), so a step copies the cache once (the search's reorder), not
    twice (that and a concatenation); otherwise (teacher forcing, ``-truncated_decoder``'s windows)
    it concatenates. ``used`` a device scalar (a fixed-shape step, ``translate/graphed.py``): one
    position written at that column of the same buffer, and all its C columns returned (the mask
    hides those after it)."""
    if not in_place:
        joined = new if used == 0 else torch.cat([buffer[:, :, :, :used], new], 3)
        return joined, joined
    if torch.is_tensor(used):
        return buffer.index_copy_(3, used.view(1), new), buffer
    total = used + new.size(3)
    buffer[:, :, :, used:total] = new
    return buffer, buffer[:, :, :, :total]


class SelfAttention(nn.Module):
    """Self-attention of a layer: one product for queries, keys and values, then
    ``MultiHeadAttention``. Given ``cache`` (the keys and values of earlier positions), the new keys
    and values are appended."""

    def __init__(self, dim: int, heads: int, dropout: float, max_relative_positions: int = 0):
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)
        self.attention = MultiHeadAttention(dim, heads, dropout, max_relative_positions)

    @property
    def heads(self) -> int:
        """The heads of the cache's layout (``[2 x B x h x C x d]``)."""
        return self.attention.heads

    @property
    def head_dim(self) -> int:
        return self.attention.head_dim

    def forward(
        self, x: Tensor, mask: Tensor, cache: tuple[Tensor, int | Tensor, bool] | None = None
    ):
        """``x`` ``[B x T x H]``; ``cache`` the keys and values of earlier positions
        ``[2 x B x h x C x d]``, how many of their columns are used (P: an int, or a device scalar
        in a fixed-shape step) and whether the new ones are written into it. Returns
        ``[B x T x H]`` and the keys and values with the new ones after the P columns (see
        ``appended``; without a cache, the new ones ``[2 x B x h x T x d]``)."""
        batch, length, _ = x.shape
        projected = self.qkv(x)  # [B x T x 3H]
        query, keys, values = (self.attention.split(part) for part in projected.chunk(3, dim=-1))
        # the same keys and values as one view, for the cache: a layer appends them with one copy
        by_part = projected.view(batch, length, 3, self.attention.heads, self.attention.head_dim)
        new = by_part[:, :, 1:].permute(2, 0, 3, 1, 4)  # [2 x B x h x T x d]
        keys_values = new
        if cache is not None:
            buffer, used, in_place = cache
            keys_values, attended = appended(buffer, used, new, in_place)
            if attended is not new:  # earlier positions too: the attention reads the cache
                keys, values = attended[0], attended[1]
        out, _ = self.attention(query, keys, values, mask)
        return out, keys_values
