"""Training on several processes with torch.distributed: one process per device (gloo on CPUs, nccl
on GPUs), on one machine or many.

Two ways in, one code path:

* ``torchrun --nproc_per_node N -m onmt_lite.bin.train ...``: torchrun sets ``RANK``,
  ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT`` (several machines:
  ``--nnodes``, ``--node_rank``, ``--rdzv_endpoint``), and each process finds its rank there
  (``from_environment``).
* ``onmt_lite_train -world_size N [-gpu_ranks 0 1 ...] [-master_ip -master_port]`` as in OpenNMT-py
  1.x: the command starts the N processes itself (``spawn``) with the same variables set.

Every process reads the same stream of batches and keeps its share of each step's batches
(``step_share``), so all their data positions are the same and a checkpoint resumes with any
number of processes. A step's loss is divided by the step's global normaliser (sentences or target
tokens summed over the processes) and the gradients are summed over the processes once, after the
step's last backward pass: N processes with batches of B sentences take exactly the step of one
process with N x B. DistributedDataParallel is not used because its gradient hooks expect one
backward pass per forward: the sharded loss runs one backward per shard (the generator's gradients
arrive once per shard) and one through the rest of the model, truncation one per window; the
single bucketed all-reduce after the last of them is what DDP does with ``no_sync`` on every
micro-batch but the last. The initial weights are broadcast from rank 0. Only rank 0 logs,
validates and writes checkpoints; its decisions (stop early, the plateau schedule) and any rank's
stop signal reach every process, so they all stop at the same step.
"""

import datetime
import itertools
import logging
import os
import signal
import sys

import torch
import torch.distributed as dist

from onmt_lite.utils.errors import Stopped, UserError

# a collective waiting longer than this fails (rank 0 validating, ...)
TIMEOUT = datetime.timedelta(minutes=30)


class Distributed:
    """This process's place among ``world_size`` training processes (after
    ``init_process_group``)."""

    def __init__(self, rank, world_size, device):
        self.rank = rank
        self.world_size = world_size
        self.device = device

    @property
    def is_main(self):
        return self.rank == 0

    def close(self):
        """Leave the process group once every process is done with it (after training ended without
        an error): all meet at a barrier first, then the group is destroyed while the interpreter is
        fully alive. A gloo group destroyed while a peer still talks to it can abort the process;
        a process that then ends should call ``exit_process`` (see there)."""
        if dist.is_initialized():
            dist.barrier()
            dist.destroy_process_group()

    def _tensor(self, values, dtype=torch.float64):
        # gloo reduces CPU tensors, nccl CUDA tensors
        return torch.tensor(
            values, dtype=dtype, device=self.device if dist.get_backend() == "nccl" else "cpu"
        )

    def sum(self, values):
        """The sums over the processes of a list of numbers (float64: exact for counts)."""
        total = self._tensor(values)
        dist.all_reduce(total)
        return total.tolist()

    def max(self, value):
        total = self._tensor([value])
        dist.all_reduce(total, op=dist.ReduceOp.MAX)
        return total.item()

    def broadcast(self, values):
        """Rank 0's list of numbers, on every process."""
        shared = self._tensor(values)
        dist.broadcast(shared, 0)
        return shared.tolist()

    def sum_statistics(self, stats):
        """``stats`` (a Statistics) with its counts summed over the processes."""
        stats.loss, n_words, n_correct, n_src = self.sum(
            [stats.loss, stats.n_words, stats.n_correct, stats.n_src_words]
        )
        stats.n_words, stats.n_correct, stats.n_src_words = int(n_words), int(n_correct), int(n_src)
        return stats

    def sum_gradients(self, params):
        """Sum every parameter's gradient over the processes, in one flat buffer (a parameter that
        got no gradient here counts as zeros)."""
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        grads = [p.grad for p in params]
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat)
        offset = 0
        for g in grads:
            g.copy_(flat[offset : offset + g.numel()].view_as(g))
            offset += g.numel()

    def broadcast_parameters(self, module):
        """Rank 0's weights everywhere (the processes start from the same model)."""
        for tensor in list(module.parameters()) + list(module.buffers()):
            dist.broadcast(tensor.data, 0)


