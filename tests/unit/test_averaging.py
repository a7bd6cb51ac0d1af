"""-average_decay and -average_every: OpenNMT-py 1.x's moving average of the weights, checked
against the formula written out here over the weights of a run without averaging, saved after every
step."""

import os

import pytest
import torch
import torch.nn as nn

from onmt_lite.data.iterator import BatchIterator
from onmt_lite.data.shards import shard_paths
from onmt_lite.data.vocab import Vocab
from onmt_lite.loss import build_loss_compute
from onmt_lite.models.checkpoint import load_checkpoint, model_from_checkpoint, model_options
from onmt_lite.train.averaging import MovingAverage
from onmt_lite.train.trainer import Trainer
from onmt_lite.train.valid_metrics import MetricScorer
from onmt_lite.translate.translator import Translator
from onmt_lite.utils.errors import UserError
from tests.helpers import (
    TINY_MODEL,
    lines,
    preprocess_in_process,
    run_in_process,
    step_losses,
    tool,
    train_in_process,
)

STEPS = 7
ARGS = [
    *TINY_MODEL,
    "-optim",
    "adam",
    "-learning_rate",
    0.02,
    "-seed",
    5,
    "-report_every",
    1,
    "-save_checkpoint_steps",
    1,
]
DECAY = 0.1


def reference_average(raw, steps, decay, every, start=None):
    """1.x's rule written out: ``raw[s]`` the parameters after step s; ``start``: the average before
    the first of ``steps`` (None: the first update copies the parameters)."""
    average = None if start is None else {k: v.float() for k, v in start.items()}
    for step in steps:
        if (step - 1) % every:
            continue
        if average is None:
            average = {k: v.float() for k, v in raw[step].items()}
        else:
            w = max(decay, 1 - (step + 1) / (step + 10))
            average = {k: (1 - w) * average[k] + w * raw[step][k].float() for k in average}
    return average


def weights(checkpoint, entry=None):
    """``{"model.X": ..., "generator.Y": ...}`` of a checkpoint (of its ``raw_weights`` with
    entry)."""
    source = checkpoint if entry is None else checkpoint[entry]
    return {f"{part}.{k}": v for part in ("model", "generator") for k, v in source[part].items()}


def assert_weights_equal(got, expected):
    assert got.keys() == expected.keys()
    for key in expected:
        assert torch.equal(got[key], expected[key]), key


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return preprocess_in_process(str(tmp_path_factory.mktemp("avg_data")))


@pytest.fixture(scope="module")
def plain(data, tmp_path_factory):
    """A run without averaging: ``{step: weights after it}`` (and its losses, and its prefix)."""
    prefix = str(tmp_path_factory.mktemp("plain") / "m")
    _, logged = train_in_process(data, prefix, *ARGS, "-train_steps", STEPS, "-valid_steps", 100)
    raw = {
        step: weights(load_checkpoint(f"{prefix}_step_{step}.pt")) for step in range(1, STEPS + 1)
    }
    return {"raw": raw, "losses": step_losses(logged), "prefix": prefix}


@pytest.fixture(scope="module", params=[1, 3])
def averaged(request, data, tmp_path_factory):
    """The same run with -average_decay and -average_every 1 or 3, validated (with chrF) at the
    end."""
    every = request.param
    prefix = str(tmp_path_factory.mktemp(f"avg{every}") / "m")
    _, logged = train_in_process(
        data,
        prefix,
        *ARGS,
        "-train_steps",
        STEPS,
        "-valid_steps",
        STEPS,
        "-valid_metrics",
        "chrF",
        "-average_decay",
        DECAY,
        "-average_every",
        every,
    )
    return {"every": every, "prefix": prefix, "log": logged, "losses": step_losses(logged)}


def test_the_saved_model_is_1x_moving_average_of_the_weights_of_each_step(plain, averaged):
    checkpoint = torch.load(f"{averaged['prefix']}_step_{STEPS}.pt", weights_only=True)
    expected = reference_average(plain["raw"], range(1, STEPS + 1), DECAY, averaged["every"])
    assert_weights_equal(weights(checkpoint), expected)
    # averaging changes nothing of training: the raw weights and the losses are the plain run's
    assert_weights_equal(weights(checkpoint, "raw_weights"), plain["raw"][STEPS])
    assert averaged["losses"] == plain["losses"]
    assert not torch.equal(
        checkpoint["model"]["encoder.rnn.weight_hh_l0"],
        checkpoint["raw_weights"]["model"]["encoder.rnn.weight_hh_l0"],
    )


