"""-loss_class: loading a researcher's LossComputeBase subclass; the example in examples/ and
docs/research.md (focal loss) against independent references, sharded and unsharded."""

import os
import re

import pytest
import torch

from onmt_lite.loss import NMTCriterion, NMTLossCompute, build_loss_compute, load_loss_class
from onmt_lite.utils.errors import UserError
from tests.helpers import REPO, TINY_MODEL, preprocess_in_process, train_in_process
from tests.model_helpers import (
    TGT_VOCAB,
    assert_grads_equal,
    grads,
    make_batch,
    make_model,
    random_pairs,
)

EXAMPLE = os.path.join(REPO, "examples", "focal_loss.py")
SPEC = f"{EXAMPLE}:FocalLossCompute"


def loss_and_grads(loss_compute, model, batch, shard_size):
    model.zero_grad()
    dec_out, attns = model(batch.src, batch.tgt, batch.src_lengths)
    loss, stats = loss_compute(batch, dec_out, attns, normalization=4, shard_size=shard_size)
    if loss is not None:
        loss.backward()
    return stats, grads(model)


def focal(model, gamma, opt):
    opt.loss_class = SPEC
    opt.focal_gamma = gamma
    return build_loss_compute(model, TGT_VOCAB, opt)


@pytest.mark.parametrize("shard_size", [1, 3])
def test_the_example_focal_loss_gives_the_same_gradients_sharded_as_unsharded(shard_size):
    model, opt = make_model(seed=2)
    batch = make_batch(random_pairs(5, seed=3))
    stats_full, grads_full = loss_and_grads(focal(model, 2.0, opt), model, batch, 0)
    stats_sharded, grads_sharded = loss_and_grads(focal(model, 2.0, opt), model, batch, shard_size)
    assert stats_full == stats_sharded
    assert_grads_equal(grads_full, grads_sharded, rtol=1e-9)


def test_focal_loss_by_hand_and_with_gamma_0_it_is_the_nll():
    model, opt = make_model(seed=4)
    batch = make_batch(random_pairs(3, seed=5))
    dec_out, attns = model(batch.src, batch.tgt, batch.src_lengths)
    nll, nll_stats = NMTLossCompute(NMTCriterion(0.0), model.generator)(batch, dec_out, attns)
    loss0, stats0 = focal(model, 0.0, opt)(batch, dec_out, attns)
    torch.testing.assert_close(loss0, nll)
    assert stats0 == nll_stats
    log_probs = model.generator(dec_out.reshape(-1, dec_out.size(2)))
    gold = batch.tgt[1:].reshape(-1)
    p = log_probs.gather(1, gold[:, None]).squeeze(1).exp()[gold != 1]
    loss2, _ = focal(model, 2.0, opt)(batch, dec_out, attns)
    torch.testing.assert_close(loss2, -((1 - p) ** 2 * p.log()).sum())


def test_the_example_trains_one_step_from_the_command_line_options(tmp_path):
    data = preprocess_in_process(str(tmp_path))
    weights = {}
    for name, extra in (("focal", ["-loss_class", SPEC]), ("nll", [])):
        _, lines = train_in_process(
            data,
            str(tmp_path / name),
            *TINY_MODEL,
            "-train_steps",
            1,
            "-seed",
            3,
            "-report_every",
            1,
            "-valid_steps",
            1,
            *extra,
        )
        assert any("Step 1/1" in line for line in lines) and any(
            "Validation at step 1" in line for line in lines
        )
        weights[name] = torch.load(tmp_path / f"{name}_step_1.pt", weights_only=True)["generator"][
            "0.weight"
        ]
    # the plug-in, not the default, was trained
    assert not torch.equal(weights["focal"], weights["nll"])


def test_the_walkthrough_shows_exactly_the_example_file():
    with open(os.path.join(REPO, "docs", "research.md"), encoding="utf-8") as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
    with open(EXAMPLE, encoding="utf-8") as f:
        assert f.read() in blocks
    assert len(open(EXAMPLE).read().splitlines()) < 40


@pytest.mark.parametrize(
    "spec,message",
    [
        ("focal", "expected MODULE:CLASS or FILE.py:CLASS"),
        ("missing/file.py:Loss", "missing/file.py not found"),
        ("no_such_module_xyz:Loss", "cannot import no_such_module_xyz"),
        ("onmt_lite.loss:shards", "has no LossComputeBase subclass named shards"),
        (f"{EXAMPLE}:Nothing", "has no LossComputeBase subclass named Nothing"),
    ],
)
def test_bad_loss_class_specs_are_refused(spec, message):
    with pytest.raises(UserError, match=re.escape(message)):
        load_loss_class(spec)


