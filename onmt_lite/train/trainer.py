"""The training loop: accumulation, truncated BPTT, sharded loss, validation, checkpoints.

One optimizer step takes ``accum_count`` batches. Their loss is divided once by the total number of
sentences (or target tokens) of all of them, so the step equals one batch that many times larger.
With ``truncated_decoder`` K each batch is decoded K target positions at a time: the source is
encoded again for every window (its graph is freed by each window's backward), the decoder state is
carried over and detached, and the loss covers exactly that window's positions.

With several processes (``dist``, see distributed.py) the normaliser is the step's total over all of
them and the gradients are summed over them after the step's last backward pass.

Faults: a NaN or infinite loss or gradient stops training before the step is applied (the weights
and the checkpoints on disk stay good). With a fused Adam or AdamW, float32 or bf16 and one process,
the check is read every few steps, not at each (``step_checks.py``): the device skips the bad step
and every one after it until the read, which names the bad step. SIGINT or SIGTERM ends the current
step, saves a checkpoint and exits with 128 + the signal number; a second signal stops at once.
"""

import contextlib
import math
import signal
import threading

import torch
import torch.nn as nn

from onmt_lite.data.vocab import PAD_ID
from onmt_lite.loss import LossComputeBase, Statistics, build_loss_compute
from onmt_lite.models.builder import set_dropout
from onmt_lite.train.averaging import averaged
from onmt_lite.train.distributed import step_share
from onmt_lite.train.graphed import GraphedModel
from onmt_lite.train.optim import NonFiniteError, Optimizer
from onmt_lite.train.precision import Precision
from onmt_lite.train.step_checks import DeferredChecks
from onmt_lite.utils.errors import Stopped, UserError
from onmt_lite.utils.logging import logger


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
        # each step read before its update where the device cannot skip one, or other processes
        # read it anyway (their sums); fp16 too, which must know of an overflow at once (its scale)
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
            stats.update(self.forward_backward(batch, norm / self.precision.scale))
        if self.dist is not None:
            self.dist.sum_gradients(self.optim.params)
            self.dist.sum_statistics(stats)
        total_norm = self.optim.gradient_norm()
        if self.checks is not None and not self.precision.scaled:  # read by check_steps()
            skip = self.checks.add(stats.device_loss(self.device), total_norm)
            self.optim.step(total_norm=total_norm, skip=skip)
            if self.checks.full:
                self.check_steps()
            return stats
        (norm,) = stats.settle(total_norm)  # the step's one host read: statistics and gradient norm
        # with fp16, a non-finite loss or gradient is an overflow: skip the step, lower the scale
        try:
            if not math.isfinite(stats.loss):
                raise NonFiniteError(f"the loss is {stats.loss}")
            self.optim.step(self.precision.scale, total_norm, norm)
        except NonFiniteError:
            if not self.precision.can_skip_overflow:
                raise
            self.precision.update(overflow=True)
            logger.info(
                f"fp16 gradients overflowed: step skipped, loss scale now {self.precision.scale:g}"
            )
            return stats
        self.precision.update(overflow=False)
        return stats

    def check_steps(self) -> None:
        """Read the steps not yet checked (``DeferredChecks``; one host read): NonFiniteError for
        the first that was not finite, the schedule taken back to before it (the device skipped it
        and every step after it: the weights and moments are those before it)."""
        if self.checks is None:
            return
        try:
            self.checks.read()
        except NonFiniteError as err:
            self.optim.undo_steps(err.later + 1)
            raise

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


