"""The average attention network (Zhang et al. 2018), OpenNMT-py 1.x's ``-self_attn_type average``:
in each Transformer decoder layer, self-attention gives way to the average of the layer's inputs
so far, fed forward (``-aan_useffn``) and gated with the input.

Shapes: B batch, T new positions, C cache columns (P of them used), K = P + T columns read, H model
size; batch-first (``[B x T x H]``).
"""

from __future__ import annotations

import torch
import torch.nn as nn
from torch import Tensor

from onmt_lite.models.multihead import appended


def uniform_weights(mask: Tensor, dtype: torch.dtype) -> Tensor:
    """Equal weights over the columns ``mask`` allows, summing to 1 per row: ``mask`` ``[... x K]``
    bool (True: allowed) or an additive mask (0: allowed, -inf: not) -> ``[... x K]``."""
    allowed = mask if mask.dtype == torch.bool else mask == 0
    counts = allowed.sum(-1, keepdim=True)  # each position's own column is always allowed: >= 1
    return allowed.to(dtype) / counts.to(dtype)


class AverageSelfAttention(nn.Module):
    """A decoder layer's self-attention in the average attention network, with ``SelfAttention``'s
    interface (``(x, mask, cache) -> (out, cache)``), so that the decoder's state, its reorder, its
    growth and fixed-shape steps are those of self-attention.

    ``a_t``: the mean of the (normalised) inputs ``x_s`` at the columns the self-attention mask
    allows position t, which are the row's positions up to t, its own included (as self-attention
    sees them: never another row's padding); 1.x's ``(x_t + t a_{t-1}) / (t + 1)``. The layer is
    given the mask's ``uniform_weights`` in the mask's place, made once for every layer by the
    decoder. With ``feed_forward``
    (``-aan_useffn``) ``a_t`` is fed forward first. The output gates both:
    ``sigmoid(i) * x_t + sigmoid(f) * a_t``, with ``[i, f] = W [x_t ; a_t] + b``.

    The cache holds the earlier positions' inputs in self-attention's layout, one head of H
    (``[2 x B x 1 x C x H]``; its first half, a key's place, is the same as its second).
    """

    heads = 1

    def __init__(self, dim: int, feed_forward: nn.Module | None = None):
        super().__init__()
        self.head_dim = dim
        self.feed_forward = feed_forward
        self.gate = nn.Linear(2 * dim, 2 * dim)

    def forward(
        self, x: Tensor, weights: Tensor, cache: tuple[Tensor, int | Tensor, bool] | None = None
    ):
        """``x`` ``[B x T x H]``, ``weights`` ``[B x 1 x T|1 x K]`` (``uniform_weights`` of the
        self-attention mask); ``cache`` as ``SelfAttention``'s. Returns ``[B x T x H]`` and the
        cache with the new positions' inputs (see ``appended``)."""
        batch, length, dim = x.shape
        inputs = x.unsqueeze(1)  # [B x 1 x T x H]
        new = inputs.unsqueeze(0).expand(2, batch, 1, length, dim)  # [2 x B x 1 x T x H]
        kept = new
        if cache is not None:
            buffer, used, in_place = cache
            kept, seen = appended(buffer, used, new, in_place)
            inputs = seen[1]  # [B x 1 x K x H]
        average = torch.matmul(weights.to(x.dtype), inputs).squeeze(1)  # [B x T x H]
        if self.feed_forward is not None:
            average = self.feed_forward(average)
        input_gate, forget_gate = self.gate(torch.cat([x, average], -1)).chunk(2, dim=-1)
        return torch.sigmoid(input_gate) * x + torch.sigmoid(forget_gate) * average, kept
