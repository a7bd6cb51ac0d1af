"""Decoding streams: how the threads are split; that each stream runs in its own process (or thread)
with its share of them, without gradients, its items consumed in the caller's process and its
errors reaching the caller."""

import os
import signal
import subprocess
import sys
import threading
import time

import pytest
import torch

from onmt_lite.translate.streams import StreamTraceback, can_fork, run_streams

needs_fork = pytest.mark.skipif(
    not can_fork(), reason="streams run in forked processes on Linux only"
)


def _where(i):
    """What stream ``i`` runs in: process, thread, thread count, gradient mode, a product's
    dtype."""
    product = torch.ones(2, 2) @ torch.ones(2, 2)
    return (
        i,
        os.getpid(),
        threading.get_ident(),
        torch.get_num_threads(),
        torch.is_grad_enabled(),
        product.dtype,
    )


@needs_fork
@pytest.mark.parametrize("autocast", [False, True])
def test_streams_after_the_first_run_in_processes_of_their_own_with_one_thread(
    two_threads, autocast
):
    """... items consumed here, in each stream's order; no gradients, the caller's CPU autocast."""
    seen = []

    def work(i):
        for n in range(50):
            yield _where(i) + (n,)

    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        run_streams([1, 1, 1], work, seen.append, processes=True)
    dtype = torch.bfloat16 if autocast else torch.float32
    by_stream = {i: [s for s in seen if s[0] == i] for i in range(3)}
    assert all([s[-1] for s in items] == list(range(50)) for items in by_stream.values())
    pids = {i: {s[1] for s in items} for i, items in by_stream.items()}
    assert (
        pids[0] == {os.getpid()}
        and len(pids[1] | pids[2]) == 2
        and os.getpid() not in pids[1] | pids[2]
    )
    assert {s[3:6] for s in seen} == {(1, False, dtype)}
    assert torch.get_num_threads() == 2 and torch.is_grad_enabled()


@needs_fork
def test_a_stream_process_sends_what_does_not_fit_a_pipe_at_once():
    big = torch.arange(300_000, dtype=torch.float32)  # 1.2 MB pickled: the pipe holds 64 kB
    seen = []
    run_streams([1, 1], lambda i: iter([(i, big * (i + 1))]), seen.append, processes=True)
    assert sorted((i, torch.equal(t, big * (i + 1))) for i, t in seen) == [(0, True), (1, True)]


def test_streams_in_threads_of_their_own_with_their_threads_and_no_gradients(two_threads):
    seen = []
    both_started = threading.Barrier(2, timeout=10)

    def work(i):
        both_started.wait()  # both run at the same time: neither waits for the other to finish
        yield _where(i)

    run_streams([3, 1], work, seen.append, processes=False)
    seen.sort()
    assert [s[3:5] for s in seen] == [(3, False), (1, False)]
    assert {s[1] for s in seen} == {os.getpid()}
    assert len({seen[0][2], seen[1][2], threading.get_ident()}) == 3
    assert torch.get_num_threads() == 2 and torch.is_grad_enabled()


def test_one_stream_runs_in_the_calling_thread_without_gradients():
    seen = []
    run_streams([torch.get_num_threads()], lambda i: iter([_where(i)]), seen.append)
    assert [s[:3] + s[4:5] for s in seen] == [(0, os.getpid(), threading.get_ident(), False)]


def _failing_stream(failing, finished):
    def work(i):
        yield i
        if i == failing:
            raise ValueError(f"stream {i} failed")
        finished.append(i)
        yield i

    return work


@pytest.mark.parametrize("processes", [pytest.param(True, marks=needs_fork), False])
def test_an_error_in_a_later_stream_reaches_the_caller_after_the_first_stream_is_done(
    two_threads, processes
):
    finished = []
    seen = []
    with pytest.raises(ValueError, match="stream 1 failed") as raised:
        run_streams([1, 1], _failing_stream(1, finished), seen.append, processes=processes)
    assert 0 in finished and sorted(seen) == [0, 0, 1] and torch.get_num_threads() == 2
    if processes:  # the child's traceback comes along
        assert isinstance(raised.value.__cause__, StreamTraceback)
        assert "stream 1 failed" in str(raised.value.__cause__)


@needs_fork
def test_an_error_in_the_first_stream_stops_the_others(two_threads):
    def work(i):
        if i == 0:
            raise KeyError("stream 0 failed")
        while True:  # would never end
            yield i

    seen = []
    with pytest.raises(KeyError, match="stream 0 failed"):
        run_streams([1, 1], work, seen.append, processes=True)
    assert torch.get_num_threads() == 2


@needs_fork
def test_a_stream_process_that_dies_is_an_error():
    def work(i):
        if i == 1:
            os._exit(3)
        yield i

    seen = []
    with pytest.raises(RuntimeError, match="decoding stream 1 .* ended without its results"):
        run_streams([1, 1], work, seen.append, processes=True)
    assert seen == [0]


def _gone(pid):
    """Whether process ``pid`` has ended (a zombie waiting for its new parent counts)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


STREAMS_FOREVER = """
import os, sys, time
from onmt_lite.translate.streams import run_streams

def work(i):
    if i == 1:  # busy without a word to its parent: no broken pipe would end it
        with open(sys.argv[1], "w") as f:
            f.write(str(os.getpid()))
        while True:
            time.sleep(0.01)
    while True:
        time.sleep(0.01)
        yield i

run_streams([1, 1], work, lambda item: None, processes=True)
"""


@needs_fork
def test_a_stream_process_ends_when_its_parent_is_killed(tmp_path):
    pid_file = tmp_path / "child"
    parent = subprocess.Popen([sys.executable, "-c", STREAMS_FOREVER, str(pid_file)])
    try:
        deadline = time.monotonic() + 60
        while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        child = int(pid_file.read_text())
        assert not _gone(child)
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    deadline = time.monotonic() + 10
    while not _gone(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    gone = _gone(child)
    if not gone:
        os.kill(child, signal.SIGKILL)
    assert gone
