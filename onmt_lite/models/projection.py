"""The vocabulary projection ``[N x H] -> [N x V]`` with N padded to a few sizes under CPU autocast.

Under ``-model_dtype bf16`` PyTorch multiplies in bfloat16 on oneDNN, which compiles a kernel for
every shape it meets and keeps up to 1,024 of them, each holding memory that grows with the product.
The loss runs the projection on the real target words of a shard, whose number changes with every
batch, so a training run added kernels until that cache was full, gigabytes of them
(bench/README.md). Padding the rows to ``row_bucket(N)`` bounds the shapes to ``BUCKETS_PER_OCTAVE``
per doubling of N, at the cost of at most 1/8 more rows. The padded rows are zero and their
outputs are cut off before anything reads them, so the values and gradients are those of the
unpadded product (up to the kernel's rounding). The padding sits here, used by the generators and
by the fused training loss (``padded_rows``, ``bucket_below``), so that every loss (``-loss_class``
ones too) gets it.

In float32 (MKL, no kernel cache) and off the CPU the projection runs unpadded.
"""

import torch
import torch.nn.functional as F

from onmt_lite.utils.cpu_paths import cpu_path

BUCKETS_PER_OCTAVE = 8
MIN_STEP = 16


def row_bucket(rows):
    """The padded row count for ``rows``: the next multiple of ``max(MIN_STEP, 2^k / 8)`` where
    ``2^k <= rows < 2^(k+1)``, so at most ``rows / 8`` (or 15) rows more; 0 stays 0."""
    if rows <= 0:
        return 0
    step = max(MIN_STEP, (1 << (rows.bit_length() - 1)) // BUCKETS_PER_OCTAVE)
    return -(-rows // step) * step


def bucket_below(rows):
    """The largest ``row_bucket`` value not above ``rows`` (rows below ``MIN_STEP`` are their
    own)."""
    if rows < MIN_STEP:
        return rows
    step = max(MIN_STEP, (1 << (rows.bit_length() - 1)) // BUCKETS_PER_OCTAVE)
    return rows // step * step


def padded_rows(hidden):
    """The row count to give ``hidden`` ``[N x H]`` before a product with the vocabulary:
    ``row_bucket(N)`` under CPU autocast, else N."""
    if not cpu_path(hidden.device) or not torch.is_autocast_enabled("cpu"):
        return hidden.size(0)
    return row_bucket(hidden.size(0))


def project(linear, hidden):
    """``linear(hidden)`` for ``hidden`` ``[N x H]`` -> ``[N x V]``, its rows padded to
    ``row_bucket(N)`` under CPU autocast (see the module doc)."""
    rows = hidden.size(0)
    padded = padded_rows(hidden)
    if padded == rows:
        return linear(hidden)
    return linear(F.pad(hidden, (0, 0, 0, padded - rows)))[:rows]
