"""PyTorch's CUDA precision and determinism settings, set in one place by the commands; and the
one CUDA graph recording at a time (``graph_recording``).

PyTorch's defaults disagree with themselves: cuDNN (the encoder's recurrent layers) may use TF32,
cuBLAS (every ``nn.Linear``, the vocabulary projection included) may not, so "float32" on a GPU
would be half TF32 and agree with the CPU only to about 1e-3. onmt_lite's rule: float32 means IEEE
float32 unless the run asked for lower precision itself (``-model_dtype bf16``, whose float32 parts
may then use TF32; there is no option of its own for TF32). ``onmt_lite_train`` and
``onmt_lite_translate`` call ``configure_cuda`` when they run on a CUDA device; the library
(``Trainer``, ``Translator.load``) never changes these process-wide flags by itself.
"""

import contextlib
import threading
from collections.abc import Iterator

import torch


def configure_cuda(seeded, tf32=False):
    """Set the CUDA backends' flags for this process.

    ``seeded``: the run asked for reproducible results (training's ``-seed``, or a resumed run;
    translation always): cuDNN picks deterministic algorithms and does not benchmark; otherwise it
    may benchmark. ``tf32``: float32 products and recurrent layers may use TF32 (else IEEE float32).
    Returns the flags set, for the log.
    """
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cudnn.deterministic = seeded
    torch.backends.cudnn.benchmark = not seeded
    return {"tf32": tf32, "cudnn_deterministic": seeded, "cudnn_benchmark": not seeded}


_RECORDING = threading.Lock()  # one CUDA graph recording at a time in the process
_WARMUP_STREAMS: dict[torch.device, torch.cuda.Stream] = {}


@contextlib.contextmanager
def graph_recording(device: torch.device) -> Iterator[torch.cuda.Stream]:
    """While recording a CUDA graph on ``device``: the process's one recording at a time (the
    server decodes several models, each in a thread of its own, and torch.cuda.graph captures on
    one stream for all), and the side stream to warm up on, the same for every recording (a new
    stream each time would leave cuBLAS a workspace per stream, never freed)."""
    with _RECORDING:
        if device not in _WARMUP_STREAMS:
            _WARMUP_STREAMS[device] = torch.cuda.Stream(device)
        yield _WARMUP_STREAMS[device]
