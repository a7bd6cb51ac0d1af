"""Reuse freed memory instead of handing it back to the operating system (glibc's allocator).

A training step on the CPU allocates and frees the same large buffers every time: the scores of one
loss shard alone are ``[positions x batch x vocabulary]``, 160 MB at 32 x 64 x 20000. glibc serves
every block over 32 MB with a fresh ``mmap`` and unmaps it when it is freed, so each step
page-faults its way through new memory again (bench/README.md has what that cost).
``reuse_freed_memory()`` tells glibc to take large blocks from its heap and never to trim it; the
resident memory then stays at the highest it reached instead of shrinking between steps. It is one
of the CPU-only fast paths (``onmt_lite/translate/fast_paths.py``): the commands set it for a CPU
run, never for a CUDA device, and the library never sets it by itself.
"""

import ctypes

import torch

M_TRIM_THRESHOLD = -1  # mallopt parameters, from glibc's <malloc.h>
M_MMAP_MAX = -4
LARGEST_INT = 2**31 - 1


def reuse_freed_memory(device="cpu"):
    """Set glibc's allocator to keep and reuse freed memory when the tensors live on the CPU
    (``device``); returns False (and changes nothing) for another device or where the C library is
    not glibc."""
    if torch.device(device).type != "cpu":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
        gnu_get_libc_version = ctypes.CDLL(None).gnu_get_libc_version
    except (OSError, AttributeError):
        return False
    del gnu_get_libc_version  # only glibc has it: musl's mallopt is a no-op that reports success
    return bool(mallopt(M_MMAP_MAX, 0)) and bool(mallopt(M_TRIM_THRESHOLD, LARGEST_INT))