def test_a_copy_model_needs_a_copy_aware_loss_class():
    model, opt = make_model("-copy_attn", "-loss_class", SPEC)
    with pytest.raises(
        UserError, match="copy-attention model needs a loss built on CopyGeneratorLossCompute"
    ):
        build_loss_compute(model, TGT_VOCAB, opt)
    model, opt = make_model("-copy_attn", "-loss_class", "onmt_lite.loss:CopyGeneratorLossCompute")
    assert type(build_loss_compute(model, TGT_VOCAB, opt)).__name__ == "CopyGeneratorLossCompute"


def test_the_example_takes_its_default_gamma_where_the_options_lack_it():
    model, opt = make_model("-loss_class", SPEC)
    assert not hasattr(opt, "focal_gamma")  # a library caller's options
    assert build_loss_compute(model, TGT_VOCAB, opt).gamma == 2.0


def train_help(capsys, *args):
    from onmt_lite.bin.train import main

    with pytest.raises(SystemExit) as stopped:
        main([*args, "-h"])
    assert stopped.value.code == 0
    return capsys.readouterr().out


def test_help_shows_the_options_of_the_loss_class_it_names(capsys, tmp_path):
    assert "-focal_gamma" in train_help(capsys, "-loss_class", SPEC)
    assert "-focal_gamma" not in train_help(capsys)
    config = tmp_path / "focal.yaml"
    config.write_text(f"loss_class: {SPEC}\n")
    assert "-focal_gamma" in train_help(capsys, "-config", str(config))  # named in a -config file


@pytest.mark.parametrize(
    "args,message",
    [
        (["-focal_gamma", "1"], "unrecognized arguments: -focal_gamma 1"),  # no class declares it
        (["-loss_class", SPEC, "-focal_gamma", "-1"], r"-focal_gamma.*-1.0 is outside \[0, 100\]"),
        (["-loss_class", SPEC, "-focal_gamma", "x"], r"-focal_gamma.*'x' is not a number"),
    ],
)
def test_a_loss_class_option_is_checked_like_the_commands_own(tmp_path, capsys, args, message):
    from tests.helpers import invoke

    command = ["-data", tmp_path / "none", "-save_model", tmp_path / "m", *args]
    code, lines = invoke("train", command, capsys)
    assert code == 2
    assert re.search(message, lines[-1]), lines
    assert len(lines) <= 2  # usage and one error line


def focal_run(data, path, *args):
    """The logged losses of a short focal-loss training and the options its checkpoint saved."""
    steps = 6 if "-train_from" not in args else 8
    _, lines = train_in_process(
        data,
        path,
        "-loss_class",
        SPEC,
        *TINY_MODEL,
        "-train_steps",
        steps,
        "-seed",
        3,
        "-report_every",
        1,
        "-valid_steps",
        100,
        "-save_checkpoint_steps",
        6,
        *args,
    )
    losses = [line.split("xent:")[1].split(";")[0] for line in lines if "xent:" in line]
    saved = torch.load(f"{path}_step_{steps}.pt", weights_only=True)["opt"]
    return losses, saved


def test_two_gammas_train_to_different_losses_and_the_value_survives_train_from(tmp_path):
    data = preprocess_in_process(str(tmp_path))
    none_losses, _ = focal_run(data, str(tmp_path / "g0"), "-focal_gamma", 0)
    half_losses, saved = focal_run(data, str(tmp_path / "g05"), "-focal_gamma", 0.5)
    assert none_losses[0] == half_losses[0]  # the same first step: the same model and batch
    assert none_losses != half_losses
    assert saved["focal_gamma"] == 0.5
    resumed_losses, resumed = focal_run(
        data, str(tmp_path / "g05"), "-train_from", str(tmp_path / "g05_step_6.pt")
    )
    assert resumed["focal_gamma"] == 0.5  # not given again: the checkpoint's, not the default 2
    _, given = focal_run(
        data,
        str(tmp_path / "g05"),
        "-train_from",
        str(tmp_path / "g05_step_6.pt"),
        "-focal_gamma",
        1,
        "-overwrite",
    )
    assert given["focal_gamma"] == 1.0
