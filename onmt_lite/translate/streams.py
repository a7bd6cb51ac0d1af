"""Decoding streams: several searches side by side on a CPU, each over its own share of the batches.

A decoding step is a few large products (the vocabulary projection, the cells' gates) and many small
operations (gathers, the search's bookkeeping, the interpreter itself). On one stream the small
operations run on one thread while the others wait; several streams fill that time. Where the
caller asks for it and the operating system can fork (Linux), each stream but the first runs in a
child process with one thread, so that the streams' Python runs in parallel too (threads share one
interpreter lock, which slows the small operations; bench/README.md has the figures). Otherwise two
streams run in threads of this process, each with half the threads.

The outputs stay the same: an example's result does not depend on what it is decoded with (the
batch-invariance tests), nor on which stream. Which batches a stream decodes is fixed (not
whichever stream is free first), so that what decodes together, and with it int8's output (its
activations are quantised per product, over all rows), does not depend on timing.

A forked child keeps one thread: GNU OpenMP's worker threads do not survive a fork, and a child that
asked for more of them after its parent had used some hung. A child sends what its stream yields,
pickled, through a pipe; ``consume`` runs in the calling process, one item at a time. The child
ends with ``os._exit``, so it never flushes its copies of the parent's buffers.
"""

import ctypes
import os
import pickle
import signal
import sys
import threading
import traceback
import warnings
from multiprocessing.connection import Pipe

import torch

PR_SET_PDEATHSIG = 1  # prctl's option (linux/prctl.h)


def can_fork():
    """Whether streams may run in forked processes: on Linux (forking is unsafe on macOS, absent
    on Windows)."""
    return sys.platform.startswith("linux") and hasattr(os, "fork")


class StreamTraceback(Exception):
    """The traceback of an error raised in a stream's child process (the cause of the re-raised
    error)."""


def run_streams(threads, work, consume, processes=False):
    """``consume(item)`` for each item that ``work(i)`` yields, for each stream ``i``, one item at a
    time, in the calling process. Stream ``i`` runs PyTorch's operations with ``threads[i]``
    threads, without gradients, under the caller's CPU autocast if any; streams after the first run
    in forked child processes with ``processes`` (each needs one thread; see ``can_fork``) or else
    in threads. Returns when all are done; re-raises the first error of any of them. Which streams
    to run is ``fast_paths.decoding_streams``'s choice."""
    if len(threads) == 1:
        with torch.no_grad():
            for item in work(0):
                consume(item)
        return
    lock = threading.Lock()

    def locked(item):
        with lock:
            consume(item)

    total = torch.get_num_threads()  # the caller's count, put back after the streams changed it
    try:
        if processes:
            assert all(count == 1 for count in threads[1:]), "a forked stream runs on one thread"
            _run_in_processes(threads, work, locked)
        else:
            _run_in_threads(threads, work, locked)
    finally:
        torch.set_num_threads(total)


def _autocast():
    return {"enabled": torch.is_autocast_enabled("cpu"), "dtype": torch.get_autocast_dtype("cpu")}


def _run_stream(i, threads, work, consume, autocast):
    torch.get_num_threads()  # a new thread takes the process's last count at its first call
    torch.set_num_threads(threads)  # only then its own
    with torch.no_grad(), torch.autocast("cpu", **autocast):  # both are per thread
        for item in work(i):
            consume(item)


def _run_in_threads(threads, work, consume):
    """Each stream in a thread of its own (PyTorch keeps a thread count per thread, MKL one for
    the process); ``consume`` is thread-safe."""
    errors = []
    autocast = _autocast()

    def run(i):
        try:
            _run_stream(i, threads[i], work, consume, autocast)
        except BaseException as error:  # any: handed to the calling thread
            errors.append(error)

    workers = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(threads))]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    if errors:
        raise errors[0]


def _die_with_parent(parent):
    """Have the kernel kill this process when its parent dies (Linux's PR_SET_PDEATHSIG): a parent
    killed outright leaves no stream decoding on."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # it died before that
        os._exit(1)


def _child(i, work, writer, autocast, parent):
    """The body of stream ``i``'s child process: sends each item, then "done" or the error."""
    code = 1
    try:
        _die_with_parent(parent)
        _run_stream(
            i, 1, work, lambda item: writer.send_bytes(pickle.dumps(("item", item), -1)), autocast
        )
        writer.send_bytes(pickle.dumps(("done", None), -1))
        code = 0
    except BaseException as error:
        text = traceback.format_exc()
        try:
            message = pickle.dumps(("error", (error, text)), -1)
        except Exception:  # an error that does not pickle: its text
            message = pickle.dumps(
                ("error", (RuntimeError(f"{type(error).__name__}: {error}"), text)), -1
            )
        try:
            writer.send_bytes(message)
        except OSError:
            pass
    finally:
        os._exit(code)


def _run_in_processes(threads, work, consume):
    """Streams after the first in forked children, which send their items through pipes, read
    here by a thread per child; the first runs here. ``consume`` is thread-safe."""
    sys.stdout.flush()
    sys.stderr.flush()
    autocast = _autocast()
    children = []
    drains = []
    errors = []

    def drain(i, pid, reader):
        try:
            while True:
                kind, payload = pickle.loads(reader.recv_bytes())
                if kind == "item":
                    consume(payload)
                    continue
                if kind == "error":
                    error, text = payload
                    error.__cause__ = StreamTraceback(f"in decoding stream {i}:\n{text}")
                    errors.append(error)
                return
        except EOFError:
            errors.append(
                RuntimeError(f"decoding stream {i} (process {pid}) ended without its results")
            )
        except BaseException as error:
            errors.append(error)

    parent = os.getpid()
    try:
        for i in range(1, len(threads)):
            reader, writer = Pipe(duplex=False)
            with warnings.catch_warnings():
                # Python 3.12+ warns of forking a process with threads (here OpenMP's, idle): a
                # child could find a lock another thread held. Ours runs one thread of PyTorch
                # (OpenMP's pool is not used) and takes no lock of the other threads' making.
                warnings.filterwarnings(
                    "ignore", "This process .* is multi-threaded", DeprecationWarning
                )
                pid = os.fork()
            if pid == 0:
                reader.close()
                _child(i, work, writer, autocast, parent)
            writer.close()  # the child's alone now: EOF when it exits
            children.append((i, pid, reader))
        drains = [threading.Thread(target=drain, args=child, daemon=True) for child in children]
        for thread in drains:
            thread.start()
        _run_stream(0, threads[0], work, consume, autocast)
    except BaseException:
        for _, pid, _ in children:
            _kill(pid)
        raise
    finally:
        for thread in drains:
            thread.join()
        for _, pid, reader in children:
            os.waitpid(pid, 0)
            reader.close()
    if errors:
        raise errors[0]


def _kill(pid):
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
