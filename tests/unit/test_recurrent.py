"""run_rnn: recurrent layers leave CUDA bf16 autocast (cuDNN would cast them to float16), nothing else changes.

This machine's torch has no CUDA, so ``torch.autocast("cuda")`` cannot be entered: the tests switch on
the CUDA autocast state that ``run_rnn`` reads, and check what the recurrent layer is called under.
"""
import contextlib

import pytest
import torch
import torch.nn as nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence

from onmt_lite.models.recurrent import run_rnn
from tests.model_helpers import make_batch, make_model, random_pairs


@contextlib.contextmanager
def cuda_autocast_state(dtype):
    """CUDA autocast's state as ``torch.autocast("cuda", dtype=dtype)`` sets it."""
    enabled, previous = torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda")
    torch.set_autocast_enabled("cuda", True)
    torch.set_autocast_dtype("cuda", dtype)
    try:
        yield
    finally:
        torch.set_autocast_enabled("cuda", enabled)
        torch.set_autocast_dtype("cuda", previous)


class Recorder(nn.Module):
    """Stands for an nn.LSTM: records the autocast state and the dtypes it is called with."""

    def forward(self, inputs, hx=None):
        data = inputs.data if isinstance(inputs, PackedSequence) else inputs
        self.seen = {"cuda_autocast": torch.is_autocast_enabled("cuda"), "input": data.dtype,
                     "hx": None if hx is None else [h.dtype for h in hx]}
        return inputs, hx


def test_under_cuda_bf16_autocast_the_rnn_runs_in_float32_with_cuda_autocast_off():
    rnn = Recorder()
    packed = pack_padded_sequence(torch.zeros(3, 2, 4, dtype=torch.bfloat16), torch.tensor([3, 2]))
    hx = (torch.zeros(1, 2, 4, dtype=torch.bfloat16), torch.zeros(1, 2, 4, dtype=torch.bfloat16))
    with cuda_autocast_state(torch.bfloat16):
        run_rnn(rnn, packed, hx)
        assert torch.is_autocast_enabled("cuda")  # on again for the rest of the model
    assert rnn.seen == {"cuda_autocast": False, "input": torch.float32, "hx": [torch.float32, torch.float32]}


@pytest.mark.parametrize("state", ["fp16", "off"])
def test_fp16_autocast_or_none_leaves_the_call_as_it_is(state):
    rnn = Recorder()
    inputs = torch.zeros(3, 2, 4, dtype=torch.float16)
    with cuda_autocast_state(torch.float16) if state == "fp16" else contextlib.nullcontext():
        run_rnn(rnn, inputs)
    assert rnn.seen == {"cuda_autocast": state == "fp16", "input": torch.float16, "hx": None}


def test_cpu_bf16_autocast_still_runs_the_lstm_in_bfloat16_unchanged():
    torch.manual_seed(0)
    lstm, inputs = nn.LSTM(4, 6), torch.randn(5, 2, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected, _ = lstm(inputs)
        out, _ = run_rnn(lstm, inputs)
    assert out.dtype == torch.bfloat16
    assert torch.equal(out, expected)


@pytest.mark.parametrize("model_args", [["-rnn_type", "LSTM", "-input_feed", "0", "-bridge"],
                                        ["-rnn_type", "GRU", "-input_feed", "0", "-encoder_type", "brnn"]])
def test_the_encoder_and_the_standard_decoder_call_their_rnn_through_run_rnn(model_args):
    model = make_model(*model_args)[0].float()
    batch = make_batch(random_pairs(3, seed=4))
    with torch.no_grad():
        expected, _ = model(batch.src, batch.tgt, batch.src_lengths)
    seen = []
    for rnn in (model.encoder.rnn, model.decoder.rnn):
        rnn.register_forward_pre_hook(lambda module, args: seen.append(torch.is_autocast_enabled("cuda")))
    with torch.no_grad(), cuda_autocast_state(torch.bfloat16):
        dec_out, _ = model(batch.src, batch.tgt, batch.src_lengths)
    assert seen == [False, False]
    assert torch.equal(dec_out, expected)  # CPU tensors: the CUDA autocast state changes nothing else