def step_share(batches, accum_count, dist_context):
    """This process's ``accum_count`` batches of the next step: every process draws the step's
    ``accum_count x world_size`` batches from the same stream and keeps its own slice. When the
    stream ends (-single_pass): the batches left (one process), or None when none are left or, with
    several processes, fewer than a whole step (every process sees the same count)."""
    wanted = accum_count * (1 if dist_context is None else dist_context.world_size)
    drawn = list(itertools.islice(batches, wanted))
    if not drawn or (dist_context is not None and len(drawn) < wanted):
        return None
    if dist_context is None:
        return drawn
    return drawn[dist_context.rank * accum_count : (dist_context.rank + 1) * accum_count]


def check_options(opt):
    """-world_size and -gpu_ranks must describe the processes of this machine."""
    if opt.world_size > 1 and opt.gpu_ranks and len(opt.gpu_ranks) != opt.world_size:
        raise UserError(
            f"-world_size {opt.world_size} but -gpu_ranks lists {len(opt.gpu_ranks)} device(s) "
            f"({' '.join(map(str, opt.gpu_ranks))}): give one device per process (for several "
            f"machines start onmt_lite with torchrun)"
        )
    if opt.world_size == 1 and len(opt.gpu_ranks) > 1:
        raise UserError(
            f"-gpu_ranks lists {len(opt.gpu_ranks)} devices but -world_size is 1: set -world_size "
            f"{len(opt.gpu_ranks)} to train on all of them"
        )


def launched_by_torchrun():
    return int(os.environ.get("WORLD_SIZE", "1")) > 1 and "RANK" in os.environ


def cuda_index(gpu_ranks, gpu, local_rank, local_world_size):
    """The CUDA device index of the process of ``local_rank`` (of ``local_world_size`` on its
    machine), or None for the CPU.

    ``-gpu_ranks`` with one entry per local process gives each its own; with a single entry, or with
    ``-gpu`` 0 or more, each process takes the CUDA device of its local rank (a 1.x habit: every
    process on one device would fail in nccl, or share it under gloo); neither: the CPU."""
    if gpu_ranks and len(gpu_ranks) not in (1, local_world_size):
        raise UserError(
            f"-gpu_ranks {' '.join(map(str, gpu_ranks))}: torchrun started {local_world_size} "
            f"processes on this machine; give one device each, or one entry to use the local ranks"
        )
    if len(gpu_ranks) == local_world_size and gpu_ranks:
        return gpu_ranks[local_rank]
    return local_rank if gpu_ranks or gpu >= 0 else None


def check_spawn_devices(opt, cuda_count):
    """Before ``spawn`` starts anything: every CUDA device its ``-world_size`` processes would take
    exists on this machine (``cuda_count`` devices), else one UserError for them all."""
    ranks = range(opt.world_size)
    wanted = [cuda_index(opt.gpu_ranks, opt.gpu, rank, opt.world_size) for rank in ranks]
    missing = " ".join(str(index) for index in wanted if index is not None and index >= cuda_count)
    if missing:
        raise UserError(
            f"-world_size {opt.world_size} asks for CUDA device(s) {missing} "
            f"(-gpu_ranks/-gpu) but this machine has {cuda_count or 'no'} CUDA "
            "devices; no process was started (leave out -gpu_ranks and -gpu to train "
            "on the CPU)"
        )


def torchrun_device(gpu_ranks, gpu, local_rank, local_world_size, cuda_count, rank=0):
    """The device of the torchrun process of ``local_rank`` (``cuda_index``). A CUDA device this
    machine lacks is a UserError, as in one process, not a silent fall back to the CPU."""
    index = cuda_index(gpu_ranks, gpu, local_rank, local_world_size)
    if index is None:
        return torch.device("cpu")
    if index >= cuda_count:
        raise UserError(
            f"rank {rank}: CUDA device {index} requested (-gpu_ranks/-gpu) but this machine has "
            f"{cuda_count or 'no'} CUDA devices"
        )
    return torch.device("cuda", index)


