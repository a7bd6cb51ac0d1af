"""Trainer steps: accumulation equals a larger batch, truncation, freezing, per-group learning
rates."""

import argparse
import re

import pytest
import torch

from onmt_lite.loss import build_loss_compute
from onmt_lite.train.optim import Optimizer
from onmt_lite.train.trainer import Trainer, normalization
from onmt_lite.utils.errors import UserError
from tests.model_helpers import (
    TGT_VOCAB,
    TRANSFORMER,
    assert_grads_equal,
    grads,
    make_batch,
    make_model,
    random_pairs,
)


def optim_options(**overrides):
    values = dict(
        optim="sgd",
        learning_rate=1.0,
        adam_beta1=0.9,
        adam_beta2=0.999,
        adagrad_accumulator_init=0,
        weight_decay=0.0,
        max_grad_norm=0.0,
        decay_method="none",
        warmup_steps=1,
        learning_rate_decay=0.5,
        start_decay_steps=10**9,
        decay_steps=1,
        lr_mult=[],
        freeze=[],
    )
    values.update(overrides)
    return argparse.Namespace(**values)


def make_trainer(*model_args, shard=0, trunc=0, norm="sents", seed=0, **optim_overrides):
    model, opt = make_model(*model_args, seed=seed)
    optim = Optimizer(model, optim_options(**optim_overrides), 8)
    loss = build_loss_compute(model, TGT_VOCAB, opt)
    return Trainer(
        model,
        loss_compute=loss,
        valid_loss_compute=loss,
        optim=optim,
        shard_size=shard,
        trunc_size=trunc,
        norm_method=norm,
    ), model


def params(model):
    return {name: p.detach().clone() for name, p in model.named_parameters()}


@pytest.mark.parametrize("norm", ["sents", "tokens"])
@pytest.mark.parametrize(
    "model_args,shard",
    [
        ([], 0),
        (["-copy_attn", "-coverage_attn", "-lambda_coverage", 1], 2),
        ([*TRANSFORMER, "-copy_attn"], 2),
    ],
)
def test_accumulating_two_batches_equals_one_batch_twice_as_large(norm, model_args, shard):
    first = random_pairs(3, seed=11)
    second = random_pairs(4, seed=12)
    accumulated, model_a = make_trainer(*model_args, shard=shard, norm=norm)
    accumulated.train_step([make_batch(first), make_batch(second)])
    single, model_b = make_trainer(*model_args, shard=shard, norm=norm)
    single.train_step([make_batch(first + second)])
    assert_grads_equal(params(model_b), params(model_a), rtol=1e-9)
    initial = params(make_model(*model_args)[0])
    assert all(not torch.equal(initial[name], value) for name, value in params(model_a).items())


def test_normalization_counts_sentences_or_target_tokens():
    batches = [
        make_batch([(["s1"], ["t1", "t2"])]),
        make_batch([(["s1"], ["t1"]), (["s2"], ["t0", "t1", "t2"])]),
    ]
    assert normalization(batches, "sents") == 3
    assert normalization(batches, "tokens") == (2 + 1) + (1 + 1) + (3 + 1)  # words and </s>


def test_truncation_keeps_the_loss_and_generator_gradient_but_cuts_recurrent_gradients():
    batch = make_batch(random_pairs(3, seed=13, min_len=6))
    results = {}
    for trunc in (0, 2):
        trainer, model = make_trainer(trunc=trunc)
        model.zero_grad()
        stats = trainer.forward_backward(batch, 3)
        results[trunc] = (stats, grads(model))
    assert results[0][0] == results[2][0]
    generator = {k: v for k, v in results[0][1].items() if k.startswith("generator")}
    assert_grads_equal(
        generator, {k: v for k, v in results[2][1].items() if k.startswith("generator")}
    )
    name = "decoder.rnn.cells.0.weight_hh"
    assert not torch.allclose(results[0][1][name], results[2][1][name])


def test_frozen_parameters_stay_bit_identical_and_the_rest_moves():
    trainer, model = make_trainer(
        freeze=["encoder.*", "*.embeddings.*"], optim="adam", learning_rate=0.01
    )
    before = params(model)
    for seed in range(3):
        trainer.train_step([make_batch(random_pairs(4, seed=seed))])
    after = params(model)
    frozen = [n for n in before if n.startswith("encoder.") or ".embeddings." in n]
    assert frozen and all(torch.equal(before[n], after[n]) for n in frozen)
    assert all(not torch.equal(before[n], after[n]) for n in before if n not in frozen)


