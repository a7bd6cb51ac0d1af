"""train(opt): what ``onmt_lite_train`` does, from parsed options to the last checkpoint.

Every check of the inputs (data, checkpoint, contradictory options) happens before the first step.
On ``-train_from``, the model's architecture comes from the checkpoint; ``-reset_optim`` decides
whether the optimizer settings, moments and schedule position come from it too. A checkpoint that
keeps raw weights beside its averaged ones (``-average_decay``) trains on from the raw weights.
"""

import contextlib
import os
import random

import torch

from onmt_lite.data.iterator import BatchIterator
from onmt_lite.data.prefetch import prefetched
from onmt_lite.data.vocab import vocabs_to_plain
from onmt_lite.models.builder import build_model, model_dims
from onmt_lite.models.checkpointing import use_checkpointing
from onmt_lite.models.compiled import compile_layers
from onmt_lite.models.checkpoint import (
    load_checkpoint,
    model_from_checkpoint,
    restore_model,
    set_rng_state,
)
from onmt_lite.models.checkpoint_files import CheckpointWriter
from onmt_lite.train.averaging import MovingAverage
from onmt_lite.train.corpora import describe_corpora, load_data, restore_position, training_batches
from onmt_lite.train.early_stopping import EarlyStopping
from onmt_lite.train.graphed import graphing_problem
from onmt_lite.train.idle_options import idle_options
from onmt_lite.train.optim import Optimizer
from onmt_lite.train.report import Reporter
from onmt_lite.train.resumed_options import checkpoint_options, resolve_options
from onmt_lite.train.saver import CheckpointSaver
from onmt_lite.train.sparse_adam import check_options as check_sparse_adam
from onmt_lite.train.trainer import Trainer, check_schedule
from onmt_lite.train.training_run import TrainingRun
from onmt_lite.train.valid_metrics import MetricScorer, check_criteria
from onmt_lite.utils.cuda import configure_cuda
from onmt_lite.utils.errors import UserError
from onmt_lite.utils.logging import logger


def tensorboard_dir(opt):
    """-tensorboard_log_dir, or its run EXP with -exp."""
    return os.path.join(opt.tensorboard_log_dir, opt.exp) if opt.exp else opt.tensorboard_log_dir


def choose_device(opt, dist=None):
    """The process's device: its rank's with several processes, else -gpu_ranks/-gpu or the CPU."""
    if dist is not None:
        device = dist.device
    else:
        gpu = opt.gpu_ranks[0] if opt.gpu_ranks else opt.gpu
        if gpu >= 0 and (not torch.cuda.is_available() or gpu >= torch.cuda.device_count()):
            raise UserError(
                f"CUDA device {gpu} requested (-gpu_ranks/-gpu) but this machine has "
                f"{torch.cuda.device_count() if torch.cuda.is_available() else 'no'} CUDA devices"
            )
        device = torch.device("cuda", gpu) if gpu >= 0 else torch.device("cpu")
        # device-less CUDA calls (the random generator's state) mean this one
        if device.type == "cuda":
            torch.cuda.set_device(device)
    if device.type == "cpu" and opt.model_dtype == "fp16":
        raise UserError(
            "-model_dtype fp16 needs a CUDA device (the CPU's recurrent layers have no float16 "
            "kernels); on the CPU use -model_dtype bf16"
        )
    return device


def check_resume(checkpoint, vocabs, path):
    for side in ("src", "tgt"):
        if checkpoint["vocab"][side] != vocabs[side].to_plain():
            raise UserError(
                f"{path}: its {side} vocabulary ({len(checkpoint['vocab'][side])} words) differs "
                f"from the one of -data ({len(vocabs[side])} words)"
            )
    if checkpoint["vocab"].get("src_feats", []) != vocabs_to_plain(vocabs).get("src_feats", []):
        raise UserError(f"{path}: its source word feature vocabularies differ from those of -data")


def plain_options(opt):
    return {k: v for k, v in vars(opt).items() if k not in ("config", "save_config")}


def restore_optimizer(optim, checkpoint, reset_optim):
    if reset_optim == "all" or "optim" not in checkpoint:
        return
    optim.load_state_dict(
        checkpoint["optim"], moments=reset_optim in ("none", "keep_states"), schedule=True
    )


