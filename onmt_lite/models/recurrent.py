"""One call of a whole-sequence ``nn.LSTM``/``nn.GRU``, in the precision autocast should give it."""
import torch


def cuda_bf16_autocast():
    """Whether CUDA autocast is on with bfloat16 (``-model_dtype bf16`` on a CUDA device)."""
    return torch.is_autocast_enabled("cuda") and torch.get_autocast_dtype("cuda") == torch.bfloat16


def run_rnn(rnn, inputs, hx=None):
    """``rnn(inputs, hx)``: ``inputs`` a tensor or a ``PackedSequence``, ``hx`` a tensor, a tuple
    ``(h, c)`` or None. Under CUDA autocast with bfloat16 the call runs in float32 (TF32 where
    allowed) with CUDA autocast off, and returns float32 outputs; anywhere else it is the plain call
    (CPU autocast runs recurrent layers in bfloat16 itself)."""
    if not cuda_bf16_autocast():
        return rnn(inputs, hx)
    # cuDNN's autocast wrapper casts recurrent layers to float16 whatever the autocast dtype (no loss scale)
    inputs = inputs.float()  # a tensor or a PackedSequence
    if hx is not None:
        hx = tuple(h.float() for h in hx) if isinstance(hx, tuple) else hx.float()
    with torch.autocast("cuda", enabled=False):
        return rnn(inputs, hx)
