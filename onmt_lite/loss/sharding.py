"""Sharding: a loss's state cut into pieces of ``shard_size`` target positions, each piece's
backward run on its own, then the gathered gradients backpropagated once through the model (the
memory-saving backward of ``LossComputeBase.forward``)."""

from __future__ import annotations

from typing import Iterator

import torch
from torch import Tensor


def filter_shard_state(
    state: dict[str, Tensor | None], shard_size: int | None = None
) -> Iterator[tuple]:
    """Yield the entries of ``state`` whose value is not None.

    Without ``shard_size``: ``(key, value)``. With it: ``(key, (value, chunks))``, where the chunks
    are ``torch.split(value, shard_size)`` along dim 0 (target positions), each detached from the
    graph (a view, no copy) and requiring grad exactly when ``value`` does, so that a shard's
    backward stops at the chunk and leaves its gradient in ``chunk.grad``.
    """
    for key, value in state.items():
        if value is None:
            continue
        if shard_size is None:
            yield key, value
            continue
        chunks = [
            chunk.detach().requires_grad_(value.requires_grad)
            for chunk in torch.split(value, shard_size)
        ]
        yield key, (value, chunks)


def shards(
    state: dict[str, Tensor | None], shard_size: int, eval_only: bool = False
) -> Iterator[dict[str, Tensor]]:
    """Yield ``state`` one shard of ``shard_size`` target positions at a time, as dicts.

    After the last shard (the caller has called ``backward`` on every shard's loss) the chunks'
    gradients are concatenated and backpropagated through the original tensors in one
    ``torch.autograd.backward`` call. Chunks no gradient reached count as zero; a tensor none of
    whose chunks got a gradient is left out. With ``eval_only`` the whole state is yielded once and
    nothing is backpropagated.
    """
    if eval_only:
        yield dict(filter_shard_state(state))
        return
    split = dict(filter_shard_state(state, shard_size))
    lengths = {key: value.size(0) for key, (value, _) in split.items()}
    if len(set(lengths.values())) != 1:
        raise ValueError(f"shard state tensors differ in length along dim 0: {lengths}")
    for i in range(len(next(iter(split.values()))[1])):
        yield {key: chunks[i] for key, (_, chunks) in split.items()}
    inputs = []
    grads = []
    for value, chunks in split.values():
        if not value.requires_grad or all(chunk.grad is None for chunk in chunks):
            continue
        inputs.append(value)
        grads.append(torch.cat([torch.zeros_like(c) if c.grad is None else c.grad for c in chunks]))
    if inputs:
        torch.autograd.backward(inputs, grads)
