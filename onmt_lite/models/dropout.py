"""Dropout that draws its random numbers four times faster on the CPU than ``nn.Dropout``.

PyTorch's CPU dropout draws one float per element (Bernoulli) and was a tenth of a Transformer
training step. Here each element gets 16 random bits (four per 64-bit draw of the same generator, so
``-seed`` and exact resume hold) and is kept when they reach a threshold: the keep probability is
``1 - p`` rounded to a multiple of 1/65,536 (p = 0.1 keeps 0.899994), and kept values are scaled by
the inverse of that probability, so the expectation is exact. Off the CPU, PyTorch's fused dropout.

Also the RNN decoders' masks for layers stepped position by position (``step_dropout_masks``,
``DropoutMasks``): drawn for every position at once.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from onmt_lite.utils.cpu_paths import cpu_path

LEVELS = 1 << 16


def keep_mask(shape: torch.Size, p: float) -> tuple[torch.Tensor, float]:
    """A boolean mask of ``shape`` keeping each element with probability ``1 - p`` (to 1/65,536),
    and the scale of the kept values (the inverse of that probability)."""
    kept = round((1 - p) * LEVELS)
    numel = shape.numel()
    # every bit random
    words = torch.empty((numel + 3) // 4, dtype=torch.int64).random_(-(1 << 63), None)
    bits = words.view(torch.int16)[:numel]
    return (bits >= LEVELS // 2 - kept).view(
        shape
    ), LEVELS / kept  # int16 runs from -32768: `kept` reach it


def dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """``x`` with each element zeroed with probability ``p`` (to 1/65,536) and the rest scaled
    up."""
    if not training or p == 0:
        return x
    if not cpu_path(x.device):
        return F.dropout(x, p, True)
    keep, scale = keep_mask(x.shape, p)
    return torch.where(keep, x * scale, 0.0)


class _ReluDropout(torch.autograd.Function):
    """``dropout(relu(x))`` with the same mask, keeping only its output for the backward pass: where
    the output is 0 the gradient is 0 (``x <= 0`` or dropped), elsewhere it is the scale. Autograd's
    chain keeps the ReLU's output and the mask as well, a third of a Transformer layer's
    activations."""

    @staticmethod
    def forward(ctx, x, keep, scale):
        out = torch.where(keep & (x > 0), x * scale, 0.0)
        ctx.save_for_backward(out)
        ctx.scale = scale
        return out

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        return torch.where(out > 0, grad * ctx.scale, 0.0), None, None


def relu_dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """``dropout(relu(x), p, training)``: the same values and random draws, less memory kept."""
    if not training or p == 0:
        return torch.relu(x)
    if not cpu_path(x.device):
        return F.dropout(torch.relu(x), p, True)
    return _ReluDropout.apply(x, *keep_mask(x.shape, p))


class Dropout(nn.Module):
    """``nn.Dropout``'s interface (``p``, train and eval modes) on ``dropout``."""

    def __init__(self, p: float = 0.5):
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"


# The RNN decoders' dropout of stepped layers: every position's masks drawn at once


def step_dropout_masks(dropout, steps, count, like):
    """The dropout masks of ``steps`` decoding steps, ``count`` per step, drawn in one call:
    ``[steps x count x B x H]`` (the shape of ``like`` ``[B x H]``), each entry 0 with probability
    ``dropout.p`` and ``1 / (1 - p)`` otherwise, what ``dropout`` multiplies by; None when
    ``dropout`` does nothing (evaluation, p = 0). One call instead of one per step: each call's own
    cost was most of what drawing them step by step took."""
    if not dropout.training or dropout.p == 0:
        return None
    keep = torch.rand((steps, count) + tuple(like.shape), device=like.device) >= dropout.p
    return keep.to(like.dtype).div_(1 - dropout.p)


class DropoutMasks:
    """Every position's dropout masks, ``step_dropout_masks``'s ``[steps x count x B x H]``, each
    multiplied in the dtype of what it drops: converted once for each dtype, not at every position
    (under autocast a position's outputs are in the low precision, the masks drawn in float32)."""

    def __init__(self, masks: Tensor):
        self.drawn = masks
        self._by_dtype = {masks.dtype: masks}

    def drop(self, t: int, x: Tensor, i: int) -> Tensor:
        """``x`` times the mask ``i`` of position ``t``, in ``x``'s dtype."""
        if x.dtype not in self._by_dtype:
            self._by_dtype[x.dtype] = self.drawn.to(x.dtype)
        return x * self._by_dtype[x.dtype][t, i]
