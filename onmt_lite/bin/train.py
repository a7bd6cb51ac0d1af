"""onmt_lite_train: train a model on preprocessed data (see onmt_lite.train.main).

With ``-world_size N`` it starts N training processes; under torchrun each process runs this
command (see onmt_lite.train.distributed).
"""

import logging

import torch

from onmt_lite.loss.options import add_loss_class_options
from onmt_lite.models.checkpoint_files import refuse_an_earlier_run
from onmt_lite.opts import build_parser, config_opts, model_opts, parse, train_opts
from onmt_lite.train.distributed import (
    check_options,
    check_spawn_devices,
    exit_process,
    from_environment,
    launched_by_torchrun,
    spawn,
)
from onmt_lite.train.main import train
from onmt_lite.utils.errors import Stopped, UserError, report, run_command
from onmt_lite.utils.logging import init_logger
from onmt_lite.utils.memory import reuse_freed_memory

PROG = "onmt_lite_train"


@run_command(PROG)
def main(args=None):
    parser = build_parser(PROG, [config_opts, model_opts, train_opts], __doc__)
    add_loss_class_options(parser, args)  # -loss_class's own options, parsed with ours
    opt = parse(parser, args)
    check_options(opt)
    if opt.world_size > 1 and not launched_by_torchrun():
        check_spawn_devices(opt, torch.cuda.device_count() if torch.cuda.is_available() else 0)
        # one line before any process starts (each rank's would be many)
        if not opt.overwrite and opt.keep_checkpoint != 0:
            refuse_an_earlier_run(opt.save_model, opt.train_from)
        init_logger()
        spawn(opt, spawned_process)
    else:
        train_process(opt)


def train_process(opt):
    """One training process: the only one, or one rank of several. Only rank 0 logs (the others too,
    their rank first, with -gpu_verbose_level 1 or more), and only rank 0 reports the errors that
    every rank meets (bad input, a signal); the others exit with its status."""
    dist = from_environment(opt)
    main_rank = dist is None or dist.is_main
    verbose = main_rank or opt.gpu_verbose_level > 0  # 1.x: the other processes log too
    init_logger(
        opt.log_file if main_rank else None,
        logging.INFO if verbose else logging.WARNING,
        file_level=opt.log_file_level,
        prefix="" if main_rank else f"rank {dist.rank}: ",
    )
    reuse_freed_memory(training_device_type(opt, dist))
    try:
        train(opt, dist)
    except (KeyboardInterrupt, Exception) as err:
        if dist is None:
            raise
        # one of several: no close after an error (the others may be gone or mid-collective),
        # and no interpreter finalization, which can abort the process (exit_process)
        exit_process(end_of_rank(err, main_rank))
    if dist is not None:
        dist.close()
        exit_process(0)


def end_of_rank(err, main_rank: bool) -> int:
    """The exit status of a training process of several that ``err`` ended, reported as the
    command reports it by rank 0; the others report only what is theirs alone (an internal
    error), not the bad input or the signal that every rank meets."""
    if not main_rank and isinstance(err, (UserError, Stopped)):
        return getattr(err, "exit_code", 2)
    return report(PROG, err)


def training_device_type(opt, dist):
    """ "cuda" when this process trains on a CUDA device (as ``-gpu_ranks``/``-gpu`` or torchrun
    say), else "cpu"."""
    if dist is not None:
        return dist.device.type
    return "cuda" if opt.gpu_ranks or opt.gpu >= 0 else "cpu"


def spawned_process(opt):
    """A process started by ``-world_size``: errors reported as the command reports them."""
    run_command(PROG)(train_process)(opt)


if __name__ == "__main__":
    main()
