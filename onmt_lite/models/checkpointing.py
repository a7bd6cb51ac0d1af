"""Activation checkpointing (``-use_ckpting``, OpenNMT-py 3.x's option): parts of the Transformer
layers keep no activations for the backward pass, which computes them again instead.

``ffn`` recomputes each ``FeedForward`` block, ``mha`` each ``MultiHeadAttention`` (self- and
context attention), which hold most of a layer's activations (``[B x T x ff]`` and the attention
weights ``[B x h x T x S]``): less memory for about one more forward pass of those parts. The
gradients are the same: ``torch.utils.checkpoint`` restores the generator's state before it
recomputes, so dropout draws the same masks. Only the module's ``forward`` is replaced, on the
instance: the parameters and their names (the checkpoint files) do not change, and inference
(no gradient) runs the plain forward.
"""

from __future__ import annotations

import functools

import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

from onmt_lite.models.multihead import MultiHeadAttention
from onmt_lite.models.transformer import FeedForward
from onmt_lite.utils.errors import UserError

PARTS = {"ffn": FeedForward, "mha": MultiHeadAttention}
CHOICES = (*PARTS, "lora")


def recomputed(forward):
    """``forward`` run under ``checkpoint`` while its module trains with gradients."""

    @functools.wraps(forward)
    def run(*args, **kwargs):
        if not (forward.__self__.training and torch.is_grad_enabled()):
            return forward(*args, **kwargs)
        return checkpoint(forward, *args, use_reentrant=False, **kwargs)

    return run


def use_checkpointing(model: nn.Module, parts: list[str]) -> int:
    """Recompute the ``parts`` (``ffn``, ``mha``) of ``model``'s Transformer layers in the backward
    pass; returns how many modules were set so. ``lora`` and a model without such layers are
    refused by name."""
    if "lora" in parts:
        raise UserError("-use_ckpting lora: onmt_lite has no LoRA layers (use ffn and/or mha)")
    kinds = tuple(PARTS[part] for part in dict.fromkeys(parts))
    modules = [m for m in model.modules() if isinstance(m, kinds)]
    if parts and not modules:
        raise UserError(
            f"-use_ckpting {' '.join(parts)}: the model has no Transformer layers "
            "(activation checkpointing applies to -encoder_type/-decoder_type "
            "transformer)"
        )
    for module in modules:
        module.forward = recomputed(module.forward)
    return len(modules)