def validation_of(model_checkpoint, path, data):
    """Validation loss statistics and chrF of ``model_checkpoint``'s model weights, computed
    here."""
    checkpoint = load_checkpoint(path)
    vocabs = {side: Vocab.from_plain(words) for side, words in checkpoint["vocab"].items()}
    opt = model_options(checkpoint["opt"], path)
    model = model_from_checkpoint(opt, vocabs, model_checkpoint, path)
    loss = build_loss_compute(model, vocabs["tgt"], opt, train=False)
    trainer = Trainer(model, loss_compute=loss, valid_loss_compute=loss)

    def batches():
        return BatchIterator(
            shard_paths(data, "valid"), opt.valid_batch_size, opt.batch_type, opt.pool_factor
        )

    _, chrf = MetricScorer(model, vocabs, checkpoint["preprocess"], ["chrF"], "cpu")(batches())
    return trainer.validate(batches()), chrf


def test_validation_runs_with_the_averaged_weights(averaged, data):
    path = f"{averaged['prefix']}_step_{STEPS}.pt"
    checkpoint = load_checkpoint(path)
    logged = next(line for line in averaged["log"] if f"Validation at step {STEPS}:" in line)
    for model_weights, expected in ((checkpoint, True), (checkpoint["raw_weights"], False)):
        stats, chrf = validation_of(model_weights, path, data)
        line = (
            f"perplexity {stats.ppl():.4f}, accuracy {stats.accuracy():.2f}, xent "
            f"{stats.xent():.4f}{chrf}"
        )
        assert (line in logged) == expected, (line, logged)


def test_a_resumed_run_gives_the_losses_and_averages_of_the_uninterrupted_one(
    averaged, data, tmp_path
):
    resumed = str(tmp_path / "resumed")
    _, logged = train_in_process(
        data,
        resumed,
        *ARGS,
        "-train_steps",
        STEPS,
        "-valid_steps",
        100,
        "-average_decay",
        DECAY,
        "-average_every",
        averaged["every"],
        "-train_from",
        f"{averaged['prefix']}_step_4.pt",
    )
    assert step_losses(logged) == {s: averaged["losses"][s] for s in range(5, STEPS + 1)}
    assert any("moving average continues from" in line for line in logged)
    for step in range(5, STEPS + 1):
        got = torch.load(f"{resumed}_step_{step}.pt", weights_only=True)
        full = torch.load(f"{averaged['prefix']}_step_{step}.pt", weights_only=True)
        assert_weights_equal(weights(got), weights(full))
        assert_weights_equal(weights(got, "raw_weights"), weights(full, "raw_weights"))


def test_resuming_without_averaging_trains_on_from_the_raw_weights(averaged, plain, data, tmp_path):
    resumed = str(tmp_path / "off")
    _, logged = train_in_process(
        data,
        resumed,
        *ARGS,
        "-train_steps",
        STEPS,
        "-valid_steps",
        100,
        "-train_from",
        f"{averaged['prefix']}_step_4.pt",
    )
    assert step_losses(logged) == {s: plain["losses"][s] for s in range(5, STEPS + 1)}
    checkpoint = torch.load(f"{resumed}_step_{STEPS}.pt", weights_only=True)
    assert "raw_weights" not in checkpoint
    assert_weights_equal(weights(checkpoint), plain["raw"][STEPS])


def test_an_average_switched_on_at_a_resume_starts_from_the_checkpoints_weights(
    plain, data, tmp_path
):
    resumed = str(tmp_path / "on")
    _, logged = train_in_process(
        data,
        resumed,
        *ARGS,
        "-train_steps",
        STEPS,
        "-valid_steps",
        100,
        "-average_decay",
        DECAY,
        "-train_from",
        f"{plain['prefix']}_step_4.pt",
    )
    assert any("starts afresh from its weights" in line for line in logged)
    assert step_losses(logged) == {s: plain["losses"][s] for s in range(5, STEPS + 1)}
    expected = reference_average(plain["raw"], range(5, STEPS + 1), DECAY, 1, start=plain["raw"][4])
    assert_weights_equal(
        weights(torch.load(f"{resumed}_step_{STEPS}.pt", weights_only=True)), expected
    )


