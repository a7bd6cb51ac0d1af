"""train/saver.py: ``CheckpointSaver.save(step)`` writes what the run holds at that moment, keeps
the newest ``-keep_checkpoint`` step checkpoints and writes ``PREFIX_best.pt`` on ``save_best``."""

import torch

from onmt_lite.models.checkpoint import load_checkpoint
from onmt_lite.models.checkpoint_files import (
    CheckpointWriter,
    best_path,
    checkpoint_path,
    saved_checkpoints,
)
from onmt_lite.train.averaging import MovingAverage
from onmt_lite.train.early_stopping import EarlyStopping
from onmt_lite.train.optim import Optimizer
from onmt_lite.train.precision import Precision
from onmt_lite.train.saver import CheckpointSaver
from tests.model_helpers import VOCABS, make_model


class Position:
    """A stand-in for the training iterator: its position is the batch count."""

    def __init__(self):
        self.batch = 0

    def state_dict(self):
        return {"epoch": 0, "shard": 0, "batch": self.batch}


def make_saver(tmp_path, keep=-1, average=False):
    model, opt = make_model()
    early_stopping = EarlyStopping(2, ["ppl"])
    moving = MovingAverage(model, 0.5) if average else None
    writer = CheckpointWriter(str(tmp_path / "m"), keep=keep)
    saver = CheckpointSaver(
        writer,
        model=model,
        vocabs=VOCABS,
        options=vars(opt),
        optim=Optimizer(model, opt, opt.rnn_size),
        train_iter=Position(),
        early_stopping=early_stopping,
        precision=Precision("fp32"),
        record={"lower": True},
        average=moving,
    )
    return saver, writer


def first_weight(checkpoint):
    return next(iter(checkpoint["model"].values()))


def test_each_save_records_the_run_as_it_is_then_and_rotation_keeps_the_newest(tmp_path):
    saver, writer = make_saver(tmp_path, keep=2)
    with writer:
        first = saver.save(3)
        before = first_weight(load_checkpoint(first)).clone()
        with torch.no_grad():
            next(saver.model.parameters()).add_(1.0)
        saver.train_iter.batch = 5
        saver.early_stopping.update({"ppl": 9.0})
        assert saver.save(5) == checkpoint_path(str(tmp_path / "m"), 5)
        later = load_checkpoint(checkpoint_path(str(tmp_path / "m"), 5))
        assert torch.equal(first_weight(later), before + 1.0)
        assert torch.equal(first_weight(load_checkpoint(first)), before)  # step 3's file unchanged
        assert later["step"] == 5 and later["data"]["batch"] == 5
        assert later["trainer"]["early_stopping"]["best"] == {"ppl": 9.0}
        assert later["preprocess"]["lower"] is True and later["vocab"]["tgt"] == VOCABS["tgt"].itos
        saver.save(7)
        assert sorted(saved_checkpoints(str(tmp_path / "m"))) == [5, 7]
        assert saver.last_path() == checkpoint_path(str(tmp_path / "m"), 7)
        best = saver.save_best(5)
        assert best == best_path(str(tmp_path / "m")) and load_checkpoint(best)["step"] == 5
        assert sorted(saved_checkpoints(str(tmp_path / "m"))) == [5, 7]  # best is not rotated


def test_with_a_moving_average_the_checkpoint_holds_it_and_the_raw_weights_beside(tmp_path):
    saver, writer = make_saver(tmp_path, average=True)
    with writer:
        saver.average.update(1)  # the average starts as a copy of the weights
        with torch.no_grad():
            next(saver.model.parameters()).add_(2.0)
        checkpoint = load_checkpoint(saver.save(1))
    raw = first_weight(checkpoint["raw_weights"])
    assert torch.equal(raw, next(saver.model.parameters()).detach())
    assert torch.equal(first_weight(checkpoint), raw - 2.0)