def check_options(opt, warn: bool = True, validation: bool = True, features: bool = True):
    """Errors for options that contradict each other, and with ``warn`` a warning for each that
    the others (or data without ``validation`` or source word ``features``) make idle
    (``idle_options``; not those a resumed run takes from its checkpoint, whose run named them)."""
    check_criteria(opt)
    check_sparse_adam(opt)
    check_schedule(opt.accum_count, opt.accum_steps, "-accum_count", "-accum_steps")
    check_schedule(opt.dropout, opt.dropout_steps, "-dropout", "-dropout_steps")
    check_schedule(opt.attention_dropout, opt.dropout_steps, "-attention_dropout", "-dropout_steps")
    if warn:
        for note in idle_options(opt, checkpoint_options(opt), validation, features):
            logger.warning(note)


def prepare_model(opt, vocabs, checkpoint, device, is_main):
    """``(model, average)``: the model on ``device``, new or with the checkpoint's weights (see
    ``resume_weights``), and the run's MovingAverage with -average_decay, else None. Only the
    process that validates and saves keeps an average: the weights are the same in all processes."""
    model = (
        build_model(opt, vocabs)
        if checkpoint is None
        else model_from_checkpoint(opt, vocabs, checkpoint, opt.train_from)
    )
    model.to(device)
    if opt.use_ckpting:
        count = use_checkpointing(model, opt.use_ckpting)
        logger.info(
            f"-use_ckpting {' '.join(opt.use_ckpting)}: {count} modules recompute their "
            "activations in the backward pass"
        )
    if opt.cuda_graphs:
        problem = graphing_problem(model, opt)
        if problem is not None:
            raise UserError(f"-cuda_graphs is not for a model with {problem}: leave it out")
        if device.type != "cuda":
            raise UserError("-cuda_graphs needs a GPU (-gpu_ranks): graphs are recorded on CUDA")
    if opt.torch_compile:
        count = compile_layers(model)
        logger.info(f"-torch_compile: {count} Transformer layers train compiled")
    average = (
        MovingAverage(model, opt.average_decay, opt.average_every)
        if opt.average_decay > 0 and is_main
        else None
    )
    if checkpoint is not None:
        resume_weights(checkpoint, model, average, opt.train_from)
    return model, average


def resume_weights(checkpoint, model, average, path):
    """After ``model_from_checkpoint`` put the checkpoint's weights (its average, if it kept one)
    into ``model``: ``average`` (a MovingAverage, or None) continues from them, and the model takes
    the raw weights the checkpoint keeps, if any, to train on."""
    raw = checkpoint.get("raw_weights")
    if average is not None:
        average.start()
        logger.info(
            f"-average_decay: the moving average continues from {path}'s weights"
            if raw is not None
            else f"-average_decay: {path} holds no average; the moving average starts afresh from "
            "its weights"
        )
    if raw is not None:
        restore_model(model, raw, path)
        logger.info(
            f"training continues from the raw weights that {path} keeps beside its averaged ones"
        )


def resume(checkpoint, opt, trainer, train_iter, early_stopping):
    """Restore the training state of ``checkpoint`` (optimizer per -reset_optim, data position,
    early stopping, loss scale, random generators); returns its step."""
    step = checkpoint["step"]
    if not all(key in checkpoint for key in ("optim", "data", "trainer", "rng")):
        logger.info(
            f"{opt.train_from} holds weights only (a released or averaged model): continuing from "
            f"step {step} with a new optimizer and the data from its start"
        )
        return step
    restore_optimizer(trainer.optim, checkpoint, opt.reset_optim)
    restore_position(train_iter, checkpoint["data"])
    early_stopping.load_state_dict(checkpoint["trainer"]["early_stopping"])
    trainer.precision.load_state_dict(checkpoint["trainer"].get("precision"))
    set_rng_state(checkpoint["rng"])
    logger.info(f"resuming from {opt.train_from} at step {step} (-reset_optim {opt.reset_optim})")
    return step


def reporting(opt, model, vocabs, record, device, is_main):
    """The run's ``Reporter`` (TensorBoard on the main process with -tensorboard) and its
    ``MetricScorer`` (-valid_metrics, on the main process), or None; logs the model's size."""
    n_params = sum(p.numel() for p in model.parameters())
    logger.info(f"model: {n_params} parameters; training to step {opt.train_steps}")
    board = tensorboard_dir(opt)
    reporter = Reporter(opt.train_steps, board if opt.tensorboard and is_main else None)
    scorer = (
        MetricScorer(model, vocabs, record, opt.valid_metrics, device)
        if opt.valid_metrics and is_main
        else None
    )
    return reporter, scorer