def test_release_and_average_models_drop_the_raw_weights_and_translation_reads_the_average(
    averaged, data, tmp_path
):
    path = f"{averaged['prefix']}_step_{STEPS}.pt"
    checkpoint = load_checkpoint(path)
    released = tool("release_model").release(checkpoint)
    assert "raw_weights" not in released and weights(released).keys() == weights(checkpoint).keys()
    assert "raw_weights" not in tool("average_models").average_checkpoints([path, path])
    raw = {**released, **checkpoint["raw_weights"]}
    for name, content in (("released.pt", released), ("raw.pt", raw)):
        torch.save(content, tmp_path / name)
    sources, targets = (
        lines(os.path.join(os.path.dirname(data), f"{side}-valid.txt"))[:5]
        for side in ("src", "tgt")
    )

    def gold(model_path):
        return [
            r.gold_score
            for r in Translator.load(model_path, beam_size=1).translate(sources, targets)
        ]

    assert gold(path) == gold(tmp_path / "released.pt") != gold(tmp_path / "raw.pt")


@pytest.mark.parametrize(
    "args,message",
    [
        (
            ["-average_decay", "1.5"],
            "argument -average_decay/--average_decay: 1.5 is outside [0, 1]",
        ),
        (
            ["-average_decay", "-0.1"],
            "argument -average_decay/--average_decay: -0.1 is outside [0, 1]",
        ),
        (
            ["-average_every", "0"],
            "argument -average_every/--average_every: 0 is below the minimum 1",
        ),
    ],
)
def test_bad_values_are_refused(data, tmp_path, args, message):
    result = run_in_process("train", "-data", data, "-save_model", tmp_path / "m", *args)
    assert result.returncode == 2 and message in result.stderr.strip().splitlines()[-1], (
        result.stderr
    )


def test_average_every_without_a_decay_is_harmless_and_warned_about(data, plain, tmp_path):
    _, logged = train_in_process(
        data, str(tmp_path / "m"), *ARGS, "-train_steps", 1, "-average_every", 3
    )
    warning = "-average_every 3 has no effect: there is no average without -average_decay above 0"
    assert any(line.endswith(warning) for line in logged)
    assert_weights_equal(
        weights(torch.load(tmp_path / "m_step_1.pt", weights_only=True)), plain["raw"][1]
    )


def test_the_average_is_float32_and_applied_puts_back_the_raw_weights_bit_for_bit():
    model = nn.Linear(3, 2).to(torch.bfloat16)
    average = MovingAverage(model, 0.5, every=2)
    history = []
    for step in range(1, 5):
        with torch.no_grad():
            model.weight.add_(0.37 * step)
        history.append(model.weight.detach().clone())
        average.update(step)
    assert average.average[0].dtype == torch.float32
    # steps 1 and 3 update: w(3) = max(0.5, 1 - 4/13) = 9/13
    w = 1 - 4 / 13
    assert torch.equal(average.average[0], (1 - w) * history[0].float() + w * history[2].float())
    with average.applied():
        assert torch.equal(model.weight, average.average[0].to(torch.bfloat16))
        assert torch.equal(average.state_dict(model)["weight"], model.weight)
    assert torch.equal(model.weight, history[-1])


def test_raw_weights_that_are_not_tensors_are_refused_by_name(averaged, tmp_path):
    checkpoint = torch.load(f"{averaged['prefix']}_step_{STEPS}.pt", weights_only=True)
    checkpoint["raw_weights"]["generator"] = {"0.weight": [1.0, 2.0]}
    torch.save(checkpoint, tmp_path / "bad.pt")
    with pytest.raises(
        UserError,
        match=r"bad.pt: checkpoint's raw_weights generator weights hold entries that are "
        r"not tensors \(0.weight\)",
    ):
        load_checkpoint(str(tmp_path / "bad.pt"))
