"""The loop around a Trainer's steps: reports, validation, early stopping, checkpoints, signals.

A NaN or infinite loss or gradient stops training with an error naming the step (read at the step,
or at the next report, validation or checkpoint: ``step_checks.py``), and no checkpoint holds what
came after it. SIGINT or SIGTERM ends the current step, saves a checkpoint and exits with 128 + the
signal number; a second signal stops at once.
"""

import contextlib
import signal
import threading

import torch

from onmt_lite.loss import Statistics
from onmt_lite.models.builder import set_dropout
from onmt_lite.train.averaging import averaged
from onmt_lite.train.distributed import step_share
from onmt_lite.train.optim import NonFiniteError
from onmt_lite.train.trainer import scheduled
from onmt_lite.utils.errors import Stopped, UserError
from onmt_lite.utils.logging import logger


class TrainingRun:
    """The loop around a Trainer: steps, reports, validation, early stopping, checkpoints; with
    ``average`` (a MovingAverage), its update after each step and validation with its weights.
    ``saver`` (a ``CheckpointSaver``; None in the processes that write none, and with
    -keep_checkpoint 0) is told the step to save at; what it writes is its own business."""

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
            if save and self.saver is not None:
                self.saver.save(step)
            saved = step if save else saved
            if received:
                name = signal.Signals(received).name
                last = self._last_checkpoint()
                resume = (
                    f"resume with -train_from {last}"
                    if last
                    else "no checkpoint is written (-keep_checkpoint 0)"
                )
                raise Stopped(f"stopped by {name} at step {step}; {resume}", 128 + received)
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
                if self.saver is not None:
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
            if improved and self.saver is not None:
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
