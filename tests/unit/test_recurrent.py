"""run_rnn: recurrent layers leave CUDA bf16 autocast (cuDNN would cast them to float16), and draw
their dropout between layers from PyTorch's generator, not from a kernel's state; nothing else
changes.

This machine's torch has no CUDA, so ``torch.autocast("cuda")`` cannot be entered: the tests switch
on the CUDA autocast state that ``run_rnn`` reads, and check what the recurrent layer is called
under.
"""

import contextlib

import pytest
import torch
import torch.nn as nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence

from onmt_lite.models import recurrent
from onmt_lite.models.recurrent import run_rnn, stepped_layers
from tests.model_helpers import make_batch, make_model, random_pairs


@contextlib.contextmanager
def cuda_autocast_state(dtype):
    """CUDA autocast's state as ``torch.autocast("cuda", dtype=dtype)`` sets it."""
    enabled = torch.is_autocast_enabled("cuda")
    previous = torch.get_autocast_dtype("cuda")
    torch.set_autocast_enabled("cuda", True)
    torch.set_autocast_dtype("cuda", dtype)
    try:
        yield
    finally:
        torch.set_autocast_enabled("cuda", enabled)
        torch.set_autocast_dtype("cuda", previous)


class Recorder(nn.Module):
    """Stands for an nn.LSTM: records the autocast state and the dtypes it is called with."""

    dropout = 0.0
    num_layers = 1

    def forward(self, inputs, hx=None):
        data = inputs.data if isinstance(inputs, PackedSequence) else inputs
        self.seen = {
            "cuda_autocast": torch.is_autocast_enabled("cuda"),
            "input": data.dtype,
            "hx": None if hx is None else [h.dtype for h in hx],
        }
        return inputs, hx


def test_under_cuda_bf16_autocast_the_rnn_runs_in_float32_with_cuda_autocast_off():
    rnn = Recorder()
    packed = pack_padded_sequence(torch.zeros(3, 2, 4, dtype=torch.bfloat16), torch.tensor([3, 2]))
    hx = (torch.zeros(1, 2, 4, dtype=torch.bfloat16), torch.zeros(1, 2, 4, dtype=torch.bfloat16))
    with cuda_autocast_state(torch.bfloat16):
        run_rnn(rnn, packed, hx)
        assert torch.is_autocast_enabled("cuda")  # on again for the rest of the model
    assert rnn.seen == {
        "cuda_autocast": False,
        "input": torch.float32,
        "hx": [torch.float32, torch.float32],
    }


@pytest.mark.parametrize("state", ["fp16", "off"])
def test_fp16_autocast_or_none_leaves_the_call_as_it_is(state):
    rnn = Recorder()
    inputs = torch.zeros(3, 2, 4, dtype=torch.float16)
    with cuda_autocast_state(torch.float16) if state == "fp16" else contextlib.nullcontext():
        run_rnn(rnn, inputs)
    assert rnn.seen == {"cuda_autocast": state == "fp16", "input": torch.float16, "hx": None}


