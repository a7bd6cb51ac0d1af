"""fast_paths.py: the CPU-only fast paths are chosen for the CPU alone, and streams fork only when
asked."""

import pytest
import torch
import torch.nn as nn

from onmt_lite.translate import fast_paths
from onmt_lite.translate.fast_paths import decoding_rows, decoding_streams, prepare_model
from onmt_lite.translate.packed import ROW_BUCKET, PackedLinear, packing_available
from onmt_lite.utils.errors import UserError


@pytest.mark.parametrize(
    "threads,device,sampling,batches,fork,expected",
    [
        (2, "cpu", False, 9, True, ([1, 1], True)),
        (3, "cpu", False, 9, True, ([1, 1, 1], True)),
        (8, "cpu", False, 3, True, ([1, 1, 1], True)),
        (1, "cpu", False, 9, True, ([1], False)),
        (4, "cpu", False, 1, True, ([4], False)),
        (4, "cpu", False, 0, True, ([4], False)),
        (2, "cpu", False, 9, False, ([1, 1], False)),
        (3, "cpu", False, 9, False, ([2, 1], False)),
        (8, "cpu", False, 9, False, ([4, 4], False)),
        (8, "cpu", False, 1, False, ([8], False)),
        (2, "cpu", True, 9, True, ([2], False)),
        (2, "cuda", False, 9, True, ([2], False)),
        (2, "cuda", False, 9, False, ([2], False)),
        (4, "meta", False, 9, True, ([4], False)),
    ],
)
def test_decoding_streams(threads, device, sampling, batches, fork, expected, monkeypatch):
    monkeypatch.setattr(fast_paths, "can_fork", lambda: True)
    assert decoding_streams(threads, device, sampling, batches, fork) == expected


def test_streams_do_not_fork_where_the_system_cannot(monkeypatch):
    monkeypatch.setattr(fast_paths, "can_fork", lambda: False)
    assert decoding_streams(4, "cpu", False, 9, fork=True) == ([2, 2], False)


def test_decoding_rows_pad_a_beam_search_to_whole_beams_only():
    assert decoding_rows(32, "sents", 5) == (160, 5)
    assert decoding_rows(32, "sents", 1) == (32, ROW_BUCKET)
    assert decoding_rows(2000, "tokens", 5) == (64, ROW_BUCKET)
    # oneDNN's limit
    assert decoding_rows(1_000_000_000, "sents", 5) == (
        fast_paths.MAX_PACKED_ROWS,
        5,
    )


@pytest.mark.parametrize("device", ["cuda", "cuda:1", "meta"])
def test_no_cpu_machinery_off_the_cpu(device):
    model = nn.Sequential(nn.Linear(4, 4), nn.LSTMCell(4, 4))
    assert prepare_model(model, device, "none", (8, ROW_BUCKET)) is model
    assert [type(m) for m in model] == [nn.Linear, nn.LSTMCell]  # nothing packed, nothing fused
    with pytest.raises(UserError, match="-quantize int8 is for CPU translation"):
        prepare_model(model, device, "int8")


@pytest.mark.skipif(not packing_available(), reason="this PyTorch has no oneDNN linear packing")
def test_the_cpu_gets_packed_weights_with_the_same_outputs():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6)).eval()
    x = torch.randn(5, 4)
    expected = model(x)
    with torch.no_grad():
        packed = prepare_model(model, "cpu", "none", (8, ROW_BUCKET))
        assert isinstance(packed[0], PackedLinear)
        torch.testing.assert_close(packed(x), expected, rtol=1e-5, atol=1e-6)
    assert (
        prepare_model(nn.Sequential(nn.Linear(4, 6)), "cpu", "none", None)[0].__class__ is nn.Linear
    )