def start_and_gradient(batch):
    """The initial parameters of the test model and their gradient on ``batch`` (normalised by
    4)."""
    reference, model = make_trainer()
    start = params(model)
    model.zero_grad()
    reference.forward_backward(batch, 4)
    return start, grads(model)


def test_lr_mult_scales_each_groups_update():
    batch = make_batch(random_pairs(4, seed=14))
    start, gradient = start_and_gradient(batch)
    trainer, model = make_trainer(learning_rate=0.5, lr_mult=["generator.*=0.1", "encoder.rnn.*=0"])
    trainer.train_step([batch])
    after = params(model)
    for name, value in after.items():
        factor = (
            0.1
            if name.startswith("generator.")
            else 0.0
            if name.startswith("encoder.rnn.")
            else 1.0
        )
        torch.testing.assert_close(value, start[name] - 0.5 * factor * gradient[name], msg=name)


def test_patterns_that_match_nothing_are_refused():
    with pytest.raises(UserError, match="-freeze decoder.nothing.*: no parameter name matches"):
        make_trainer(freeze=["decoder.nothing.*"])
    with pytest.raises(UserError, match="-lr_mult"):
        make_trainer(lr_mult=["encoder.*"])


def test_validation_runs_in_eval_mode_without_gradients():
    trainer, model = make_trainer("-dropout", "0.5")
    batches = [make_batch(random_pairs(4, seed=15))]
    first = trainer.validate(batches)
    second = trainer.validate(batches)
    assert first == second and first.n_words > 0
    assert model.training and all(p.grad is None for p in model.parameters())


def test_max_grad_norm_scales_the_whole_gradient_to_that_norm_and_leaves_smaller_ones_alone():
    batch = make_batch(random_pairs(4, seed=15))
    start, gradient = start_and_gradient(batch)
    norm = torch.cat([g.flatten() for g in gradient.values()]).norm().item()
    for max_norm, expected_factor in ((norm / 4, 0.25), (norm * 4, 1.0)):
        trainer, model = make_trainer(learning_rate=1.0, max_grad_norm=max_norm)
        trainer.train_step([batch])
        after = params(model)
        for name in after:
            torch.testing.assert_close(
                after[name],
                start[name] - expected_factor * gradient[name],
                msg=name,
                rtol=1e-4,
                atol=1e-6,
            )


def poisoned_once(model, poison):
    """Make the next step's loss (a generator bias of NaN, put back by ``heal``) or gradient (an
    encoder weight's, times infinity, for one backward pass) not finite; returns ``heal``."""
    if poison == "loss":
        bias = model.generator[0].bias
        kept = bias[3].item()
        with torch.no_grad():
            bias[3] = float("nan")  # every prediction's softmax turns NaN

        def heal():
            with torch.no_grad():
                bias[3] = kept

        return heal
    hooks = []

    def once(grad):
        hooks.pop().remove()
        return grad * float("inf")

    hooks.append(model.encoder.rnn.weight_hh_l0.register_hook(once))
    return lambda: None


@pytest.mark.parametrize("poison", ["loss", "gradient"])
@pytest.mark.parametrize("checked", ["each step", "deferred"])
def test_a_non_finite_loss_or_gradient_stops_before_anything_changes(poison, checked):
    """Read at each step (an optimizer that cannot skip on the device, fp16, several processes), the
    bad step raises before it is applied. Deferred (a fused Adam: ``step_checks.py``), the device
    skips it and the finite steps after it; the read raises naming it, and the weights, moments and
    schedule are those before it."""
    from onmt_lite.train.optim import NonFiniteError

    trainer, model = make_trainer(optim="adam", learning_rate=0.01)
    assert trainer.checks is not None  # a fused Adam on one process, float32
    if checked == "each step":
        trainer.checks = None
    trainer.train_step([make_batch(random_pairs(4, seed=16))])
    trainer.check_steps()
    before = params(model)
    schedule_step = trainer.optim.decay_step
    moments = {k: v["exp_avg"].clone() for k, v in trainer.optim.state_dict()["state"].items()}
    steps = {k: v["step"].clone() for k, v in trainer.optim.state_dict()["state"].items()}
    heal = poisoned_once(model, poison)
    with pytest.raises(NonFiniteError, match="nan|inf") as error:
        trainer.train_step([make_batch(random_pairs(4, seed=17))])
        heal()
        for seed in (18, 19):  # finite steps, skipped too
            trainer.train_step([make_batch(random_pairs(4, seed=seed))])
        trainer.check_steps()
    heal()
    assert error.value.later == (0 if checked == "each step" else 2)
    match = "the loss is nan" if poison == "loss" else "the gradient norm is (nan|inf)"
    assert re.fullmatch(match, str(error.value)), str(error.value)
    after = params(model)
    assert all(torch.equal(before[n], after[n]) for n in before)
    assert trainer.optim.decay_step == schedule_step
    state = trainer.optim.state_dict()["state"]
    assert all(torch.equal(moments[k], v["exp_avg"]) for k, v in state.items())
    assert all(torch.equal(steps[k], v["step"]) for k, v in state.items())


