"""The CPU's own ways of computing, switched in one place: ``as_on_a_gpu`` sends every one of them
the way a GPU goes (the stand-in that counts a GPU's kernels on the CPU), and back after."""

import contextlib

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from onmt_lite.loss import criteria
from onmt_lite.models import projection
from onmt_lite.models.dropout import dropout, relu_dropout
from onmt_lite.translate import fast_paths
from onmt_lite.utils import topk
from onmt_lite.utils.cpu_paths import as_on_a_gpu, cpu_path


class Ops(TorchDispatchMode):
    """The names of the ATen operations run inside it."""

    def __init__(self):
        super().__init__()
        self.names = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.add(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


def paths_taken() -> dict:
    """Which way each CPU-specific computation goes now, on CPU tensors."""
    x = torch.randn(8, 600)
    with Ops() as ops:
        dropout(x, 0.5)
        relu_dropout(x, 0.5)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        padded = projection.padded_rows(torch.randn(37, 4))
    return {
        "cpu_path": cpu_path("cpu"),
        "decoding fast paths": fast_paths.on_cpu("cpu"),
        "chunked top-k": topk.chunked(x),
        "loss chunk": criteria.chunk_scores(x.device),
        "rows padded under autocast": padded != 37,
        "own dropout masks": "bernoulli_" not in ops.names,
    }


CPU = {
    "cpu_path": True,
    "decoding fast paths": True,
    "chunked top-k": True,
    "loss chunk": criteria.CHUNK_SCORES,
    "rows padded under autocast": True,
    "own dropout masks": True,
}
GPU = {
    "cpu_path": False,
    "decoding fast paths": False,
    "chunked top-k": False,
    "loss chunk": criteria.GPU_CHUNK_SCORES,
    "rows padded under autocast": False,
    "own dropout masks": False,
}


def test_as_on_a_gpu_sends_every_cpu_path_the_other_way_and_back():
    assert paths_taken() == CPU
    with as_on_a_gpu():
        assert paths_taken() == GPU
        with as_on_a_gpu():  # nested: still a GPU's ways, and the outer one's after
            assert paths_taken() == GPU
        assert paths_taken() == GPU
    assert paths_taken() == CPU
    with pytest.raises(RuntimeError), as_on_a_gpu():
        raise RuntimeError
    assert paths_taken() == CPU
    assert not cpu_path("meta")


class LogSoftmaxCalls(TorchDispatchMode):
    """How many ``log_softmax`` kernels run inside it: one per chunk of the fused loss."""

    calls = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.calls += "log_softmax" in func.overloadpacket.__name__
        return func(*args, **(kwargs or {}))


def test_the_fused_loss_takes_a_gpus_bigger_chunks_to_the_same_loss(monkeypatch):
    """On a GPU each chunk's some 30 kernels cost more than its memory: a batch's 3,000 target
    words of a 20,000-word vocabulary are one chunk there (four on the CPU), for the same loss
    and gradients to rounding."""
    assert criteria.GPU_CHUNK_SCORES // 20_000 >= 3_000 and criteria.CHUNK_SCORES // 20_000 < 1_000
    monkeypatch.setattr(criteria, "CHUNK_SCORES", 50 * 2_000)  # 50 rows a chunk on the CPU
    torch.manual_seed(0)
    hidden = torch.randn(300, 16, requires_grad=True)
    linear = torch.nn.Linear(16, 2_000)
    gold = torch.randint(2, 2_000, (300,))
    criterion = criteria.NMTCriterion(0.1)
    results = {}
    for where in ("cpu", "gpu"):
        with contextlib.ExitStack() as stack:
            if where == "gpu":
                stack.enter_context(as_on_a_gpu())
            counter = stack.enter_context(LogSoftmaxCalls())
            loss, nll, best = criterion.from_hidden(hidden, linear, gold)
        grads = torch.autograd.grad(loss, (hidden, linear.weight, linear.bias))
        results[where] = (counter.calls, loss, nll, best, grads)
    cpu_calls, cpu_loss, cpu_nll, cpu_best, cpu_grads = results["cpu"]
    calls, loss, nll, best, grads = results["gpu"]
    assert cpu_calls >= 6 and calls == 1  # chunks of about 50 rows; one
    torch.testing.assert_close(loss, cpu_loss, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(nll, cpu_nll, rtol=1e-5, atol=1e-5)
    assert torch.equal(best, cpu_best)
    for actual, expected in zip(grads, cpu_grads):
        torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-5)
