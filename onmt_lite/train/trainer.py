"""The training loop: accumulation, truncated BPTT, sharded loss, validation, checkpoints.

One optimizer step takes ``accum_count`` batches. Their loss is divided once by the total number of
sentences (or target tokens) of all of them, so the step equals one batch that many times larger.
With ``truncated_decoder`` K each batch is decoded K target positions at a time: the source is
encoded again for every window (its graph is freed by each window's backward), the decoder state is
carried over and detached, and the loss covers exactly that window's positions.

With several processes (``dist``, see distributed.py) the normaliser is the step's total over all of
them and the gradients are summed over them after the step's last backward pass.

Faults: a NaN or infinite loss or gradient stops training before the step is applied (the weights
and the checkpoints on disk stay good); with fp16 it is an overflow, which skips the step and halves
the loss scale (``precision.py``). With a fused Adam or AdamW and one process the check is read
every few steps, not at each (``step_checks.py``): the device skips the bad step and every one after
it until the read, which names the bad step (an fp16 overflow alone, which the read logs). The
loop around the steps is ``training_run.py``'s.
"""

import math

import torch
import torch.nn as nn

from onmt_lite.data.vocab import PAD_ID
from onmt_lite.loss import LossComputeBase, Statistics, build_loss_compute
from onmt_lite.train.graphed import GraphedModel
from onmt_lite.train.optim import NonFiniteError, Optimizer
from onmt_lite.train.precision import Precision, overflow_at
from onmt_lite.train.step_checks import DeferredChecks
from onmt_lite.utils.errors import UserError
from onmt_lite.utils.logging import logger


def log_overflow(scale: float) -> None:
    """The log line of an fp16 step skipped for an overflow at loss scale ``scale``."""
    logger.info(f"fp16 gradients overflowed at loss scale {scale:g}: step skipped, scale halved")


def normalization(batches, method):
    """The divisor of a step's loss: sentences, or non-padding target tokens, over ``batches``
    (read on the host: call it before the batches move to a device)."""
    if method == "sents":
        return sum(b.batch_size for b in batches)
    return sum(int((b.tgt[1:] != PAD_ID).sum()) for b in batches)


def check_schedule(values, steps, name, steps_name):
    """Option ``name``'s values and ``steps_name`` must make a schedule: a step per value (or one
    value for all), from 0, increasing."""
    if len(values) not in (1, len(steps)) or (name == "-accum_count" and len(values) != len(steps)):
        raise UserError(
            f"{name} has {len(values)} value(s) but {steps_name} {len(steps)}: give a step for "
            "each value"
        )
    if steps[0] != 0 or any(a >= b for a, b in zip(steps, steps[1:])):
        raise UserError(f"{steps_name} {' '.join(map(str, steps))}: must start at 0 and increase")


def scheduled(step, values, steps):
    """The value of a schedule for step number ``step`` (from 1): that of the last entry of
    ``steps`` that ``step`` is past (OpenNMT-py 1.x's rule for -accum_count and -dropout); one
    value: always it."""
    value = values[0]
    for candidate, start in zip(values, steps):
        if step > start:
            value = candidate
    return value