def test_deferred_checks_are_read_at_most_every_most_unread_steps(monkeypatch):
    """A run that neither reports nor saves for long still reads its checks: a bad step stops
    it within ``MOST_UNREAD`` steps."""
    from onmt_lite.train import step_checks
    from onmt_lite.train.optim import NonFiniteError

    monkeypatch.setattr(step_checks, "MOST_UNREAD", 3)
    trainer, model = make_trainer(optim="adam", learning_rate=0.01)
    trainer.train_step([make_batch(random_pairs(4, seed=16))])
    poisoned_once(model, "gradient")
    trainer.train_step([make_batch(random_pairs(4, seed=17))])  # 2 unread
    with pytest.raises(NonFiniteError, match="the gradient norm is") as error:
        trainer.train_step([make_batch(random_pairs(4, seed=18))])  # 3: read
    assert error.value.later == 1
    assert trainer.checks.pending == []


def test_the_normaliser_is_read_before_the_batches_move_to_the_device(monkeypatch):
    from onmt_lite.data.batch import Batch
    from onmt_lite.train import trainer as trainer_module

    original_to = Batch.to
    read = []

    def to(self, device):
        self.moved = True
        return original_to(self, device)

    def recording_normalization(batches, method):
        read.append([getattr(b, "moved", False) for b in batches])
        return normalization(batches, method)

    monkeypatch.setattr(Batch, "to", to)
    monkeypatch.setattr(trainer_module, "normalization", recording_normalization)
    trainer, _ = make_trainer(norm="tokens")
    trainer.train_step([make_batch(random_pairs(2, seed=1)), make_batch(random_pairs(3, seed=2))])
    assert read == [[False, False]]


def test_the_accumulation_schedule_follows_opennmt_py_1x():
    """1.x's _accum_count: the count of the last -accum_steps entry the step number is past."""
    from onmt_lite.train.trainer import scheduled as accum_count_at

    counts = [1, 2, 4]
    steps = [0, 3, 6]
    expected = {1: 1, 2: 1, 3: 1, 4: 2, 5: 2, 6: 2, 7: 4, 100: 4}  # written out from the rule
    assert {step: accum_count_at(step, counts, steps) for step in expected} == expected
    assert [accum_count_at(step, [3], [0]) for step in (1, 2, 50)] == [3, 3, 3]


@pytest.mark.parametrize(
    "counts,steps,match",
    [
        ([1, 2], [0], "-accum_count has 2 value"),
        ([1, 2], [1, 5], "must start at 0"),
        ([1, 2, 3], [0, 5, 5], "must start at 0 and increase"),
    ],
)
def test_a_schedule_that_is_not_one_is_refused(counts, steps, match):
    from onmt_lite.train.trainer import check_schedule
    from onmt_lite.utils.errors import UserError

    with pytest.raises(UserError, match=match):
        check_schedule(counts, steps, "-accum_count", "-accum_steps")


def test_a_dropout_schedule_takes_one_value_for_all_steps_or_one_per_step():
    from onmt_lite.train.trainer import check_schedule, scheduled
    from onmt_lite.utils.errors import UserError

    # one value: all the steps
    check_schedule([0.1], [0, 5], "-attention_dropout", "-dropout_steps")
    check_schedule([0.3, 0.1], [0, 5], "-dropout", "-dropout_steps")
    with pytest.raises(UserError, match="-dropout has 3 value"):
        check_schedule([0.3, 0.2, 0.1], [0, 5], "-dropout", "-dropout_steps")
    with pytest.raises(UserError, match="-accum_count has 1 value"):
        check_schedule([2], [0, 5], "-accum_count", "-accum_steps")  # 1.x: one count per step
    assert [scheduled(step, [0.3, 0.1], [0, 5]) for step in (1, 5, 6)] == [0.3, 0.3, 0.1]