class TrainingRun:
    """The loop around a Trainer: steps, reports, validation, early stopping, checkpoints; with
    ``average`` (a MovingAverage), its update after each step and validation with its weights.
    ``saver`` (a ``CheckpointSaver``; None in the processes that write none) is told the step to
    save at; what it writes is its own business."""

    def __init__(
        self,
        trainer,
        opt,
        reporter,
        saver,
        early_stopping,
        valid_batches=None,
        metric_scorer=None,
        average=None,
    ):
        self.trainer = trainer
        self.opt = opt
        self.reporter = reporter
        self.saver = saver
        self.early_stopping = early_stopping
        self.valid_batches = valid_batches
        self.metric_scorer = metric_scorer
        self.average = average
        self.dist = trainer.dist
        self.is_main = self.dist is None or self.dist.is_main  # logs, validates, writes checkpoints
        self.dropout_rates = None  # those the model holds once a step has set them

    def run(self, train_iter, step):
        """Train from ``step`` (the steps already done) to ``opt.train_steps``; returns the last
        step."""
        with _StopSignals() as signals:
            return self._run(train_iter, step, signals)

    def _run(self, train_iter, step, signals):
        opt = self.opt
        batches = iter(train_iter)
        report_stats = Statistics()
        saved = step
        while step < opt.train_steps:
            lr = self.trainer.optim.learning_rate()
            self._schedule_dropout(step + 1)
            share = step_share(
                batches, scheduled(step + 1, opt.accum_count, opt.accum_steps), self.dist
            )
            if share is None:  # -single_pass or -epochs: the data has ended
                self._end_of_pass(step, saved)
                break
            with self._non_finite_stops(step + 1):
                stats = self.trainer.train_step(share)
            step += 1
            if self.average is not None:
                self.average.update(step)
            report_stats.update(stats)
            reporting = step % opt.report_every == 0
            validating = self.valid_batches is not None and step % opt.valid_steps == 0
            if reporting or validating:
                self._check_steps(step)
            if reporting:
                if self.is_main:
                    self.reporter.training(step, report_stats, lr)
                report_stats = Statistics()
            if validating:
                # nothing is validated or saved from weights out of float range
                self._check_weights(step)
            stop = validating and self.validate(step)
            received = (
                signals.received if self.dist is None else int(self.dist.max(signals.received))
            )
            save = (
                step % opt.save_checkpoint_steps == 0 or step == opt.train_steps or stop or received
            )
            if save:
                self._check_steps(step)
            if save and not validating:
                self._check_weights(step)
            if save and self.is_main:
                self.saver.save(step)
            saved = step if save else saved
            if received:
                name = signal.Signals(received).name
                raise Stopped(
                    f"stopped by {name} at step {step}; resume with -train_from "
                    f"{self._last_checkpoint()}",
                    128 + received,
                )
            if stop:
                logger.info(
                    f"early stopping at step {step}: no improvement in {opt.early_stopping} "
                    "validations"
                )
                break
        return step

    def _check_steps(self, step):
        """The steps up to ``step`` were finite (read once if some were not checked yet), or
        training stops here (what a report, a validation and a checkpoint rely on)."""
        with self._non_finite_stops(step):
            self.trainer.check_steps()

    @contextlib.contextmanager
    def _non_finite_stops(self, step):
        """A NonFiniteError of a check at ``step`` (the step just taken, or steps taken before it
        and read only now) as the UserError that stops training."""
        try:
            yield
        except NonFiniteError as err:
            last = self._last_checkpoint() or self.opt.train_from or "none was written"
            skipped = f" or the {err.later} after it" if err.later else ""
            raise UserError(
                f"step {step - err.later}: {err}; training stopped without applying this step"
                f"{skipped} (last good checkpoint: {last})"
            ) from None

    def _schedule_dropout(self, step):
        """Set the dropouts of step number ``step`` (-dropout, -attention_dropout,
        -dropout_steps)."""
        opt = self.opt
        rates = (
            scheduled(step, opt.dropout, opt.dropout_steps),
            scheduled(step, opt.attention_dropout, opt.dropout_steps),
        )
        if rates != self.dropout_rates:
            if self.dropout_rates is not None and self.is_main:
                logger.info(
                    f"dropout {rates[0]:g}, attention dropout {rates[1]:g} from step {step}"
                )
            set_dropout(self.trainer.model, *rates)
            self.dropout_rates = rates

    def _end_of_pass(self, step, saved):
        """-single_pass or -epochs: the training data has ended at ``step``: save it unless just
        saved."""
        if self.is_main:
            passes = self.opt.epochs if not self.opt.single_pass else 1
            logger.info(
                f"{passes} pass(es) over the training data end at step {step} (-single_pass, "
                "-epochs)"
            )
            if saved != step:
                self._check_steps(step)
                self._check_weights(step)
                self.saver.save(step)

    def _check_weights(self, step):
        """A UserError if a weight is NaN or infinite (a learning rate or an update out of float
        range): the checkpoints on disk stay the last good ones."""
        named = list(self.trainer.model.named_parameters())
        # one read of the device below
        finite = torch.stack([torch.isfinite(p).all() for _, p in named])
        if not finite.all():
            bad = [name for (name, _), ok in zip(named, finite.tolist()) if not ok]
            last = self._last_checkpoint() or self.opt.train_from or "none was written"
            raise UserError(
                f"step {step}: {len(bad)} weight tensor(s) hold NaN or infinite values "
                f"({', '.join(bad[:3])}); training stopped without saving them (last good "
                f"checkpoint: {last})"
            )

    def _last_checkpoint(self):
        return self.saver.last_path() if self.saver is not None else None

    def validate(self, step):
        """Validate (rank 0, with the average's weights if there is one), update early stopping, the
        plateau schedule (every rank) and the best checkpoint; returns True to stop."""
        improved = stop = False
        if self.is_main:
            # the raw weights are back for the checkpoint and the next step
            with averaged(self.average):
                stats = self.trainer.validate(self.valid_batches())
                scores = {"ppl": stats.ppl(), "accuracy": stats.accuracy()}
                extra = ""
                if self.metric_scorer is not None:
                    metric_scores, extra = self.metric_scorer(self.valid_batches())
                    scores.update(metric_scores)
            improved = self.early_stopping.update(scores)
            self.reporter.validation(step, stats, extra)
            if improved:
                self.saver.save_best(step)
            stop = self.early_stopping.should_stop()
        if self.dist is not None:
            improved, stop = (bool(x) for x in self.dist.broadcast([improved, stop]))
        self.trainer.optim.schedule.validated(improved)
        return stop


class _StopSignals(contextlib.AbstractContextManager):
    """While active, SIGINT and SIGTERM set ``received`` (the signal number) instead of killing the
    process, so that the loop can save a checkpoint first; a second signal raises KeyboardInterrupt.
    Outside the main thread (where handlers cannot be set) it does nothing."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self):
        self.received = 0
        self._previous = {}

    def _handle(self, signum, frame):
        if self.received:
            raise KeyboardInterrupt
        self.received = signum

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, self._handle) for s in self.SIGNALS}
        return self

    def __exit__(self, *exc):
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        return False
