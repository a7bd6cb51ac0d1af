"""-optim adafactor: 1.x's Adafactor against its formulas written out value by value, against
OpenNMT-py 3.5.1's own class (1.x's, unchanged), without host syncs, and resumed exactly."""

import math
import os
import subprocess

import pytest
import torch

from onmt_lite.train.adafactor import Adafactor
from onmt_lite.train.optim import Optimizer
from onmt_lite.utils.errors import UserError
from onmt_lite.utils.host_syncs import HostSyncCounter
from tests.model_helpers import make_model
from tests.unit.test_optim import stepped
from tests.unit.test_trainer import optim_options

PEER_PYTHON = os.environ.get("OPENNMT_PY_PYTHON", "/tmp/peer-opennmt/bin/python")
SHAPES = [(5,), (4, 3), (4, 2, 3), (1, 6)]
LEARNING_RATES = [0.5, 0.1, 0.02, 0.3, 0.05, 0.2]


def reference_steps(weights: list[float], rows: int | None, grads, lrs) -> list[float]:
    """1.x's Adafactor on flat lists of floats, one value at a time: ``rows`` splits the values
    into that many rows for the factored second moments (None: one moment per value)."""
    n = len(weights)
    columns = n // rows if rows else n
    w = list(weights)
    m = [0.0] * n
    v = [0.0] * n
    row_moments = [0.0] * (rows or 0)
    column_moments = [0.0] * columns
    for t, (g, lr) in enumerate(zip(grads, lrs), start=1):
        b1 = 0.9 * (1 - 0.9 ** (t - 1)) / (1 - 0.9**t)
        b2 = 0.999 * (1 - 0.999 ** (t - 1)) / (1 - 0.999**t)
        step_size = lr * max(1e-3, math.sqrt(sum(x * x for x in w) / n))
        m = [b1 * mi + (1 - b1) * gi for mi, gi in zip(m, g)]
        squares = [gi * gi + 1e-30 for gi in g]
        if rows:
            for r in range(rows):
                row_sum = sum(squares[r * columns : (r + 1) * columns])
                row_moments[r] = b2 * row_moments[r] + (1 - b2) * row_sum
            for c in range(columns):
                column_sum = sum(squares[c::columns])
                column_moments[c] = b2 * column_moments[c] + (1 - b2) * column_sum
            total = sum(column_moments)
            v = [row_moments[i // columns] * column_moments[i % columns] / total for i in range(n)]
        else:
            v = [b2 * vi + (1 - b2) * si for vi, si in zip(v, squares)]
        u = [mi / (1 - b1**t) / math.sqrt(vi) for mi, vi in zip(m, v)]
        clip = max(1.0, math.sqrt(sum(x * x for x in u) / n))
        w = [wi - step_size * ui / clip for wi, ui in zip(w, u)]
    return w


def random_steps(shape, steps, dtype=torch.float64):
    generator = torch.Generator().manual_seed(sum(shape))
    weights = torch.randn(shape, generator=generator, dtype=dtype)
    grads = [torch.randn(shape, generator=generator, dtype=dtype) * 0.1 for _ in range(steps)]
    return weights, grads


def adafactor_steps(weights, grads, lrs):
    param = torch.nn.Parameter(weights.clone())
    optimizer = Adafactor([param])
    for grad, lr in zip(grads, lrs):
        param.grad = grad.clone()
        optimizer.param_groups[0]["lr"] = lr
        optimizer.step()
    return param.detach(), optimizer.state[param]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("scale", [1.0, 1e-5])
def test_steps_follow_the_formulas_value_by_value(shape, scale):
    """Weights of rms 1e-5 step by the learning rate times eps2 (1e-3), not their own rms."""
    weights, grads = random_steps(shape, len(LEARNING_RATES))
    weights *= scale
    ours, state = adafactor_steps(weights, grads, LEARNING_RATES)
    rows = shape[0] if len(shape) > 1 else None
    flat_grads = [g.flatten().tolist() for g in grads]
    expected = reference_steps(weights.flatten().tolist(), rows, flat_grads, LEARNING_RATES)
    torch.testing.assert_close(ours.flatten(), torch.tensor(expected, dtype=torch.float64))
    assert torch.dist(ours, weights) > 0.05 * scale  # the steps moved the weights
    assert state["step"] == len(LEARNING_RATES)
    assert {k: tuple(v.shape) for k, v in state.items() if k != "step"} == (
        Adafactor.state_shapes(weights)
    )


def test_matrices_keep_a_row_and_a_column_of_second_moments():
    shapes = Adafactor.state_shapes(torch.zeros(6, 2, 5))
    assert shapes == {"momentum": (6, 2, 5), "row_moments": (6, 1), "column_moments": (1, 10)}
    assert Adafactor.state_shapes(torch.zeros(7)) == {"momentum": (7,), "second_moments": (7,)}


def test_a_step_reads_nothing_on_the_host():
    """1.x's class read two norms per tensor on the host at every step; none here."""
    model, _ = make_model()
    optim = Optimizer(model, optim_options(optim="adafactor", learning_rate=0.1), 8)
    for param in model.parameters():
        param.grad = torch.randn_like(param)
    optim.optimizers[0].step()  # the first step makes the state
    with HostSyncCounter() as counter:
        optim.optimizers[0].step()
    assert counter.syncs == 0, counter.sync_reasons


PEER_SCRIPT = """
import sys, torch
from onmt.utils.optimizers import AdaFactor
saved = torch.load(sys.argv[1])
params = [torch.nn.Parameter(w.clone()) for w in saved["weights"]]
optimizer = AdaFactor(params, non_constant_decay=True, enable_factorization=True, weight_decay=0)
for lr, grads in zip(saved["lrs"], saved["grads"]):
    for param, grad in zip(params, grads):
        param.grad = grad.clone()
    for group in optimizer.param_groups:
        group["lr"] = lr
    optimizer.step()
torch.save([p.detach() for p in params], sys.argv[2])
"""


def test_steps_equal_those_of_opennmt_py_3_5_1s_adafactor(tmp_path):
    """1.x built ``AdaFactor(params, non_constant_decay=True, enable_factorization=True,
    weight_decay=0)`` and set its learning rate before each step; 3.5.1 keeps both unchanged."""
    if not os.path.exists(PEER_PYTHON):
        pytest.skip(
            f"needs OpenNMT-py 3.5.1 at {PEER_PYTHON} (../shared/bench/install_opennmt_py.sh)"
        )
    # 1.x factored its convolutions' [out x in x k x 1] as [out x in*k], as these [out x in x k]
    shapes = [(5,), (4, 3), (4, 2, 3), (4, 2, 3, 1), (16, 8)]
    weights = [random_steps(s, 0, torch.float32)[0] for s in shapes]
    grads = [[random_steps(s, 1, torch.float32)[1][0] * (t + 1) for s in shapes] for t in range(6)]
    torch.save({"weights": weights, "grads": grads, "lrs": LEARNING_RATES}, tmp_path / "in.pt")
    command = [PEER_PYTHON, "-c", PEER_SCRIPT, tmp_path / "in.pt", tmp_path / "out.pt"]
    subprocess.run(command, check=True, capture_output=True, env={**os.environ, "PYTHONPATH": ""})
    theirs = torch.load(tmp_path / "out.pt")
    params = [torch.nn.Parameter(w.clone()) for w in weights]
    optimizer = Adafactor(params)
    for lr, step_grads in zip(LEARNING_RATES, grads):
        for param, grad in zip(params, step_grads):
            param.grad = grad.clone()
        optimizer.param_groups[0]["lr"] = lr
        optimizer.step()
    for param, peer, weight in zip(params, theirs, weights):
        assert torch.dist(peer, weight) > 0.05
        torch.testing.assert_close(param.detach(), peer, rtol=1e-5, atol=1e-6)


def test_resumed_from_its_state_dict_it_steps_as_without_a_stop(tmp_path):
    grads_by_step = []
    generator = torch.Generator().manual_seed(3)
    model, _ = make_model()
    for _ in range(6):
        grads_by_step.append(
            [torch.randn(p.shape, generator=generator, dtype=p.dtype) for p in model.parameters()]
        )
    start = {k: v.clone() for k, v in model.state_dict().items()}

    def run(optim, model, grads):
        for step_grads in grads:
            for param, grad in zip(model.parameters(), step_grads):
                param.grad = grad.clone()
            optim.step()

    options = optim_options(optim="adafactor", learning_rate=0.05, decay_method="rsqrt")
    straight = Optimizer(model, options, 8)
    run(straight, model, grads_by_step)
    other, _ = make_model()
    other.load_state_dict(start)
    first = Optimizer(other, options, 8)
    run(first, other, grads_by_step[:3])
    torch.save(first.state_dict(), tmp_path / "optim.pt")
    second = Optimizer(other, options, 8)
    second.load_state_dict(torch.load(tmp_path / "optim.pt", weights_only=True))
    run(second, other, grads_by_step[3:])
    for (name, a), b in zip(model.named_parameters(), other.parameters()):
        assert torch.equal(a, b), name
    assert not torch.equal(model.state_dict()["decoder.attn.linear_in.weight"],
                           start["decoder.attn.linear_in.weight"])  # fmt: skip


@pytest.mark.parametrize("saved,resumed", [("adam", "adafactor"), ("adafactor", "sgd")])
def test_another_optimizers_moments_are_refused_by_name(saved, resumed):
    model, _ = make_model()
    optim = stepped(model, saved)
    other = Optimizer(model, optim_options(optim=resumed), 8)
    expected = f"-optim {saved}'s, not {resumed}'s: -reset_optim all starts -optim {resumed} afresh"
    with pytest.raises(UserError, match=expected):
        other.load_state_dict(optim.state_dict())
    other.load_state_dict(optim.state_dict(), moments=False)
    assert other.decay_step == 1


def test_the_adam_family_shares_its_moments():
    model, _ = make_model()
    optim = stepped(model, "fusedadam")
    adam = Optimizer(model, optim_options(optim="adamw"), 8)
    adam.load_state_dict(optim.state_dict())
    assert len(adam.optimizers[0].state) == len(list(model.parameters()))


def test_moments_of_a_checkpoint_that_does_not_name_its_optimizer_are_checked_by_key():
    """Checkpoints written before -optim adafactor existed hold no optimizer name: Adam's moments
    are refused by their keys, and a factored moment of another shape by its shape."""
    model, _ = make_model()
    older = stepped(model, "adam").state_dict()
    del older["optim"]
    adafactor = Optimizer(model, optim_options(optim="adafactor"), 8)
    with pytest.raises(UserError, match=r"\.exp_avg is not -optim adafactor's \(the checkpoint"):
        adafactor.load_state_dict(older)
    adafactor.step()
    saved = adafactor.state_dict()
    name = "decoder.attn.linear_in.weight"
    saved["state"][name]["column_moments"] = torch.zeros(1, 3)
    with pytest.raises(UserError, match=f"{name}.column_moments has shape \\(1, 3\\)"):
        Optimizer(model, optim_options(optim="adafactor"), 8).load_state_dict(saved)
