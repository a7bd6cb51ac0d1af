"""Decoding streams: how the threads are split, and that each stream runs in its own thread with its
share of them, without gradients, its errors reaching the caller."""
import threading

import pytest
import torch

from onmt_lite.translate.streams import run_streams, stream_threads


@pytest.mark.parametrize("threads,device,sampling,expected", [
    (2, "cpu", False, [1, 1]), (3, "cpu", False, [2, 1]), (8, "cpu", False, [4, 4]), (1, "cpu", False, [1]),
    (2, "cpu", True, [2]), (2, "cuda", False, [2])])
def test_stream_threads(threads, device, sampling, expected):
    assert stream_threads(threads, device, sampling) == expected


@pytest.mark.parametrize("autocast", [False, True])
def test_each_stream_runs_in_a_thread_of_its_own_with_its_threads_and_no_gradients(two_threads, autocast):
    """... and under the caller's CPU autocast (per thread in PyTorch, like the gradient mode)."""
    seen, both_started = {}, threading.Barrier(2, timeout=10)

    def work(i):
        both_started.wait()  # both run at the same time: neither waits for the other to finish
        product = torch.ones(2, 2) @ torch.ones(2, 2)
        seen[i] = (threading.get_ident(), torch.get_num_threads(), torch.is_grad_enabled(), product.dtype)

    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        run_streams([3, 1], work)
    dtype = torch.bfloat16 if autocast else torch.float32
    assert seen[0][1:] == (3, False, dtype) and seen[1][1:] == (1, False, dtype)
    assert len({seen[0][0], seen[1][0], threading.get_ident()}) == 3
    assert torch.get_num_threads() == 2 and torch.is_grad_enabled()


def test_one_stream_runs_in_the_calling_thread_without_gradients():
    seen = []
    run_streams([torch.get_num_threads()], lambda i: seen.append((i, threading.get_ident(), torch.is_grad_enabled())))
    assert seen == [(0, threading.get_ident(), False)]


def test_an_error_in_a_stream_reaches_the_caller_after_the_other_stream_is_done(two_threads):
    finished = []

    def work(i):
        if i == 0:
            raise ValueError("stream 0 failed")
        finished.append(i)

    with pytest.raises(ValueError, match="stream 0 failed"):
        run_streams([1, 1], work)
    assert finished == [1] and torch.get_num_threads() == 2
