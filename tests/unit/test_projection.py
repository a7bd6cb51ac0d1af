"""The vocabulary projection pads its rows to a few sizes under CPU autocast, and only there."""

import pytest
import torch

from onmt_lite.data.vocab import PAD_ID
from onmt_lite.models.projection import bucket_below, project, row_bucket
from onmt_lite.train.precision import Precision
from tests.model_helpers import random_pairs
from tests.unit.test_precision import float32_trainer, float_batch


def test_row_bucket_adds_at_most_an_eighth_or_fifteen_rows_and_is_its_own_bucket():
    for rows in range(1, 10_000):
        bucket = row_bucket(rows)
        assert rows <= bucket <= rows + max(15, rows // 8), rows
        assert row_bucket(bucket) == bucket, rows
    assert row_bucket(0) == 0


def test_bucket_below_is_the_largest_bucket_not_above_the_rows():
    buckets = sorted({row_bucket(rows) for rows in range(16, 5000)})
    for rows in range(16, 4097):
        assert bucket_below(rows) == max(b for b in buckets if b <= rows), rows
    assert [bucket_below(rows) for rows in (1, 15)] == [1, 15]


def test_row_counts_up_to_2048_fall_into_40_sizes():
    # 16, 32, ..., 256 in steps of 16, then 8 sizes per doubling: 288..512, 576..1024, 1152..2048
    expected = (
        list(range(16, 257, 16))
        + list(range(288, 513, 32))
        + list(range(576, 1025, 64))
        + list(range(1152, 2049, 128))
    )
    assert sorted({row_bucket(rows) for rows in range(1, 2049)}) == expected
    assert len(expected) == 40


def recording_linear(seen):
    torch.manual_seed(0)
    linear = torch.nn.Linear(8, 50)
    linear.register_forward_hook(lambda module, inputs, output: seen.append(inputs[0].size(0)))
    return linear


@pytest.mark.parametrize("rows", [1, 37, 130, 300])
def test_under_bf16_autocast_values_and_gradients_are_the_unpadded_products(rows):
    seen = []
    linear = recording_linear(seen)
    hidden = torch.randn(rows, 8, generator=torch.Generator().manual_seed(rows))
    results = []
    for fn in (project, lambda layer, x: layer(x)):
        linear.zero_grad()
        x = hidden.clone().requires_grad_()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = fn(linear, x)
        assert out.shape == (rows, 50) and out.dtype == torch.bfloat16
        (out.float() * torch.linspace(-1, 1, 50)).sum().backward()
        results.append((out.float(), x.grad, linear.weight.grad.clone(), linear.bias.grad.clone()))
    assert seen == [row_bucket(rows), rows]
    for padded, plain in zip(*results):
        torch.testing.assert_close(padded, plain, rtol=1e-2, atol=1e-2)


def test_float32_runs_the_exact_rows_unpadded():
    seen = []
    linear = recording_linear(seen)
    hidden = torch.randn(37, 8)
    assert torch.equal(project(linear, hidden), linear(hidden))
    assert seen == [37, 37]


@pytest.mark.parametrize("model_args", [[], ["-copy_attn"]])
def test_bf16_training_projects_only_bucket_sizes_of_rows(model_args, monkeypatch):
    """Through the generator's module (copy) or the fused loss's chunks (plain): every product with
    the vocabulary's weight has a bucket's row count."""
    trainer, model = float32_trainer(Precision("bf16"), model_args, shard=2)
    weight = (model.generator.linear if model_args else model.generator[0]).weight
    seen = []
    linear = torch.nn.functional.linear
    monkeypatch.setattr(
        torch.nn.functional,
        "linear",
        lambda x, w, *a: (w is weight and seen.append(x.size(0))) or linear(x, w, *a),
    )
    words = []
    for seed in range(6):
        batch = float_batch(random_pairs(3 + seed, seed=seed))
        trainer.forward_backward(batch, 4)
        words.append(int((batch.tgt[1:] != PAD_ID).sum()))
    assert seen and all(rows == row_bucket(rows) for rows in seen)
    assert sum(seen) >= sum(words)  # every real target word was projected
