"""The one switch between the CPU's own ways of computing and those of every other device.

Some computations take another way on the CPU, where a PyTorch kernel is slow or a smaller working
set pays, than on a GPU, where every kernel launched costs the host time (the same results either
way, to float rounding):

- dropout draws its masks itself (``models/dropout.py``); elsewhere PyTorch's fused dropout;
- the top-k and argmax of wide rows go through chunk maxima (``utils/topk.py``);
- the fused loss scores 4 M entries at a time, a GPU 64 M (``loss/criteria.py``);
- products with the vocabulary pad their rows to buckets under autocast (``models/projection.py``);
- attention dropout stays out of the fused kernel with ``-self_attn_type scaled-dot-flash``
  (``models/multihead.py``);
- decoding packs the weights for oneDNN and runs in streams (``translate/fast_paths.py``).

Each asks ``cpu_path(device)``. ``as_on_a_gpu()`` makes them all take the other way on the CPU
too: the stand-in for a GPU that counts, on the CPU, the kernels a GPU would launch
(``bench/host_cost.py``, ``tests/unit/test_host_syncs.py``). PyTorch's CPU kernels mostly match
its CUDA kernels one for one; not the attention with dropout nor the recurrent cells, which the
CPU runs as several operations.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

_as_on_a_gpu = [False]  # set by as_on_a_gpu only


def cpu_path(device: torch.device | str) -> bool:
    """Whether work on ``device`` takes the CPU's own way."""
    return torch.device(device).type == "cpu" and not _as_on_a_gpu[0]


@contextlib.contextmanager
def as_on_a_gpu() -> Iterator[None]:
    """Within it, work on the CPU takes the way it takes on a GPU (this process, every thread)."""
    before = _as_on_a_gpu[0]
    _as_on_a_gpu[0] = True
    try:
        yield
    finally:
        _as_on_a_gpu[0] = before
