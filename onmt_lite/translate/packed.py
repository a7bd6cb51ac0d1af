"""Fast CPU inference layers: the decoder's cells as single products, on prepacked oneDNN weights
(float32) or on int8 weights.

Decoding multiplies small matrices each step: ``[rows x H]`` by ``[H x V]`` and the cells' gate
weights, with rows = batch x beam (a few dozen to a few hundred). PyTorch's default CPU product runs
these at a fraction of the machine's rate; oneDNN with each weight reordered once into its blocked
layout runs them several times faster, still in float32: outputs differ from the unpacked model's
by float rounding (about 1e-6 relative). ``pack_for_cpu(model, rows)`` swaps the model's
``nn.Linear`` modules for packed ones (inference only: no gradients), after ``fuse_cells`` has made
each ``nn.LSTMCell`` and ``nn.GRUCell`` of products of ``nn.Linear`` modules; ``-quantize int8``
quantises those same linear modules instead (``quantize_int8``). The encoder's
``nn.LSTM``/``nn.GRU`` run whole sequences and keep PyTorch's kernels.
"""

import torch
import torch.nn as nn

ROW_BUCKET = (
    16  # rows are padded to a multiple of this unless the caller knows better (see PackedLinear)
)


def packing_available():
    """oneDNN (mkldnn) is built into this PyTorch, with the linear-weight reorder it needs."""
    try:
        return (
            torch.backends.mkldnn.is_available()
            and hasattr(torch.ops.mkldnn, "_linear_pointwise")
            and callable(torch.ops.mkldnn._reorder_linear_weight)
        )
    except (AttributeError, RuntimeError):
        return False


class PackedLinear(nn.Module):
    """``nn.Linear`` on a prepacked weight; ``rows`` is the expected number of input rows, whose
    count is padded to a multiple of ``multiple``."""

    def __init__(self, weight, bias, rows, multiple=ROW_BUCKET):
        super().__init__()
        self.out_features = weight.size(0)
        self.multiple = multiple
        self.packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach().contiguous(), rows)
        self.bias = None if bias is None else bias.detach().contiguous()

    def forward(self, x):
        """``[... x in]`` -> ``[... x out]``. The rows are padded to a multiple of ``multiple``:
        oneDNN builds (and caches) a kernel for each new number of rows, which takes a while for the
        vocabulary projection. A beam search's rows are always whole beams: padded to the beam width
        they are not padded at all, and there are at most batch-size different counts."""
        flat = x.reshape(-1, x.size(-1))
        rows = flat.size(0)
        padding = -rows % self.multiple
        if padding:
            flat = torch.cat([flat, flat.new_zeros(padding, flat.size(1))])
        out = torch.ops.mkldnn._linear_pointwise(
            flat.contiguous(), self.packed, self.bias, "none", [], ""
        )
        return out[:rows].view(*x.shape[:-1], self.out_features)


def tanh_by_sigmoid(x):
    """``tanh(x)`` as ``2 sigmoid(2x) - 1`` (within 2e-7): PyTorch's CPU tanh is much slower than
    its sigmoid."""
    return torch.sigmoid(x * 2).mul_(2).sub_(1)


def _linear(weight, bias):
    """A plain ``nn.Linear`` holding copies of ``weight`` and ``bias``."""
    linear = nn.Linear(weight.size(1), weight.size(0))
    with torch.no_grad():
        linear.weight.copy_(weight)
        linear.bias.copy_(bias)
    return linear


class FusedLSTMCell(nn.Module):
    """``nn.LSTMCell`` (gates in PyTorch's order: input, forget, cell, output) as one product of
    ``[x; h]`` with ``[W_ih W_hh]`` (the two biases summed). The cell gate's weights are doubled
    (exact in floating point), so that one sigmoid over all gates gives ``sigmoid(2g)`` for it, and
    ``tanh(g) = 2 sigmoid(2g) - 1``."""

    def __init__(self, cell):
        super().__init__()
        with torch.no_grad():
            weight = torch.cat([cell.weight_ih, cell.weight_hh], 1)
            bias = cell.bias_ih + cell.bias_hh
            hidden = slice(2 * cell.hidden_size, 3 * cell.hidden_size)
            weight[hidden] *= 2
            bias[hidden] *= 2
        self.gates = _linear(weight, bias)

    def forward(self, x, state):
        h, c = state
        # in place: fewer allocations
        i, f, g, o = self.gates(torch.cat([x, h], 1)).sigmoid_().chunk(4, 1)
        c = (f * c).addcmul_(i, g.mul(2).sub_(1))  # g is a view of a split: not modified in place
        return tanh_by_sigmoid(c).mul_(o), c