def from_environment(opt):
    """The Distributed of this process from torchrun's (or ``spawn``'s) environment variables, with
    the process group initialised; None when training in one process."""
    if not launched_by_torchrun():
        return None
    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    if opt.world_size not in (1, world_size):
        raise UserError(
            f"-world_size {opt.world_size} but {world_size} processes were started (by torchrun)"
        )
    local_world_size = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
    cuda_count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    device = torchrun_device(opt.gpu_ranks, opt.gpu, local_rank, local_world_size, cuda_count, rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    elif "OMP_NUM_THREADS" not in os.environ:  # share the cores among this machine's processes
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // local_world_size))
    backend = (
        opt.gpu_backend
        if opt.gpu_backend != "auto"
        else "nccl"
        if device.type == "cuda"
        else "gloo"
    )
    if not dist.is_initialized():
        dist.init_process_group(backend, rank=rank, world_size=world_size, timeout=TIMEOUT)
    return Distributed(rank, world_size, device)


STOP_GRACE_S = 5  # seconds: see spawn


def spawn(opt, worker):
    """Run ``worker(opt)`` in ``opt.world_size`` new processes (``-world_size`` without torchrun),
    meeting at ``-master_ip:-master_port``; returns when all have ended. A process that fails or is
    killed stops the others (those still running ``STOP_GRACE_S`` later), and the command exits
    with its status. SIGTERM is passed on to the processes (they save a checkpoint and stop);
    SIGINT from a terminal reaches them directly."""
    import torch.multiprocessing as mp

    os.environ.update(
        {
            "MASTER_ADDR": opt.master_ip,
            "MASTER_PORT": str(opt.master_port),
            "WORLD_SIZE": str(opt.world_size),
            "LOCAL_WORLD_SIZE": str(opt.world_size),
        }
    )
    context = mp.start_processes(
        _spawned, args=(opt, worker), nprocs=opt.world_size, join=False, start_method="spawn"
    )

    def forward(signum, frame):
        for process in context.processes:
            if process.is_alive():
                os.kill(process.pid, signum)

    previous = {
        signal.SIGTERM: signal.signal(signal.SIGTERM, forward),
        signal.SIGINT: signal.signal(signal.SIGINT, signal.SIG_IGN),
    }
    try:
        # a rank that ends with an error gives the others STOP_GRACE_S to end on their own before
        # they are stopped: bad input is met by every rank, which then exits with rank 0's line
        # last (a rank stopped meanwhile made PyTorch log "Terminating process ..." after it)
        while not context.join(grace_period=STOP_GRACE_S):
            pass
    except mp.ProcessExitedException as err:
        if not err.signal_name and (err.exit_code == 2 or err.exit_code >= 128):
            raise Stopped("", err.exit_code) from None  # bad input or a signal: rank 0 said why
        raise Stopped(
            f"rank {err.error_index} ended ({_how(err)}); the other processes were stopped",
            err.exit_code if err.exit_code and err.exit_code > 0 else 1,
        ) from None
    except mp.ProcessRaisedException as err:
        last = str(err).strip().splitlines()[-1] if str(err).strip() else "an error"
        raise Stopped(
            f"rank {err.error_index} failed: {last}; the other processes were stopped", 1
        ) from None
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _how(err):
    if err.signal_name:
        return f"killed by {err.signal_name}"
    return f"exit status {err.exit_code}"


def _spawned(rank, opt, worker):
    os.environ.update({"RANK": str(rank), "LOCAL_RANK": str(rank)})
    worker(opt)


def exit_process(status=0):
    """End a training process now, with its logs and output flushed but without the interpreter's
    finalization, where a gloo worker thread still releasing a tensor can take the GIL of a dying
    interpreter and abort the process ("terminate called without an active exception"): it happened
    now and then in the test suite even after ``destroy_process_group``."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(status)
