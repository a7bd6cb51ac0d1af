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


def adam_steps(trainer):
    """The step count of each parameter's Adam moments (updates applied, skipped ones not)."""
    return [int(state["step"]) for state in trainer.optim.optimizers[0].state.values()]


# sgd: each step read on the host before its update; adam (fused): the scale and the skip on the
# device, the overflows read later (step_checks.py)
@pytest.mark.parametrize("optim", ["sgd", "adam"])
def test_fp16_overflow_skips_the_step_and_halves_the_scale_then_good_steps_double_it(
    monkeypatch, caplog, optim
):
    without_autocast(monkeypatch)
    monkeypatch.setattr(precision_module, "GROWTH_INTERVAL", 2)
    trainer, model = float32_trainer(Precision("fp16"), optim=optim, learning_rate=0.01)
    batch = float_batch(random_pairs(4, seed=24))
    hook = model.encoder.rnn.weight_hh_l0.register_hook(lambda g: g * float("inf"))
    before = params(model)
    scale = precision_module.INITIAL_SCALE
    with caplog.at_level("INFO", logger="onmt_lite"):
        trainer.train_step([batch])  # no exception: an overflow is expected now and then with fp16
        trainer.check_steps()
    assert f"fp16 gradients overflowed at loss scale {scale:g}: step skipped" in caplog.text
    assert trainer.precision.state_dict() == {"scale": scale / 2, "good_steps": 0}
    assert all(torch.equal(before[n], v) for n, v in params(model).items())
    # the schedule counts the skipped step (as OpenNMT-py's does); Adam's moments do not
    assert trainer.optim.decay_step == 1
    assert adam_steps(trainer) == ([0] * len(before) if optim == "adam" else [])
    hook.remove()
    trainer.train_step([batch])
    trainer.train_step([batch])
    trainer.check_steps()
    assert trainer.precision.state_dict() == {"scale": scale, "good_steps": 0}
    assert trainer.optim.decay_step == 3
    assert adam_steps(trainer) == ([2] * len(before) if optim == "adam" else [])


@pytest.mark.parametrize("optim", ["sgd", "adam"])
def test_fp16_overflows_lower_the_scale_to_its_floor_and_then_stop_training(monkeypatch, optim):
    """A step that is not finite at every scale is no overflow: the scale stops at MIN_SCALE and the
    next such step raises (before the floor, ~1,090 halvings reached 0 and divided by it); with a
    fused Adam at the read after it, the device having skipped it."""
    from onmt_lite.train.optim import NonFiniteError

    without_autocast(monkeypatch)
    trainer, model = float32_trainer(Precision("fp16"), optim=optim, learning_rate=0.01)
    batch = float_batch(random_pairs(4, seed=25))
    model.encoder.rnn.weight_hh_l0.register_hook(lambda g: g * float("inf"))
    before = params(model)
    for _ in range(16):  # 2^16 down to 1
        trainer.train_step([batch])
    trainer.check_steps()
    assert trainer.precision.state_dict()["scale"] == precision_module.MIN_SCALE == 1.0
    with pytest.raises(NonFiniteError, match="gradient norm is"):
        trainer.train_step([batch])
        trainer.check_steps()
    assert trainer.precision.state_dict()["scale"] == 1.0
    assert trainer.optim.decay_step == 16  # the overflows counted, not the step that stopped
    assert all(torch.equal(before[n], v) for n, v in params(model).items())


def test_fp16_with_the_check_on_the_device_trains_as_with_each_step_read_on_the_host(
    monkeypatch, caplog
):
    """The same fused Adam, its steps read at once (``checks`` None: the host path) or later: the
    same weights, moments, schedule, scale and overflow lines, over overflows and a doubling."""
    without_autocast(monkeypatch)
    monkeypatch.setattr(precision_module, "GROWTH_INTERVAL", 2)
    overflowing = {1, 4}  # the steps whose gradients overflow
    batches = [float_batch(random_pairs(4, seed=s)) for s in range(30, 37)]
    results = []
    for read_at_once in (True, False):
        trainer, model = float32_trainer(
            Precision("fp16"), optim="adam", learning_rate=0.01, max_grad_norm=1.0
        )
        if read_at_once:
            trainer.checks = None
        step = [0]

        def overflow(grad, step=step):
            return grad * float("inf") if step[0] in overflowing else grad

        model.encoder.rnn.weight_hh_l0.register_hook(overflow)
        caplog.clear()
        with caplog.at_level("INFO", logger="onmt_lite"):
            for index, batch in enumerate(batches):
                step[:] = [index]
                trainer.train_step([batch])
            trainer.check_steps()
        lines = [r.getMessage() for r in caplog.records if "overflowed" in r.getMessage()]
        moments = [
            v.clone() for s in trainer.optim.optimizers[0].state.values() for v in s.values()
        ]
        state = (trainer.precision.state_dict(), trainer.optim.decay_step, lines)
        results.append((params(model), moments, state))
    (params_a, moments_a, state_a), (params_b, moments_b, state_b) = results
    assert state_a == state_b
    assert len(state_a[2]) == 2 and state_a[1] == len(batches)
    assert all(torch.equal(params_a[n], params_b[n]) for n in params_a)
    assert all(torch.equal(a, b) for a, b in zip(moments_a, moments_b))


def test_fp16_scale_state_is_plain_numbers_and_loads_back_onto_the_device(monkeypatch):
    """A checkpoint holds the scale and its count of good steps as numbers; a resumed run's
    ``Precision`` holds them as the device tensors the steps update."""
    monkeypatch.setattr(precision_module, "GROWTH_INTERVAL", 3)
    precision = Precision("fp16")
    for finite in (False, True, torch.tensor(True)):
        precision.update(finite)
    state = precision.state_dict()
    assert state == {"scale": precision_module.INITIAL_SCALE / 2, "good_steps": 2}
    assert all(type(v) in (float, int) for v in state.values())
    resumed = Precision("fp16")
    resumed.load_state_dict(state)
    assert resumed.scale.dtype == torch.float32 and resumed.scale.dim() == 0
    for each in (precision, resumed):
        each.update(True)  # the third good step in a row doubles the scale
    doubled = {"scale": precision_module.INITIAL_SCALE, "good_steps": 0}
    assert resumed.state_dict() == precision.state_dict() == doubled


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