class Trainer:
    """Runs training steps for a model.

    Args:
        model: the NMTModel. loss_compute / valid_loss_compute: LossComputeBase objects (training's
        and validation's: no label smoothing). optim: an ``Optimizer``. device: where batches go.
        shard_size (``max_generator_batches``), trunc_size (``truncated_decoder``), norm_method
        ("sents" or "tokens"): as the options of the same names (``train_step`` takes a step's
        batches, as many as -accum_count says).
        precision: a ``Precision`` (``-model_dtype``); float32 by default.
        dist: a ``Distributed`` when training with several processes, else None.
        cuda_graphs: encode and decode through a ``GraphedModel`` (``-cuda_graphs``; off CUDA the
            same padded calls without graphs).
    """

    def __init__(
        self,
        model: nn.Module,
        *,
        loss_compute: LossComputeBase,
        valid_loss_compute: LossComputeBase = None,
        optim: Optimizer = None,
        device="cpu",
        shard_size: int = 0,
        trunc_size: int = 0,
        norm_method: str = "sents",
        precision: Precision = None,
        dist=None,
        cuda_graphs: bool = False,
    ):
        self.model = model
        self.loss_compute = loss_compute
        self.valid_loss_compute = valid_loss_compute
        self.optim, self.device = optim, torch.device(device)
        self.shard_size = shard_size
        self.trunc_size = trunc_size
        self.norm_method = norm_method
        self.precision = precision or Precision("fp32", self.device)
        self.dist = dist
        self.graphed = GraphedModel(model) if cuda_graphs else None
        # each step read before its update where the device cannot skip one, or where other
        # processes read it anyway (their sums)
        deferred = optim is not None and optim.can_skip_on_device and dist is None
        self.checks = DeferredChecks(self.device) if deferred else None

    @classmethod
    def from_opt(
        cls, opt, model: nn.Module, tgt_vocab, optim: Optimizer, device, dist=None
    ) -> "Trainer":
        """The Trainer of ``onmt_lite_train``'s options: its loss computes (``-loss_class``, copy or
        NLL), accumulation, sharding, truncation, normalisation and precision."""
        return cls(
            model,
            loss_compute=build_loss_compute(model, tgt_vocab, opt),
            valid_loss_compute=build_loss_compute(model, tgt_vocab, opt, train=False),
            optim=optim,
            device=device,
            shard_size=opt.max_generator_batches,
            trunc_size=opt.truncated_decoder,
            norm_method=opt.normalization,
            precision=Precision(opt.model_dtype, device),
            dist=dist,
            cuda_graphs=opt.cuda_graphs,
        )

    def forward_backward(self, batch, norm):
        """Loss and gradients of one batch (window by window with truncation); returns
        Statistics."""
        stats = Statistics(n_src_words=int(batch.src_lengths_cpu.sum()))
        n_positions = batch.tgt.size(0) - 1
        window = self.trunc_size or n_positions
        state = None
        model = self.model if self.graphed is None else self.graphed
        for start in range(0, n_positions, window):
            with self.precision.autocast():
                # the host's lengths: an RNN encoder packs with them without reading the device
                memory_bank, lengths, first_state = model.encode(
                    batch.src, batch.src_lengths_cpu, batch.src_feats
                )
                tgt_in = batch.tgt[start : min(start + window, n_positions)]
                dec_out, attns, state = model.decode(
                    tgt_in,
                    memory_bank,
                    lengths,
                    first_state if state is None else state,
                    need_alignment=self.loss_compute.needs_alignment,
                )
                loss, window_stats = self.loss_compute(
                    batch, dec_out, attns, norm, self.shard_size, start, tgt_in.size(0)
                )
            if loss is not None:
                loss.backward()
            stats.update(window_stats)
            state = None if state is None else state.detach()  # None: graphed, one window
        return stats

    def train_step(self, batches):
        """One optimizer step over ``batches`` (a list of ``accum_count`` batches; this process's
        share of the step with several processes). Returns the step's Statistics (of all
        processes)."""
        if not self.model.training:  # a walk over every module: not at each step
            self.model.train()
        norm = normalization(batches, self.norm_method)  # on the CPU: no wait for the device
        batches = [b.to(self.device) for b in batches]
        if self.dist is not None:
            norm = self.dist.sum([norm])[0]
        self.optim.zero_grad()
        stats = Statistics()
        # the loss scale (fp16) multiplies every loss through the normalisation
        for batch in batches:
            stats.update(self.forward_backward(batch, self.precision.normalization(norm)))
        if self.dist is not None:
            self.dist.sum_gradients(self.optim.params)
            self.dist.sum_statistics(stats)
        total_norm = self.optim.gradient_norm()
        scale = self.precision.scale  # fp16's, else None
        if self.checks is not None:  # read by check_steps()
            skip, finite = self.checks.add(stats.device_loss(self.device), total_norm, scale)
            self.optim.step(1.0 if scale is None else scale, total_norm=total_norm, skip=skip)
            self.precision.update(finite)
            if self.checks.full:
                self.check_steps()
            return stats
        self._step_read_now(stats, total_norm, scale)
        return stats

    def _step_read_now(self, stats: Statistics, total_norm: torch.Tensor, scale) -> None:
        """The optimizer step after one host read of its statistics, gradient norm and loss scale
        (``scale``: fp16's, else None): NonFiniteError before the update if a loss or gradient is
        not finite (with fp16 an overflow instead: the step skipped, the scale lowered)."""
        extra = [total_norm] if scale is None else [total_norm, scale]
        norm, *scale_read = stats.settle(*extra)  # the step's one host read
        scale_value = scale_read[0] if scale_read else 1.0
        try:
            if not math.isfinite(stats.loss):
                raise NonFiniteError(f"the loss is {stats.loss}")
            self.optim.step(scale_value, total_norm, norm)
        except NonFiniteError:
            if scale is None or not overflow_at(scale_value):
                raise
            self.optim.skip_step()
            self.precision.update(False)
            log_overflow(scale_value)
            return
        self.precision.update(True)

    def check_steps(self) -> None:
        """Read the steps not yet checked (``DeferredChecks``; one host read): the fp16 overflows
        logged; NonFiniteError for the first step that stopped training, the schedule taken back
        to before it (the device skipped it and every step after it: the weights and moments are
        those before it)."""
        if self.checks is None:
            return
        try:
            overflows = self.checks.read()
        except NonFiniteError as err:
            self.optim.undo_steps(err.later + 1)
            raise
        for scale in overflows:
            log_overflow(scale)

    def validate(self, batches):
        """Statistics of the model on ``batches`` (eval mode, no gradients, no label smoothing)."""
        self.model.eval()
        stats = Statistics()
        with torch.no_grad(), self.precision.autocast():
            for batch in batches:
                batch = batch.to(self.device)
                dec_out, attns = self.model(
                    batch.src, batch.tgt, batch.src_lengths_cpu, batch.src_feats
                )
                _, batch_stats = self.valid_loss_compute(batch, dec_out, attns)
                stats.update(batch_stats)
        self.model.train()
        return stats
