"""Relative positions (Shaw et al. 2018) through the 2k + 1 buckets: the same outputs, weights and
gradients as the formula that gathers a ``[T x K x d]`` tensor of table rows (kept here as the
reference), for the encoder with padding and for the decoder step by step, and no op ever makes a
tensor of length x length x head size."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from onmt_lite.models.dropout import dropout
from onmt_lite.models.multihead import MultiHeadAttention, relative_positions
from onmt_lite.models.transformer import TransformerEncoderLayer
from tests.model_helpers import TRANSFORMER, grads, make_batch, make_model, random_pairs

ATOL = 1e-5


def old_attend(
    self: MultiHeadAttention, query: Tensor, keys: Tensor, values: Tensor, mask: Tensor, p: float
) -> tuple[Tensor, Tensor]:
    """``MultiHeadAttention._attend`` as it was: the table rows of every (query, key) pair gathered
    into a ``[T x K x d]`` tensor, for the scores and for the output."""
    scores = torch.matmul(query, keys.transpose(2, 3))  # [B x h x T x K]
    relative = None
    if self.relative is not None:
        # [T x K]
        ids = relative_positions(
            query.size(2), keys.size(2), self.max_relative_positions, query.device
        )
        relative = self.relative(ids)  # [T x K x d]
        # [B x T x h x d] by [T x d x K], batched over T
        by_query = torch.matmul(query.transpose(1, 2), relative.transpose(1, 2))  # [B x T x h x K]
        scores = scores + by_query.transpose(1, 2)
    scores = scores / self.head_dim**0.5
    if mask.dtype != torch.bool:  # the stacks' masks are addends (multihead.additive_mask)
        mask = mask == 0
    weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    dropped = dropout(weights, p)
    context = torch.matmul(dropped, values)  # [B x h x T x d]
    if relative is not None:
        # [B x T x h x K] by [T x K x d], batched over T
        summed = torch.matmul(dropped.transpose(1, 2), relative)  # [B x T x h x d]
        context = context + summed.transpose(1, 2)
    return context, weights


def relative_model(seed: int = 0):
    model, _ = make_model(*TRANSFORMER, "-max_relative_positions", 3, "-layers", 2, seed=seed)
    return model.float().eval()


def step_by_step(model, batch) -> Tensor:
    """dec_out ``[T x B x H]`` of the teacher-forced targets, decoded one position at a time."""
    memory_bank, lengths, state = model.encode(batch.src, batch.src_lengths)
    keys = model.decoder.memory_keys(memory_bank)
    outs = []
    for t in range(batch.tgt.size(0) - 1):
        out, _, state = model.decode(batch.tgt[t : t + 1], memory_bank, lengths, state, keys)
        outs.append(out)
    return torch.cat(outs)


def attention_inputs(seed: int = 0):
    """Queries ``[B x h x T x d]``, keys and values ``[B x h x K x d]`` and a padding mask
    ``[B x 1 x 1 x K]`` (the rows' lengths 7, 4 and 1) for 4 heads of 8."""
    generator = torch.Generator().manual_seed(seed)
    query, keys, values = (
        torch.randn(3, 4, 7, 8, generator=generator, requires_grad=True) for _ in range(3)
    )
    mask = (torch.arange(7) < torch.tensor([[7], [4], [1]])).view(3, 1, 1, 7)
    return query, keys, values, mask


@pytest.mark.parametrize("p", [0.0, 0.3])
def test_attention_equals_the_old_formula_with_its_gradients(monkeypatch, p):
    """With dropout (training, the same draws) the output term uses the same dropped weights."""
    torch.manual_seed(0)
    attention = MultiHeadAttention(32, 4, p, max_relative_positions=3).train()
    results = []
    for attend in (MultiHeadAttention._attend, old_attend):
        monkeypatch.setattr(MultiHeadAttention, "_attend", attend)
        attention.zero_grad()
        inputs = attention_inputs()
        torch.manual_seed(1)
        out, weights = attention(*inputs, need_weights=True)
        # random cotangents, so that every output and weight enters the gradient
        generator = torch.Generator().manual_seed(2)
        loss = (out * torch.randn(out.shape, generator=generator)).sum() + (
            weights * torch.randn(weights.shape, generator=generator)
        ).sum()
        loss.backward()
        gradients = [tensor.grad for tensor in inputs[:3]] + [attention.relative.weight.grad]
        results.append((out, weights, gradients))
    (new_out, new_weights, new_grads), (old_out, old_weights, old_grads) = results
    assert torch.equal(new_weights[1, :, :, 4:], torch.zeros_like(new_weights[1, :, :, 4:]))
    torch.testing.assert_close(new_weights, old_weights, rtol=0, atol=ATOL)
    torch.testing.assert_close(new_out, old_out, rtol=0, atol=ATOL)
    for new, old in zip(new_grads, old_grads):
        torch.testing.assert_close(new, old, rtol=0, atol=ATOL)


def test_encoder_and_decoder_equal_the_old_formula_full_and_step_by_step(monkeypatch):
    """The whole model (encoder with padded sources, decoder) with the old formula, teacher-forced,
    against the new one teacher-forced and decoding one position at a time (query length 1, the
    key length growing)."""
    model = relative_model()
    batch = make_batch(random_pairs(5, seed=3, min_len=1, max_len=9))
    with torch.no_grad():
        with monkeypatch.context() as patch:
            patch.setattr(MultiHeadAttention, "_attend", old_attend)
            old_full, old_attns = model(batch.src, batch.tgt, batch.src_lengths)
            old_bank = model.encode(batch.src, batch.src_lengths)[1]
        new_full, new_attns = model(batch.src, batch.tgt, batch.src_lengths)
        new_bank = model.encode(batch.src, batch.src_lengths)[1]
        new_stepped = step_by_step(model, batch)
    torch.testing.assert_close(new_bank, old_bank, rtol=0, atol=ATOL)
    torch.testing.assert_close(new_full, old_full, rtol=0, atol=ATOL)
    torch.testing.assert_close(new_attns["std"], old_attns["std"], rtol=0, atol=ATOL)
    torch.testing.assert_close(new_stepped, old_full, rtol=0, atol=ATOL)


def test_model_gradients_equal_the_old_formulas(monkeypatch):
    model = relative_model(seed=1).train()
    batch = make_batch(random_pairs(4, seed=5, min_len=2, max_len=8))
    results = []
    for attend in (MultiHeadAttention._attend, old_attend):
        monkeypatch.setattr(MultiHeadAttention, "_attend", attend)
        model.zero_grad()
        dec_out, _ = model(batch.src, batch.tgt, batch.src_lengths)
        generator = torch.Generator().manual_seed(7)
        (dec_out * torch.randn(dec_out.shape, generator=generator)).sum().backward()
        results.append(grads(model))
    new, old = results
    assert new.keys() == old.keys()
    assert any("relative" in name for name in new)
    for name in new:
        torch.testing.assert_close(new[name], old[name], rtol=0, atol=ATOL, msg=name)


class LargestOutput(TorchDispatchMode):
    """Records the largest number of elements of any op's output (and which op made it)."""

    def __init__(self):
        super().__init__()
        self.numel = 0
        self.op = None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in tree_flatten(out)[0]:
            if isinstance(tensor, Tensor) and tensor.numel() > self.numel:
                self.numel = tensor.numel()
                self.op = func
        return out


def largest_output_of_a_layer(
    length: int, device: str = "cpu", backward: bool = True
) -> LargestOutput:
    """The largest op output of a forward (and backward) of one encoder layer: model size 256,
    4 heads of 64, k = 8, one line of ``length`` tokens. On the meta device nothing is allocated."""
    torch.manual_seed(0)
    layer = TransformerEncoderLayer(256, 4, 1024, 0.0, 0.0, max_relative_positions=8).to(device)
    x = torch.randn(1, length, 256, device=device, requires_grad=backward)
    mask = torch.ones(1, 1, 1, length, dtype=torch.bool, device=device)
    with LargestOutput() as largest:
        out = layer(x, mask)
        if backward:
            out.sum().backward()
    return largest


def test_no_op_makes_a_length_by_length_by_head_size_tensor():
    length = 400
    head_dim = 64
    largest = largest_output_of_a_layer(length)
    assert largest.numel < length * length * head_dim, largest.op
    # 4 heads' scores [1 x 4 x T x K] are the largest
    assert largest.numel == 4 * length * length


def test_the_old_formula_trips_the_same_check(monkeypatch):
    """The check above bites: the reference builds its ``[T x K x d]`` table rows."""
    length = 400
    head_dim = 64
    monkeypatch.setattr(MultiHeadAttention, "_attend", old_attend)
    largest = largest_output_of_a_layer(length)
    assert largest.numel >= length * length * head_dim
