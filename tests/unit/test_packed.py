"""Packed (oneDNN) inference layers equal PyTorch's own, alone and inside a decoding model."""

import copy

import pytest
import torch
import torch.ao.quantization
import torch.nn as nn

from onmt_lite.translate import packed as packed_module
from onmt_lite.translate.packed import (
    WIDE_INT8_OUTPUTS,
    FusedGRUCell,
    FusedLSTMCell,
    PackedLinear,
    fuse_cells,
    pack_for_cpu,
    packing_available,
    quantize_int8,
)
from tests.model_helpers import make_batch, make_model, random_pairs

pytestmark = pytest.mark.skipif(not packing_available(), reason="this PyTorch has no oneDNN")


def test_packed_linear_equals_linear_on_2d_and_3d_inputs():
    torch.manual_seed(0)
    linear = nn.Linear(24, 50)
    packed = PackedLinear(linear.weight, linear.bias, rows=8)
    for x in (torch.randn(8, 24), torch.randn(3, 5, 24), torch.randn(1, 24)):
        torch.testing.assert_close(packed(x), linear(x), atol=1e-5, rtol=1e-5)
    no_bias = nn.Linear(24, 7, bias=False)
    x = torch.randn(4, 24)
    torch.testing.assert_close(
        PackedLinear(no_bias.weight, None, 4)(x), no_bias(x), atol=1e-5, rtol=1e-5
    )


@pytest.mark.parametrize("multiple", [1, 5, 16])
def test_packed_linear_gives_each_row_its_own_output_whatever_the_padding(multiple):
    """Row counts that are and are not multiples of the padding: the first rows of a larger input
    come out as they do alone (padding rows never leak into real ones)."""
    torch.manual_seed(3)
    linear = nn.Linear(24, 50)
    packed = PackedLinear(linear.weight, linear.bias, rows=15, multiple=multiple)
    x = torch.randn(17, 24)
    with torch.no_grad():
        full = packed(x)
        torch.testing.assert_close(full, linear(x), atol=1e-5, rtol=1e-5)
        for rows in (1, 4, 5, 15, 16):
            assert packed(x[:rows]).shape == (rows, 50)
            torch.testing.assert_close(packed(x[:rows]), full[:rows], atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize(
    "cell_class,fused_class,pack",
    [
        (nn.LSTMCell, FusedLSTMCell, False),
        (nn.LSTMCell, FusedLSTMCell, True),
        (nn.GRUCell, FusedGRUCell, False),
        (nn.GRUCell, FusedGRUCell, True),
    ],
)
def test_fused_and_packed_cells_step_like_pytorchs_cells(cell_class, fused_class, pack):
    torch.manual_seed(1)
    cell = cell_class(12, 16)
    fused = fuse_cells(nn.Sequential(copy.deepcopy(cell)))[0]
    assert isinstance(fused, fused_class)
    layer = pack_for_cpu(nn.Sequential(fused), rows=6)[0] if pack else fused
    x = torch.randn(6, 12)
    h = torch.randn(6, 16)
    c = torch.randn(6, 16)
    with torch.no_grad():
        if cell_class is nn.LSTMCell:
            for got, expected in zip(layer(x, (h, c)), cell(x, (h, c))):
                torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
        else:
            torch.testing.assert_close(layer(x, h), cell(x, h), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "args", [[], ["-rnn_type", "GRU", "-global_attention", "mlp"], ["-copy_attn"]]
)
def test_a_packed_model_decodes_like_the_original(args):
    model, _ = make_model(*args)
    model = model.float().eval()
    packed = pack_for_cpu(copy.deepcopy(model), rows=4)
    assert not any(
        isinstance(m, (nn.Linear, nn.LSTMCell, nn.GRUCell)) for m in packed.decoder.modules()
    )
    assert any(isinstance(m, (FusedLSTMCell, FusedGRUCell)) for m in packed.decoder.modules())
    batch = make_batch(random_pairs(4, seed=2))
    with torch.no_grad():
        expected, expected_attns = model(batch.src, batch.tgt, batch.src_lengths)
        got, got_attns = packed(batch.src, batch.tgt, batch.src_lengths)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)
    for name in expected_attns:
        torch.testing.assert_close(got_attns[name], expected_attns[name], atol=1e-5, rtol=1e-4)


@pytest.mark.skipif(
    "onednn" not in torch.backends.quantized.supported_engines, reason="no oneDNN int8 backend"
)
def test_int8_wide_layers_are_packed_for_onednn_and_compute_what_the_default_backend_does(
    monkeypatch,
):
    """On a CPU with VNNI; without it every layer stays on the default backend."""
    torch.manual_seed(4)
    model = nn.Sequential(
        nn.Linear(32, WIDE_INT8_OUTPUTS), nn.ReLU(), nn.Linear(WIDE_INT8_OUTPUTS, 8)
    )
    x = torch.randn(20, 32)
    engines = []
    quantize_dynamic = torch.ao.quantization.quantize_dynamic

    def spy(module, spec, **kwargs):
        engines.append((torch.backends.quantized.engine, spec))
        return quantize_dynamic(module, spec, **kwargs)

    monkeypatch.setattr(torch.ao.quantization, "quantize_dynamic", spy)
    engine = torch.backends.quantized.engine
    monkeypatch.setattr(packed_module, "_has_vnni", lambda: False)
    quantize_int8(copy.deepcopy(model))
    assert [e for e, _ in engines] == [engine]
    engines.clear()
    monkeypatch.setattr(packed_module, "_has_vnni", lambda: True)
    mixed = quantize_int8(copy.deepcopy(model))
    # the wide layer only; the narrow one on the default backend
    assert engines[0] == (
        "onednn",
        {"0"},
    )
    assert torch.backends.quantized.engine == engine
    monkeypatch.setattr(packed_module, "WIDE_INT8_OUTPUTS", 10**9)
    default = quantize_int8(copy.deepcopy(model))
    assert all(e == engine for e, _ in engines[1:])
    with torch.no_grad():
        assert all(
            "quantized.dynamic" in type(m).__module__ for m in (mixed[0], mixed[2], default[0])
        )
        torch.testing.assert_close(mixed(x), default(x), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(mixed(x), model(x), atol=0.05, rtol=0.05)  # int8 rounding only
