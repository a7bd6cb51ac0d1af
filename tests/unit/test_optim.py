"""Learning-rate schedules by hand; optimizer state saved by name; early stopping."""

import pytest
import torch

from onmt_lite.train.early_stopping import EarlyStopping
from onmt_lite.train.optim import Optimizer, Schedule, parse_lr_mult
from onmt_lite.utils.errors import UserError
from tests.model_helpers import make_model
from tests.unit.test_trainer import optim_options


def test_step_decay_follows_opennmt_py_1x():
    schedule = Schedule(
        "none", 0.5, start_decay_steps=10, decay_steps=5, warmup_steps=0, model_size=1
    )
    assert [schedule(s) for s in (1, 9, 10, 14, 15, 20)] == [1, 1, 0.5, 0.5, 0.25, 0.125]


def test_noam_and_rsqrt_by_hand():
    noam = Schedule("noam", 0.5, 0, 1, warmup_steps=4, model_size=16)
    assert noam(1) == pytest.approx(16**-0.5 * 1 * 4**-1.5)
    assert noam(16) == pytest.approx(16**-0.5 * 16**-0.5)
    rsqrt = Schedule("rsqrt", 0.5, 0, 1, warmup_steps=4, model_size=1)
    assert (rsqrt(1), rsqrt(16)) == (0.5, 0.25)


def test_noamwd_is_noam_times_the_step_decay_as_in_1x():
    """1.x's noamwd: noam's factor times decay ** (max(step - start + every, 0) // every)."""
    noamwd = Schedule(
        "noamwd", 0.5, start_decay_steps=5, decay_steps=3, warmup_steps=2, model_size=4
    )
    halvings = [0, 0, 0, 0, 1, 1, 1, 2, 2, 2]  # steps 1 to 10: at step 5, then every 3 steps
    for step, times in zip(range(1, 11), halvings):
        noam = 4**-0.5 * min(step**-0.5, step * 2**-1.5)
        assert noamwd(step) == pytest.approx(noam * 0.5**times)


def test_fusedadam_steps_as_adam_with_the_epsilon_of_1x_apex_fusedadam():
    """1.x's -optim fusedadam was apex's FusedAdam: Adam with its default epsilon, 1e-8 (1.x's adam:
    1e-9). Three steps equal those of torch's unfused Adam with those settings."""
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    reference_model = torch.nn.Linear(3, 2)
    reference_model.load_state_dict(model.state_dict())
    options = optim_options(optim="fusedadam", learning_rate=0.01, adam_beta2=0.98)
    optim = Optimizer(model, options, 8)
    reference = torch.optim.Adam(
        reference_model.parameters(), lr=0.01, betas=(0.9, 0.98), eps=1e-8, foreach=False
    )
    assert (
        type(optim.optimizers[0]) is torch.optim.Adam
        and optim.optimizers[0].defaults["eps"] == 1e-8
    )
    inputs = torch.randn(4, 3)
    for _ in range(3):
        for m, o in ((model, optim), (reference_model, reference)):
            m.zero_grad()
            (m(inputs) ** 2).sum().backward()
            o.step()
    for a, b in zip(model.parameters(), reference_model.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
    adam = Optimizer(torch.nn.Linear(3, 2), optim_options(optim="adam"), 8)
    assert adam.optimizers[0].defaults["eps"] == 1e-9


def test_plateau_decays_after_each_validation_without_improvement():
    schedule = Schedule("plateau", 0.3, 0, 1, 0, 1)
    schedule.validated(True)
    schedule.validated(False)
    schedule.validated(False)
    assert schedule(100) == pytest.approx(0.09)


def test_lr_mult_specs_are_parsed_and_checked():
    assert parse_lr_mult(["encoder.*=0.5", "a=b=2"]) == [("encoder.*", 0.5), ("a=b", 2.0)]
    for bad in ("encoder.*", "=2", "x=fast", "x=-1"):
        with pytest.raises(UserError):
            parse_lr_mult([bad])


def stepped(model, optim: str) -> Optimizer:
    """An Optimizer of ``-optim optim`` after one step of ``model``'s gradients, all ones."""
    optimizer = Optimizer(model, optim_options(optim=optim), 8)
    for param in model.parameters():
        param.grad = torch.ones_like(param)
    optimizer.step()
    return optimizer


def test_optimizer_state_restores_by_parameter_name_into_differently_grouped_models():
    model, _ = make_model()
    saved = stepped(model, "adam").state_dict()
    other, _ = make_model()
    regrouped = Optimizer(
        other, optim_options(optim="adam", lr_mult=["generator.*=2"], freeze=["encoder.*"]), 8
    )
    regrouped.load_state_dict(saved)
    by_name = dict(other.named_parameters())
    state = regrouped.optimizers[0].state[by_name["decoder.attn.linear_in.weight"]]
    torch.testing.assert_close(
        state["exp_avg"], saved["state"]["decoder.attn.linear_in.weight"]["exp_avg"]
    )
    assert by_name["encoder.rnn.weight_hh_l0"] not in regrouped.optimizers[0].state
    assert regrouped.decay_step == 1


def stats_with(ppl, accuracy):
    return {"ppl": ppl, "accuracy": accuracy}


def test_early_stopping_counts_validations_without_any_improvement():
    stopper = EarlyStopping(2, ["ppl", "accuracy"])
    assert stopper.update(stats_with(10, 50)) is True
    assert stopper.update(stats_with(12, 60)) is False and stopper.stalled == 0  # accuracy improved
    stopper.update(stats_with(11, 55))
    assert not stopper.should_stop()
    stopper.update(stats_with(10.5, 60))
    assert stopper.should_stop()
    assert EarlyStopping(0, None).criteria == ["ppl"] and not EarlyStopping(0, None).should_stop()
