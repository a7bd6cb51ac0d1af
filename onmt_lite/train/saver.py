"""CheckpointSaver: the one place a training run writes its checkpoints from.

What goes into a checkpoint is ``models.checkpoint.build_checkpoint``'s layout; where it goes (the
lock on ``-save_model``, atomic writes, ``-keep_checkpoint`` rotation) is ``CheckpointWriter``'s.
The saver joins them: it holds the objects whose state a checkpoint records and reads them at the
moment of each save, so the training loop calls ``saver.save(step)`` and nothing more.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from onmt_lite.models.checkpoint import build_checkpoint
from onmt_lite.models.checkpoint_files import CheckpointWriter
from onmt_lite.utils.logging import logger


class CheckpointSaver:
    """Writes ``PREFIX_step_N.pt`` (``save``) and ``PREFIX_best.pt`` (``save_best``) of a run.

    Args:
        writer: the run's ``CheckpointWriter``, made (and locked) before training starts; it keeps
            the newest ``-keep_checkpoint`` step checkpoints on disk.
        model: the model trained (its generator included).
        vocabs: ``{"src": Vocab, "tgt": Vocab, ...}``, saved as plain word lists.
        options: the run's options as a plain dict (``-config`` and ``-save_config`` left out).
        optim: the ``Optimizer`` (its ``state_dict()``: settings, moments, schedule position).
        train_iter: the training batches (``state_dict()``: the position in the data).
        early_stopping: ``EarlyStopping`` (its counts and best scores).
        precision: the trainer's ``Precision`` (the fp16 loss scale).
        record: the preprocessing record (how the text was tokenized), or None.
        average: a ``MovingAverage`` (``-average_decay``), or None: with one, a checkpoint's
            weights are the average's and the raw weights are kept beside them.
    """

    def __init__(
        self,
        writer: CheckpointWriter,
        *,
        model: nn.Module,
        vocabs: dict,
        options: dict,
        optim: Any,
        train_iter: Any,
        early_stopping: Any,
        precision: Any,
        record: dict | None = None,
        average: Any = None,
    ):
        self.writer = writer
        self.model = model
        self.vocabs = vocabs
        self.options = options
        self.optim = optim
        self.train_iter = train_iter
        self.early_stopping = early_stopping
        self.precision = precision
        self.record = record
        self.average = average

    def checkpoint(self, step: int) -> dict:
        """The checkpoint of the run as it stands after ``step`` steps (plain data and CPU
        tensors)."""
        trainer_state = {
            "early_stopping": self.early_stopping.state_dict(),
            "precision": self.precision.state_dict(),
        }
        averaged = self.average.state_dict(self.model) if self.average is not None else None
        return build_checkpoint(
            self.model,
            self.vocabs,
            self.options,
            step,
            self.optim.state_dict(),
            self.train_iter.state_dict(),
            trainer_state,
            self.record,
            averaged=averaged,
        )

    def save(self, step: int) -> str:
        """Write ``PREFIX_step_<step>.pt``, drop what ``-keep_checkpoint`` no longer keeps, log the
        path and return it."""
        path = self.writer.save(self.checkpoint(step))
        logger.info(f"saved {path}")
        return path

    def save_best(self, step: int) -> str:
        """Write ``PREFIX_best.pt`` (the checkpoint after ``step``, the best validation so far)."""
        return self.writer.save_best(self.checkpoint(step))

    def last_path(self) -> str | None:
        """The newest step checkpoint this run wrote (and rotation kept), or None."""
        return self.writer.last_path()