class FusedGRUCell(nn.Module):
    """``nn.GRUCell`` (gates in PyTorch's order: reset, update, new) as an input and a hidden
    product."""

    def __init__(self, cell):
        super().__init__()
        self.input = _linear(cell.weight_ih, cell.bias_ih)
        self.hidden = _linear(cell.weight_hh, cell.bias_hh)

    def forward(self, x, h):
        x_r, x_z, x_n = self.input(x).chunk(3, 1)
        h_r, h_z, h_n = self.hidden(h).chunk(3, 1)
        reset = torch.sigmoid(x_r + h_r)
        update = torch.sigmoid(x_z + h_z)
        new = tanh_by_sigmoid(x_n + reset * h_n)
        return (1 - update) * new + update * h


def _swap(model, make):
    """Replace, in place, every child module for which ``make(child)`` is not None by that."""
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            replacement = make(child)
            if replacement is not None:
                setattr(parent, name, replacement)
    return model


def fuse_cells(model):
    """Replace, in place, the ``nn.LSTMCell`` and ``nn.GRUCell`` modules of ``model`` (inference
    only) by ``FusedLSTMCell`` and ``FusedGRUCell``; returns the model."""
    fused = {nn.LSTMCell: FusedLSTMCell, nn.GRUCell: FusedGRUCell}
    return _swap(model, lambda m: fused[type(m)](m) if type(m) in fused else None)


def pack_for_cpu(model, rows, multiple=ROW_BUCKET):
    """Replace, in place, the cells (fused) and linear layers of the float32 ``model`` (on the CPU,
    in eval mode) by packed ones tuned for ``rows`` input rows, their count padded to a multiple of
    ``multiple``; returns the model (unchanged when this PyTorch has no oneDNN)."""
    if not packing_available():
        return model
    return _swap(
        fuse_cells(model),
        lambda m: (
            PackedLinear(m.weight, m.bias, rows, multiple) if isinstance(m, nn.Linear) else None
        ),
    )


WIDE_INT8_OUTPUTS = (
    2048  # int8 layers with at least this many outputs run on oneDNN (see quantize_int8)
)


def _has_vnni():
    """Whether the CPU has int8 dot-product instructions (AVX512-VNNI or AVX-VNNI); True when this
    PyTorch cannot tell."""
    check = getattr(torch.cpu, "_is_vnni_supported", None)
    return True if check is None else bool(check())


def quantize_int8(model):
    """The model (on the CPU) with its linear and recurrent layers dynamically quantised to int8
    (int8 weights, activations quantised on the fly), the decoder's cells first fused into linear
    products (``fuse_cells``); embeddings stay float. Changed in place and returned.

    PyTorch packs each int8 weight for one backend, which then runs that layer's products. fbgemm
    (the default) is the faster for the cells and the attention's layers, but slower than oneDNN for
    wide products with many rows on a CPU with VNNI (its int8 dot-product instructions), with the
    same quantisation (outputs within 1e-6). Layers with at least ``WIDE_INT8_OUTPUTS`` outputs
    (the vocabulary projection) are therefore packed for oneDNN where this PyTorch has it and the
    CPU has VNNI; without VNNI fbgemm is the faster there too (bench/README.md has the figures).
    """
    import warnings

    from torch.ao.quantization import quantize_dynamic

    fuse_cells(model)
    wide = {
        name
        for name, m in model.named_modules()
        if isinstance(m, nn.Linear) and m.out_features >= WIDE_INT8_OUTPUTS
    }
    with warnings.catch_warnings():  # torch marks its quantized tensor types deprecated; they work
        warnings.simplefilter("ignore")
        if wide and "onednn" in torch.backends.quantized.supported_engines and _has_vnni():
            default = torch.backends.quantized.engine
            torch.backends.quantized.engine = "onednn"
            try:
                quantize_dynamic(model, wide, dtype=torch.qint8, inplace=True)
            finally:
                torch.backends.quantized.engine = default
        return quantize_dynamic(
            model, {nn.Linear, nn.LSTM, nn.GRU}, dtype=torch.qint8, inplace=True
        )
