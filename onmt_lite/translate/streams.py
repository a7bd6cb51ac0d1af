"""Decoding streams: two searches side by side on a CPU, each with half the threads.

A decoding step is a few large products (the vocabulary projection, the cells' gates), which use
every thread, and many small operations (gathers, the search's bookkeeping, the interpreter itself),
which mostly run on one thread while the others wait. Two streams, each a search of its own over
every other batch and each with half the threads, fill that idle time: while one stream does its
small operations, the other multiplies. On 2 cores (toy-ende, batch 32, interleaved runs of
``onmt_lite_translate``) beam 5 ran 8-13% faster and greedy search 12-15%, with the same outputs: an
example's result does not depend on what it is decoded with (the batch-invariance tests), nor on
which stream. Which batches a stream decodes is fixed (not whichever stream is free first), so that
what decodes together, and with it int8's output (its activations are quantised per product, over
all rows), does not depend on timing.

PyTorch keeps a thread count per thread (each thread's first call copies the process's last set
count, which ``set_num_threads`` also changes) and MKL one for the process: ``run_streams`` sets
each stream's after its thread's first call, and puts the caller's back when the streams are done.
"""
import threading

import torch


def stream_threads(threads, device, sampling):
    """The thread count of each decoding stream: two streams of half the ``threads`` on a CPU with
    at least 2; one stream on a GPU, or when sampling (the streams would take random numbers from
    one generator in an order that depends on timing, and ``-seed`` would no longer fix the output)."""
    if torch.device(device).type != "cpu" or sampling or threads < 2:
        return [threads]
    return [threads - threads // 2, threads // 2]


def run_streams(threads, work):
    """``work(i)`` for each stream ``i``, each in a thread of its own that runs PyTorch's operations
    with ``threads[i]`` threads, without gradients, under the caller's CPU autocast if any; returns
    when all are done and re-raises the first exception any of them raised. One stream runs in the
    calling thread."""
    if len(threads) == 1:
        with torch.no_grad():
            work(0)
        return
    errors = []
    autocast = {"enabled": torch.is_autocast_enabled("cpu"), "dtype": torch.get_autocast_dtype("cpu")}

    def run(i):
        try:
            torch.get_num_threads()  # a new thread takes the process's last count at its first call
            torch.set_num_threads(threads[i])  # only then its own
            with torch.no_grad(), torch.autocast("cpu", **autocast):  # both are per thread
                work(i)
        except BaseException as error:  # any: handed to the calling thread
            errors.append(error)

    total = torch.get_num_threads()
    workers = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(threads))]
    try:
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    finally:
        torch.set_num_threads(total)  # MKL's count is the process's: the streams changed it
    if errors:
        raise errors[0]
