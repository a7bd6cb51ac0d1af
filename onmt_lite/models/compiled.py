"""``-torch_compile``: the Transformer's layers trained through ``torch.compile``.

On a GPU a small Transformer's step is many short kernels (layer norms, dropouts, residual adds)
launched one by one from Python; compiled, each layer's forward and backward are fewer, fused
kernels. Compiled with ``dynamic=True``: batches change shape every step, and a graph per shape
would compile for most of a run. The first steps pay the compile time (tens of seconds a layer
kind), so it is an option, for long runs.

Only training compiles: a layer's forward is replaced, on the instance, by one that runs the
compiled function while the module trains with gradients and the plain forward otherwise
(validation, translation, whose step-by-step cache would compile a graph per length). Parameters
and their names (the checkpoint files) are unchanged. Random numbers: Inductor's dropout kernels
take their seeds from the same generator (its state is in every checkpoint) but draw other masks
than the eager kernels, so a compiled run's losses are not those of the same run uncompiled; that
it is reproducible with ``-seed`` and resumes exactly on a GPU is for ``bench/gpu_check.py`` to show
(not yet run there).
"""

from __future__ import annotations

import functools
from typing import Callable

import torch
import torch.nn as nn

from onmt_lite.models.transformer import TransformerDecoderLayer, TransformerEncoderLayer
from onmt_lite.utils.errors import UserError

LAYERS = (TransformerEncoderLayer, TransformerDecoderLayer)


def compiled_in_training(forward: Callable, backend: str) -> Callable:
    """``forward`` (a module's bound method) compiled, run while its module trains with
    gradients; the plain ``forward`` otherwise."""
    compiled = torch.compile(forward, dynamic=True, backend=backend)

    @functools.wraps(forward)
    def run(*args, **kwargs):
        if forward.__self__.training and torch.is_grad_enabled():
            return compiled(*args, **kwargs)
        return forward(*args, **kwargs)

    return run


def compile_layers(model: nn.Module, backend: str = "inductor") -> int:
    """Compile the training forward of every Transformer layer of ``model`` (``backend``: the
    ``torch.compile`` backend; the tests use ``eager``, which only traces); returns how many. A
    model without Transformer layers is refused by name."""
    layers = [m for m in model.modules() if isinstance(m, LAYERS)]
    if not layers:
        raise UserError(
            "-torch_compile: the model has no Transformer layers (it compiles those of "
            "-encoder_type/-decoder_type transformer)"
        )
    for layer in layers:
        layer.forward = compiled_in_training(layer.forward, backend)
    return len(layers)