@pytest.mark.parametrize("bf16_kernels", [True, False])
def test_cpu_bf16_autocast_runs_the_lstm_in_bfloat16_where_onednn_can_else_in_float32(
    monkeypatch, bf16_kernels
):
    """A CPU with oneDNN's bfloat16 LSTM (AVX-512 BF16, AMX) runs it under autocast unchanged; one
    without (AVX2, where autocast's call stops with an error) runs it in float32, autocast off.
    The first case is checked where this CPU has the kernels, the second on every CPU."""
    if bf16_kernels and not recurrent.cpu_bf16_rnn():
        pytest.skip("this CPU has no oneDNN bfloat16 LSTM (no AVX-512 BF16 or AMX)")
    monkeypatch.setattr(recurrent, "cpu_bf16_rnn", lambda: bf16_kernels)
    torch.manual_seed(0)
    lstm = nn.LSTM(4, 6)
    inputs = torch.randn(5, 2, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = lstm(inputs)[0] if bf16_kernels else None
        out, _ = run_rnn(lstm, inputs)
    if not bf16_kernels:
        expected = lstm(inputs)[0]
    assert out.dtype == (torch.bfloat16 if bf16_kernels else torch.float32)
    assert torch.equal(out, expected)


@pytest.mark.parametrize(
    "model_args",
    [
        ["-rnn_type", "LSTM", "-input_feed", "0", "-bridge"],
        ["-rnn_type", "GRU", "-input_feed", "0", "-encoder_type", "brnn"],
    ],
)
def test_the_encoder_and_the_standard_decoder_call_their_rnn_through_run_rnn(model_args):
    model = make_model(*model_args)[0].float()
    batch = make_batch(random_pairs(3, seed=4))
    with torch.no_grad():
        expected, _ = model(batch.src, batch.tgt, batch.src_lengths)
    seen = []
    for rnn in (model.encoder.rnn, model.decoder.rnn):
        rnn.register_forward_pre_hook(
            lambda module, args: seen.append(torch.is_autocast_enabled("cuda"))
        )
    with torch.no_grad(), cuda_autocast_state(torch.bfloat16):
        dec_out, _ = model(batch.src, batch.tgt, batch.src_lengths)
    assert seen == [False, False]
    # CPU tensors: the CUDA autocast state changes nothing else
    assert torch.equal(dec_out, expected)


@pytest.fixture
def kernel_calls(monkeypatch):
    """Every call of the recurrent kernels (``torch._VF.lstm``/``gru``, what ``nn.LSTM``/``nn.GRU``
    call): ``(kind, dropout, weight dtypes)``. On CUDA the kernel's dropout comes from cuDNN's own
    state, which no checkpoint holds, so a training run must never hand it a dropout."""
    calls = []

    def recording(kind, kernel):
        def call(*args):
            # a packed call's arguments: data, batch_sizes (1-D), hx, weights, ...
            packed = isinstance(args[1], torch.Tensor) and args[1].dim() == 1
            weights, dropout = (args[3], args[6]) if packed else (args[2], args[5])
            calls.append((kind, dropout, {w.dtype for w in weights}))
            return kernel(*args)

        return call

    for kind in ("lstm", "gru"):
        kernel = getattr(torch._C._VariableFunctions, kind)
        monkeypatch.setattr(torch._VF, kind, recording(kind, kernel))
    return calls


# (class, bidirectional, packed)
RNNS = [
    (nn.LSTM, False, False),
    (nn.LSTM, True, True),
    (nn.GRU, True, False),
    (nn.GRU, False, True),
]
LENGTHS = [6, 3, 5, 2]


def rnn_case(rnn_class, bidirectional, packed, with_state):
    """A 3-layer ``rnn_class`` with dropout 0.3 in training mode, its inputs and initial state."""
    torch.manual_seed(0)
    rnn = rnn_class(5, 7, num_layers=3, dropout=0.3, bidirectional=bidirectional)
    inputs = torch.randn(6, 4, 5, requires_grad=True)
    rows = 3 * (2 if bidirectional else 1)
    hx = None
    if with_state:
        hx = torch.randn(rows, 4, 7)
        hx = (hx, torch.randn(rows, 4, 7)) if rnn_class is nn.LSTM else hx
    if packed:
        fed = pack_padded_sequence(inputs, torch.tensor(LENGTHS), enforce_sorted=False)
        return rnn, inputs, fed, hx
    return rnn, inputs, inputs, hx


def outputs_and_grads(rnn, inputs, fed, hx, call):
    """``call(rnn, fed, hx)`` from seed 5: its output and final state, and the gradients of a
    weighted sum of them with respect to the inputs and every parameter."""
    rnn.zero_grad()
    inputs.grad = None
    if isinstance(fed, PackedSequence):
        fed = pack_padded_sequence(inputs, torch.tensor(LENGTHS), enforce_sorted=False)
    torch.manual_seed(5)
    out, final = call(rnn, fed, hx)
    out = out.data if isinstance(out, PackedSequence) else out
    finals = final if isinstance(final, tuple) else (final,)
    torch.manual_seed(9)
    loss = (out * torch.randn_like(out)).sum()
    loss = loss + sum((f * torch.randn_like(f)).sum() for f in finals)
    loss.backward()
    return [
        out.detach(),
        *[f.detach() for f in finals],
        inputs.grad.clone(),
        *[p.grad.clone() for p in rnn.parameters()],
    ]


@pytest.mark.parametrize("rnn_class,bidirectional,packed", RNNS)
@pytest.mark.parametrize("with_state", [False, True])
def test_training_with_dropout_hands_no_dropout_to_the_kernel(
    kernel_calls, rnn_class, bidirectional, packed, with_state
):
    """The dropout between layers is ``F.dropout``'s, one layer per kernel call, each with dropout
    0, and the masks are really drawn: the same seed repeats them, another seed does not."""
    rnn, inputs, fed, hx = rnn_case(rnn_class, bidirectional, packed, with_state)
    torch.manual_seed(1)
    first = run_rnn(rnn, fed, hx)[0]
    kind = rnn_class.__name__.lower()
    assert [(name, dropout) for name, dropout, _ in kernel_calls] == [(kind, 0.0)] * 3
    torch.manual_seed(1)
    again = run_rnn(rnn, fed, hx)[0]
    torch.manual_seed(2)
    other = run_rnn(rnn, fed, hx)[0]
    data = [x.data if isinstance(x, PackedSequence) else x for x in (first, again, other)]
    assert torch.equal(data[0], data[1])
    assert not torch.equal(data[0], data[2])


@pytest.mark.parametrize("rnn_class,bidirectional,packed", RNNS)
@pytest.mark.parametrize("with_state", [False, True])
def test_stepped_layers_are_the_modules_own_computation_on_the_cpu(
    rnn_class, bidirectional, packed, with_state
):
    """On the CPU the module's kernel drops out between its layers with the same generator and the
    same function: outputs, final states and every gradient are bit for bit the module's."""
    rnn, inputs, fed, hx = rnn_case(rnn_class, bidirectional, packed, with_state)
    expected = outputs_and_grads(rnn, inputs, fed, hx, lambda module, x, h: module(x, h))
    actual = outputs_and_grads(rnn, inputs, fed, hx, run_rnn)
    assert len(actual) == len(expected)
    for a, b in zip(actual, expected):
        assert torch.equal(a, b)


def test_evaluation_and_one_layer_keep_the_modules_call(kernel_calls):
    """No dropout to draw (evaluation, or a single layer): the module is called whole, as before."""
    rnn = nn.LSTM(5, 7, num_layers=2, dropout=0.3).eval()
    run_rnn(rnn, torch.randn(3, 2, 5))
    run_rnn(nn.GRU(5, 7, num_layers=1), torch.randn(3, 2, 5))
    assert [(kind, dropout) for kind, dropout, _ in kernel_calls] == [("lstm", 0.3), ("gru", 0.0)]


@pytest.mark.parametrize("packed", [False, True])
def test_under_cuda_bf16_autocast_a_device_with_bf16_kernels_runs_the_layers_in_bfloat16(
    kernel_calls, monkeypatch, packed
):
    """Where cuDNN has bfloat16 recurrent layers (``native_bf16``), weights, inputs and outputs are
    bfloat16 and CUDA autocast is off; the result is the float32 one to bfloat16's precision."""
    monkeypatch.setattr(recurrent, "native_bf16", lambda: True)
    rnn, inputs, fed, hx = rnn_case(nn.LSTM, True, packed, True)
    rnn.eval()
    with torch.no_grad():
        expected = rnn(fed, hx)[0]
        with cuda_autocast_state(torch.bfloat16):
            out = run_rnn(rnn, fed, hx)[0]
    data, expected = (out.data, expected.data) if packed else (out, expected)
    assert data.dtype == torch.bfloat16
    assert [dtypes for _, _, dtypes in kernel_calls[1:]] == [{torch.bfloat16}] * 3
    torch.testing.assert_close(data.float(), expected, atol=0.03, rtol=0.03)


def test_stepped_layers_casts_the_weights_and_keeps_them_float32():
    """``dtype`` casts copies for the kernel: the module's parameters and their gradients stay
    float32."""
    rnn, inputs, fed, hx = rnn_case(nn.GRU, False, False, False)
    out, _ = stepped_layers(rnn, fed.bfloat16(), None, torch.bfloat16)
    out.float().sum().backward()
    assert {p.dtype for p in rnn.parameters()} == {torch.float32}
    assert {p.grad.dtype for p in rnn.parameters()} == {torch.float32}
