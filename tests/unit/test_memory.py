"""reuse_freed_memory: a freed large tensor's memory is reused without page faults (glibc only)."""

import platform
import subprocess
import sys

import pytest

from onmt_lite.utils.memory import reuse_freed_memory

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's allocator only")

# Fills a 200 MB tensor, frees it, fills a 180 MB one and prints the page faults of the second fill
# (smaller, so that it fits in the freed block whatever the alignment padding of the first one).
PROBE = """
import resource, sys, torch
from onmt_lite.utils.memory import reuse_freed_memory
if sys.argv[1] == "reuse":
    assert reuse_freed_memory()
torch.ones(50_000_000).sum()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
torch.ones(45_000_000).sum()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def second_fill_faults(mode):
    out = subprocess.run(
        [sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True
    )
    return int(out.stdout)


def test_freed_memory_is_reused_without_page_faults():
    pages = 180_000_000 // 4096
    # glibc unmapped the block: every page faults again
    assert second_fill_faults("default") > pages // 2
    assert second_fill_faults("reuse") < pages // 50


def test_reports_success_on_glibc():
    assert reuse_freed_memory() is True


PROBE_CUDA = """
import resource, sys, torch
from onmt_lite.utils.memory import reuse_freed_memory
assert reuse_freed_memory("cuda") is False
torch.ones(50_000_000).sum()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
torch.ones(45_000_000).sum()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def test_leaves_the_allocator_alone_for_a_cuda_run():
    """A CPU-only fast path: for a CUDA device it changes nothing (freed blocks still go back)."""
    out = subprocess.run(
        [sys.executable, "-c", PROBE_CUDA], capture_output=True, text=True, check=True
    )
    assert int(out.stdout) > 180_000_000 // 4096 // 2
