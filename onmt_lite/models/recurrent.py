"""One call of a whole-sequence ``nn.LSTM``/``nn.GRU``: its dropout between layers drawn from
PyTorch's generator, in the precision autocast should give it.

Two things a plain ``rnn(inputs, hx)`` does on CUDA that training must not have:

- **Dropout between layers from a hidden state.** cuDNN draws it from a dropout state of its own,
  seeded once per process, which neither ``torch.get_rng_state`` nor ``torch.cuda.get_rng_state``
  holds: a run resumed from a checkpoint draws other masks than the run it continues. So while a
  multi-layer module trains with dropout, ``run_rnn`` steps its layers one at a time and drops out
  between them with ``F.dropout``, from the generator the checkpoint saves. On the CPU this is the
  same computation as the module's own (its kernel calls the same dropout between the same
  layers), so the numbers do not change there.
- **bfloat16 turned into float16.** cuDNN's autocast casts recurrent layers to float16 whatever the
  autocast dtype (and fp16 alone has a loss scale). Under CUDA bf16 autocast the layers run in
  bfloat16 themselves where cuDNN has bfloat16 recurrent kernels (``native_bf16``), in float32
  elsewhere, with CUDA autocast off in both cases.

On the CPU, bf16 autocast runs recurrent layers in bfloat16 through oneDNN, which has no bfloat16
LSTM on CPUs without AVX-512 BF16 or AMX (an AVX2 machine stops with "could not create a primitive
descriptor"): there they run in float32 with CPU autocast off.
"""

import functools

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import PackedSequence

CUDNN_BF16_RNN = 91300  # cuDNN 9.13: the first with bfloat16 recurrent layers that PyTorch calls


def cuda_bf16_autocast() -> bool:
    """Whether CUDA autocast is on with bfloat16 (``-model_dtype bf16`` on a CUDA device)."""
    return torch.is_autocast_enabled("cuda") and torch.get_autocast_dtype("cuda") == torch.bfloat16


@functools.lru_cache(maxsize=None)
def native_bf16() -> bool:
    """Whether this process's CUDA device runs a bfloat16 LSTM (cuDNN 9.13 or later, and a tiny
    forward and backward that succeeds): tried once, since a build may lack the kernels."""
    version = torch.backends.cudnn.version() if torch.cuda.is_available() else None
    if version is None or version < CUDNN_BF16_RNN:
        return False
    try:
        lstm = nn.LSTM(8, 8).cuda()
        inputs = torch.randn(2, 1, 8, device="cuda", requires_grad=True)
        with torch.autocast("cuda", enabled=False):
            out, _ = stepped_layers(lstm, inputs.bfloat16(), None, torch.bfloat16)
        out.float().sum().backward()
        return bool(torch.isfinite(lstm.weight_hh_l0.grad).all())
    except RuntimeError:
        return False


def map_state(state, fn):
    """``fn`` applied to a recurrent state: each of an LSTM's ``(h, c)``, or a GRU's tensor."""
    if isinstance(state, tuple):
        return tuple(fn(h) for h in state)
    return fn(state)


def layer_weights(rnn: nn.RNNBase, layer: int) -> list[torch.Tensor]:
    """The parameters of ``layer`` (each direction's ``weight_ih``, ``weight_hh``, then the biases),
    in the order PyTorch's recurrent kernels take them."""
    names = ["weight_ih", "weight_hh"] + (["bias_ih", "bias_hh"] if rnn.bias else [])
    directions = [""] + (["_reverse"] if rnn.bidirectional else [])
    return [getattr(rnn, f"{name}_l{layer}{suffix}") for suffix in directions for name in names]


def layer_state(rnn: nn.RNNBase, hx, batch: int, layer: int, like: torch.Tensor):
    """``hx``'s rows of ``layer`` (``[directions x B x H]`` each; zeros like ``like`` for None), as
    the kernel takes them: a tuple ``(h, c)`` for an LSTM, a tensor for a GRU."""
    directions = 2 if rnn.bidirectional else 1
    if hx is None:
        zeros = like.new_zeros(directions, batch, rnn.hidden_size)
        return (zeros, zeros) if isinstance(rnn, nn.LSTM) else zeros
    rows = slice(layer * directions, (layer + 1) * directions)
    return map_state(hx, lambda h: h[rows])


def layer_call(rnn, data, state, layer, dtype=None, batch_sizes=None):
    """One layer of ``rnn`` over ``data`` (``[T x B x I]``, or a packed sequence's data with its
    ``batch_sizes``) from ``state``, through the kernel ``nn.LSTM``/``nn.GRU`` call, with no
    dropout. ``dtype`` casts the weights (a bfloat16 layer). Returns ``(output, state)``."""
    weights = layer_weights(rnn, layer)
    if dtype is not None:
        weights = [w.to(dtype) for w in weights]
    kernel = torch._VF.lstm if isinstance(rnn, nn.LSTM) else torch._VF.gru  # nn.LSTM's own entry
    # one layer, dropout 0: (weights, has_biases, num_layers, dropout, train, bidirectional)
    settings = (weights, rnn.bias, 1, 0.0, rnn.training, rnn.bidirectional)
    if batch_sizes is None:
        out = kernel(data, state, *settings, rnn.batch_first)
    else:
        out = kernel(data, batch_sizes, state, *settings)
    return out[0], (out[1:] if isinstance(rnn, nn.LSTM) else out[1])


