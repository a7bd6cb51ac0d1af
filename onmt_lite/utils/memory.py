"""Reuse freed memory instead of handing it back to the operating system (glibc's allocator).

A training step allocates and frees the same large buffers every time: the scores of one loss shard
alone are ``[positions x batch x vocabulary]``, 160 MB at 32 x 64 x 20000. glibc serves every block
over 32 MB with a fresh ``mmap`` and unmaps it when it is freed, so each step page-faults its way
through new memory again: a ``log_softmax`` over such a buffer took 51 ms on fresh memory and 9 ms on
reused memory on a 2-core machine, and training ran about 30% slower. ``reuse_freed_memory()`` tells
glibc to take large blocks from its heap and never to trim it; the resident memory then stays at the
highest it reached instead of shrinking between steps.
"""
import ctypes

M_TRIM_THRESHOLD = -1  # mallopt parameters, from glibc's <malloc.h>
M_MMAP_MAX = -4
LARGEST_INT = 2 ** 31 - 1


def reuse_freed_memory():
    """Set glibc's allocator to keep and reuse freed memory; returns False (and changes nothing)
    where the C library is not glibc."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
        gnu_get_libc_version = ctypes.CDLL(None).gnu_get_libc_version
    except (OSError, AttributeError):
        return False
    del gnu_get_libc_version  # only glibc has it: musl's mallopt is a no-op that reports success
    return bool(mallopt(M_MMAP_MAX, 0)) and bool(mallopt(M_TRIM_THRESHOLD, LARGEST_INT))
