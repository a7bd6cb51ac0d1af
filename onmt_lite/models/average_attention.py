"""The average attention network (Zhang et al. 2018), OpenNMT-py 1.x's ``-self_attn_type average``:
in each Transformer decoder layer, self-attention gives way to the average of the layer's inputs
so far, fed forward (``-aan_useffn``) and gated with the input.

Shapes: B batch, T new positions, C cache columns (P of them used), K = P + T columns of the mask,
H model size; batch-first (``[B x T x H]``).
"""

from __future__ import annotations

import torch
import torch.nn as nn
from torch import Tensor

from onmt_lite.models.multihead import appended


def average_counts(mask: Tensor) -> Tensor:
    """The positions each new position averages: the columns ``mask`` allows it, ``[B x 1 x T x K]``
    bool (True: allowed) or an additive mask (0: allowed, -inf: not) -> float32 ``[B x T x 1]``
    (a count, exact in float32 whatever the model's precision)."""
    allowed = mask if mask.dtype == torch.bool else mask == 0
    return allowed.sum(-1, dtype=torch.float32).squeeze(1).unsqueeze(-1)


def last_average(
    cache: tuple[Tensor, int | Tensor, bool] | None, like: Tensor, dtype: torch.dtype
) -> Tensor:
    """Each row's average at its last cached column ``[B x H]``, in ``dtype``: the ``used - 1``th
    of ``cache``'s buffer (``[2 x B x 1 x C x H]``, the averages in its second half); zeros before
    any column (rows of ``like`` ``[B x T x H]``). A row with no position there reads another's or
    zeros, which its count of earlier positions, 0, cancels."""
    if cache is None or (not torch.is_tensor(cache[1]) and cache[1] == 0):
        return like.new_zeros(like.size(0), like.size(2), dtype=dtype)
    buffer, used, _ = cache
    averages = buffer[1, :, 0]  # [B x C x H]
    if torch.is_tensor(used):  # a fixed-shape step: the column a device scalar
        column = (used - 1).clamp(min=0).view(1)
        return averages.index_select(1, column).squeeze(1).to(dtype)
    return averages[:, used - 1].to(dtype)


class AverageSelfAttention(nn.Module):
    """A decoder layer's self-attention in the average attention network, with ``SelfAttention``'s
    interface (``(x, mask, cache) -> (out, cache)``), so that the decoder's state, its reorder, its
    growth and fixed-shape steps are those of self-attention.

    ``a_t``: the mean of the (normalised) inputs ``x_s`` at the columns the self-attention mask
    allows position t, which are the row's positions up to t, its own included (as self-attention
    sees them: never another row's padding). A step computes it from the last one, 1.x's running
    average ``(x_t + n a_{t-1}) / (n + 1)`` for a row with n earlier positions, whatever the
    positions before: the layer is given ``average_counts`` of the mask in the mask's place (n + 1
    for each new position), made once for every layer by the decoder. With ``feed_forward``
    (``-aan_useffn``) ``a_t`` is fed forward first. The output gates both:
    ``sigmoid(i) * x_t + sigmoid(f) * a_t``, with ``[i, f] = W [x_t ; a_t] + b``.

    The cache holds the earlier positions' averages in self-attention's layout, one head of H
    (``[2 x B x 1 x C x H]``; its first half, a key's place, is the same as its second), where a
    step reads the row's last one.
    """

    heads = 1

    def __init__(self, dim: int, feed_forward: nn.Module | None = None):
        super().__init__()
        self.head_dim = dim
        self.feed_forward = feed_forward
        self.gate = nn.Linear(2 * dim, 2 * dim)

    def forward(
        self, x: Tensor, counts: Tensor, cache: tuple[Tensor, int | Tensor, bool] | None = None
    ):
        """``x`` ``[B x T x H]``, ``counts`` ``[B x T x 1]`` (``average_counts`` of the
        self-attention mask); ``cache`` as ``SelfAttention``'s. Returns ``[B x T x H]`` and the
        cache with the new positions' averages (see ``appended``)."""
        batch, length, dim = x.shape
        earlier = counts[:, :1] - 1  # [B x 1 x 1]: the row's positions before x's first
        # at least float32: a half-precision sum would round off the longer rows' averages
        wide = torch.float64 if x.dtype == torch.float64 else torch.float32
        last = last_average(cache, x, wide).unsqueeze(1)  # [B x 1 x H]
        sums = last * earlier + x.to(wide).cumsum(1)  # [B x T x H]
        average = (sums / counts).to(x.dtype)
        new = average.unsqueeze(1).unsqueeze(0).expand(2, batch, 1, length, dim)
        kept = new
        if cache is not None:
            buffer, used, in_place = cache
            kept, _ = appended(buffer, used, new, in_place)
        if self.feed_forward is not None:
            average = self.feed_forward(average)
        input_gate, forget_gate = self.gate(torch.cat([x, average], -1)).chunk(2, dim=-1)
        return torch.sigmoid(input_gate) * x + torch.sigmoid(forget_gate) * average, kept