def stepped_layers(rnn: nn.RNNBase, inputs, hx=None, dtype=None):
    """``rnn(inputs, hx)`` one layer at a time, ``F.dropout(p=rnn.dropout)`` between the layers
    while training (PyTorch's generator: what a checkpoint restores), the weights in ``dtype``."""
    packed = isinstance(inputs, PackedSequence)
    data = inputs.data if packed else inputs
    batch_sizes = inputs.batch_sizes if packed else None
    batch = int(batch_sizes[0]) if packed else data.size(0 if rnn.batch_first else 1)
    if packed and inputs.sorted_indices is not None and hx is not None:
        hx = map_state(hx, lambda h: h.index_select(1, inputs.sorted_indices))  # the packed order
    finals = []
    for layer in range(rnn.num_layers):
        if layer > 0:
            data = F.dropout(data, rnn.dropout, rnn.training)
        state = layer_state(rnn, hx, batch, layer, like=data)
        data, final = layer_call(rnn, data, state, layer, dtype, batch_sizes)
        finals.append(final)
    if isinstance(rnn, nn.LSTM):
        final = (torch.cat([f[0] for f in finals]), torch.cat([f[1] for f in finals]))
    else:
        final = torch.cat(finals)  # [layers*directions x B x H]
    if not packed:
        return data, final
    if inputs.unsorted_indices is not None:
        final = map_state(final, lambda h: h.index_select(1, inputs.unsorted_indices))
    packed_out = PackedSequence(data, batch_sizes, inputs.sorted_indices, inputs.unsorted_indices)
    return packed_out, final


def cpu_bf16_rnn() -> bool:
    """Whether oneDNN runs bfloat16 recurrent layers on this CPU (AVX-512 BF16 or AMX)."""
    if not torch.backends.mkldnn.is_available():
        return False
    return torch.ops.mkldnn._is_mkldnn_bf16_supported()


def low_precision_dtype() -> tuple[str, torch.dtype] | None:
    """``(device type, dtype)`` the recurrent layers must run in with that device's autocast off, or
    None where autocast's own choice is right: CUDA bf16 autocast, and CPU bf16 autocast on a CPU
    without bfloat16 recurrent kernels."""
    if cuda_bf16_autocast():
        return "cuda", torch.bfloat16 if native_bf16() else torch.float32
    cpu_autocast = torch.is_autocast_enabled("cpu")
    if cpu_autocast and torch.get_autocast_dtype("cpu") == torch.bfloat16 and not cpu_bf16_rnn():
        return "cpu", torch.float32
    return None


def drops_between_layers(rnn: nn.RNNBase) -> bool:
    """Whether ``rnn`` would draw dropout masks between its layers (training, p > 0, 2+ layers)."""
    return rnn.training and rnn.dropout > 0 and rnn.num_layers > 1


def run_rnn(rnn: nn.RNNBase, inputs, hx=None):
    """``rnn(inputs, hx)``: ``inputs`` a tensor or a ``PackedSequence``, ``hx`` a tensor, a tuple
    ``(h, c)`` or None; the dropout between layers drawn by ``F.dropout`` (see the module's doc).
    Under bf16 autocast where the device has no bfloat16 recurrent kernels the layers run in float32
    (TF32 where allowed), and on CUDA in bfloat16 where cuDNN can (``native_bf16``), with the
    device's autocast off (``low_precision_dtype``); anywhere else it is the plain call. Inputs of
    another dtype than the layers' weights (a model cast for decoding keeps its recurrent layers in
    float32: ``fast_paths.cast_for_decoding``) are cast to it, and the outputs back."""
    data = inputs.data if isinstance(inputs, PackedSequence) else inputs
    weight = getattr(rnn, "weight_ih_l0", None)  # None: an int8 layer (-quantize int8)
    weights = data.dtype if weight is None else weight.dtype
    if data.dtype != weights and not torch.is_autocast_enabled(data.device.type):
        outputs, final = run_rnn(
            rnn, inputs.to(weights), None if hx is None else map_state(hx, lambda h: h.to(weights))
        )
        return outputs.to(data.dtype), map_state(final, lambda h: h.to(data.dtype))
    precision = low_precision_dtype()
    if precision is None:
        if drops_between_layers(rnn):
            return stepped_layers(rnn, inputs, hx)
        return rnn(inputs, hx)
    device_type, dtype = precision
    inputs = inputs.to(dtype)  # a tensor or a PackedSequence
    if hx is not None:
        hx = map_state(hx, lambda h: h.to(dtype))
    with torch.autocast(device_type, enabled=False):
        if dtype == torch.float32 and not drops_between_layers(rnn):
            return rnn(inputs, hx)
        return stepped_layers(rnn, inputs, hx, dtype)