def validation_batches(opt, valid_paths, record):
    """A function that makes a new pass over the validation shards (``BatchIterator``), or None
    without validation data."""
    if not valid_paths:
        return None

    def batches():
        return BatchIterator(
            valid_paths,
            opt.valid_batch_size,
            opt.batch_type,
            opt.pool_factor,
            vocab=record.get("vocab_id"),
            multiple=opt.batch_size_multiple,
        )

    return batches


def train(opt, dist=None):
    """Train as the options say (as one of several processes with ``dist``, a ``Distributed``);
    returns the step reached."""
    # the checkpoint writer's lock on -save_model, released at the end
    with contextlib.ExitStack() as held:
        return _train(opt, dist, held)


def _train(opt, dist, held):
    record, vocabs, corpora, valid_paths = load_data(opt)
    checkpoint = load_checkpoint(opt.train_from) if opt.train_from else None
    if checkpoint is not None:
        check_resume(checkpoint, vocabs, opt.train_from)
    # asked for reproducible results: before a seed is drawn
    seeded = opt.seed > 0 or checkpoint is not None
    is_main = dist is None or dist.is_main  # logs, validates and writes checkpoints
    # the options' warnings: every process would give the same
    opt = resolve_options(opt, checkpoint, record, warn=is_main)
    features = bool(record.get("src_feats"))
    check_options(opt, warn=is_main, validation=bool(valid_paths), features=features)
    device = choose_device(opt, dist)
    if device.type == "cuda":
        logger.info(f"CUDA settings: {configure_cuda(seeded, tf32=opt.model_dtype == 'bf16')}")
    writer = None
    # before any training: a refused -save_model costs no step; -keep_checkpoint 0 writes none
    if is_main and opt.keep_checkpoint != 0:
        writer = CheckpointWriter(
            opt.save_model, opt.keep_checkpoint, opt.overwrite, opt.train_from
        )
        held.enter_context(writer)
    elif is_main:
        logger.info("-keep_checkpoint 0: this run writes no checkpoint (as OpenNMT-py 1.x)")
    torch.manual_seed(opt.seed)
    random.seed(opt.seed)
    processes = f"; {dist.world_size} processes ({torch.distributed.get_backend()})" if dist else ""
    corpora_line = describe_corpora(corpora, opt.data_weights, record)
    logger.info(
        f"seed {opt.seed}; device {device}{processes}; data {opt.data}: {corpora_line}; "
        f"{len(valid_paths)} valid shard(s); vocabulary {len(vocabs['src'])}/{len(vocabs['tgt'])}"
    )
    model, average = prepare_model(opt, vocabs, checkpoint, device, is_main)
    if dist is not None:
        dist.broadcast_parameters(model)
    optim = Optimizer(model, opt, model_dims(opt).dec_rnn)
    optim.log_groups(logger.info)
    trainer = Trainer.from_opt(opt, model, vocabs["tgt"], optim, device, dist)
    train_iter = training_batches(opt, corpora, record, vocabs["src"])
    early_stopping = EarlyStopping(opt.early_stopping, opt.early_stopping_criteria)
    step = (
        resume(checkpoint, opt, trainer, train_iter, early_stopping)
        if checkpoint is not None
        else 0
    )
    if dist is not None and dist.rank > 0:
        torch.manual_seed(opt.seed + dist.rank + step)  # its own dropout masks
    if step >= opt.train_steps:
        logger.info(
            f"nothing to do: the checkpoint is at step {step}, -train_steps is {opt.train_steps}"
        )
        return step

    # after resume: the thread starts from the checkpoint's position
    train_iter = prefetched(train_iter, opt.num_workers, pin=device.type == "cuda")
    reporter, scorer = reporting(opt, model, vocabs, record, device, is_main)
    saver = None
    if writer is not None:
        saver = CheckpointSaver(
            writer,
            model=model,
            vocabs=vocabs,
            options=plain_options(opt),
            optim=optim,
            train_iter=train_iter,
            early_stopping=early_stopping,
            precision=trainer.precision,
            record=record,
            average=average,
        )
    valid_batches = validation_batches(opt, valid_paths, record)
    run = TrainingRun(trainer, opt, reporter, saver, early_stopping, valid_batches, scorer, average)
    last = run.run(train_iter, step)
    if device.type == "cuda":  # bench/gpu_speed.py reads it
        peak = torch.cuda.max_memory_allocated(device) / 2**20
        logger.info(f"peak GPU memory allocated: {peak:.0f} MiB (torch.cuda.max_memory_allocated)")
    return last
