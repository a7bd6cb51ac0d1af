"""-model_dtype: bf16 autocast with sharding; fp16 loss scaling (exact, overflow skips, growth)."""

import contextlib

import pytest
import torch

from onmt_lite.train import precision as precision_module
from onmt_lite.train.precision import Precision
from tests.model_helpers import assert_grads_equal, grads, make_batch, random_pairs
from tests.unit.test_trainer import make_trainer, params


def float32_trainer(precision=None, model_args=(), **kwargs):
    trainer, model = make_trainer(*model_args, **kwargs)
    model.float()
    trainer.precision = precision or Precision("fp32")
    return trainer, model


def float_batch(pairs):
    batch = make_batch(pairs)
    batch.src_map = batch.src_map.float()
    return batch


@pytest.mark.parametrize("shard", [0, 2])
def test_bf16_runs_the_forward_in_bfloat16_and_gives_gradients_close_to_float32(shard):
    batch = float_batch(random_pairs(4, seed=20))
    results = {}
    for name in ("fp32", "bf16"):
        trainer, model = float32_trainer(Precision(name), shard=shard)
        model.zero_grad()
        with trainer.precision.autocast():
            assert model.generator[0](torch.zeros(1, 8)).dtype == (
                torch.bfloat16 if name == "bf16" else torch.float32
            )
        stats = trainer.forward_backward(batch, 4)
        results[name] = (stats, grads(model))
    assert results["bf16"][0].loss == pytest.approx(results["fp32"][0].loss, rel=2e-2)
    for key, value in results["fp32"][1].items():
        assert all(g.dtype == torch.float32 for g in results["bf16"][1].values())
        torch.testing.assert_close(results["bf16"][1][key], value, rtol=0.1, atol=2e-3, msg=key)
    assert any(not torch.equal(results["bf16"][1][k], v) for k, v in results["fp32"][1].items())


def test_bf16_sharded_gradients_equal_unsharded_ones_to_bf16_rounding():
    batch = float_batch(random_pairs(4, seed=21))
    results = []
    for shard in (0, 2):
        trainer, model = float32_trainer(Precision("bf16"), shard=shard)
        model.zero_grad()
        trainer.forward_backward(batch, 4)
        results.append(grads(model))
    assert_grads_equal(results[0], results[1], rtol=2e-2, atol=1e-3)


def without_autocast(monkeypatch):
    """fp16 autocast has no CPU kernels for LSTMs: test the loss scaling around float32
    arithmetic."""
    monkeypatch.setattr(Precision, "autocast", lambda self: contextlib.nullcontext())


@pytest.mark.parametrize("shard,optim", [(0, "sgd"), (2, "sgd"), (2, "adam")])
def test_fp16_loss_scaling_is_exact_a_power_of_two_in_and_out(monkeypatch, shard, optim):
    without_autocast(monkeypatch)
    batches = [float_batch(random_pairs(4, seed=s)) for s in (22, 23)]
    after = []
    for name in ("fp32", "fp16"):
        trainer, model = float32_trainer(
            Precision(name), shard=shard, optim=optim, learning_rate=0.01, max_grad_norm=1.0
        )
        for batch in batches:
            trainer.train_step([batch])
        after.append(params(model))
    assert all(torch.equal(after[0][n], after[1][n]) for n in after[0])


def test_fp16_overflow_skips_the_step_and_halves_the_scale_then_good_steps_double_it(monkeypatch):
    without_autocast(monkeypatch)
    monkeypatch.setattr(precision_module, "GROWTH_INTERVAL", 2)
    trainer, model = float32_trainer(Precision("fp16"))
    batch = float_batch(random_pairs(4, seed=24))
    hook = model.encoder.rnn.weight_hh_l0.register_hook(lambda g: g * float("inf"))
    before = params(model)
    scale = trainer.precision.scale
    trainer.train_step([batch])  # no exception: an overflow is expected now and then with fp16
    assert trainer.precision.scale == scale / 2
    assert all(torch.equal(before[n], v) for n, v in params(model).items())
    assert trainer.optim.decay_step == 0
    hook.remove()
    trainer.train_step([batch])
    trainer.train_step([batch])
    assert trainer.precision.scale == scale and trainer.optim.decay_step == 2
    assert trainer.precision.state_dict() == {"scale": scale, "good_steps": 0}


def test_fp16_overflows_lower_the_scale_to_its_floor_and_then_stop_training(monkeypatch):
    """A step that is not finite at every scale is no overflow: the scale stops at MIN_SCALE and the
    next such step raises (before the floor, ~1,090 halvings reached 0 and divided by it)."""
    from onmt_lite.train.optim import NonFiniteError

    without_autocast(monkeypatch)
    trainer, model = float32_trainer(Precision("fp16"))
    batch = float_batch(random_pairs(4, seed=25))
    model.encoder.rnn.weight_hh_l0.register_hook(lambda g: g * float("inf"))
    before = params(model)
    for _ in range(16):  # 2^16 down to 1
        trainer.train_step([batch])
    assert trainer.precision.scale == precision_module.MIN_SCALE == 1.0
    with pytest.raises(NonFiniteError, match="gradient norm is"):
        trainer.train_step([batch])
    assert trainer.precision.scale == 1.0 and trainer.optim.decay_step == 0
    assert all(torch.equal(before[n], v) for n, v in params(model).items())


def test_fp16_on_the_cpu_is_refused_with_the_alternative(tmp_path):
    from onmt_lite.utils.errors import UserError
    from tests.helpers import TINY_MODEL, preprocess_in_process, train_in_process

    data = preprocess_in_process(str(tmp_path))
    with pytest.raises(
        UserError, match="-model_dtype fp16 needs a CUDA device .* use -model_dtype bf16"
    ):
        train_in_process(
            data, str(tmp_path / "m"), *TINY_MODEL, "-model_dtype", "fp16", "-train_steps", 1
        )
