"""models/checkpoint.py: a checkpoint's options become the options that rebuild its model, in the
one function training (-train_from) and translation share; the weights load into that model."""

import argparse
import os

import pytest
import torch

from onmt_lite.models.checkpoint import build_checkpoint, model_from_checkpoint, model_options
from onmt_lite.models.checkpoint_files import (
    CheckpointWriter,
    best_path,
    checkpoint_path,
    saved_checkpoints,
)
from onmt_lite.opts import model_opts, option_defaults
from onmt_lite.utils.errors import UserError
from onmt_lite.utils.files import save_tensors
from tests.model_helpers import VOCABS, make_model
from tests.model_helpers import model_options as command_options


def saved_options(*args):
    return vars(command_options(*args))


def test_translation_takes_every_saved_option_over_the_defaults_with_dropout_off():
    saved = saved_options("-encoder_type", "brnn", "-dropout", "0.3", "-param_init", "0.05")
    del saved["lambda_coverage"]  # a checkpoint of an earlier version lacks a later option
    opt = model_options(saved, "ckpt.pt")
    assert (opt.encoder_type, opt.rnn_size, opt.param_init, opt.dropout) == ("brnn", 8, 0.05, [0.0])
    assert opt.lambda_coverage == option_defaults([model_opts])["lambda_coverage"]


def test_translation_refuses_options_that_cannot_describe_a_model():
    saved = saved_options()
    del saved["rnn_size"]
    with pytest.raises(UserError, match="ckpt.pt: checkpoint options lack rnn_size"):
        model_options(saved, "ckpt.pt")


def test_train_from_keeps_the_command_line_but_the_model_and_the_named_options():
    saved = saved_options("-encoder_type", "brnn", "-learning_rate", "0.5", "-train_steps", "10")
    command = command_options("-rnn_size", "16", "-learning_rate", "0.1", "-train_steps", "99")
    opt = model_options(saved, "ckpt.pt", onto=command)
    assert (opt.encoder_type, opt.rnn_size) == ("brnn", 8)  # the architecture is the checkpoint's
    assert (opt.learning_rate, opt.train_steps) == (0.1, 99)  # the rest is this command's
    assert (
        model_options(saved, "ckpt.pt", onto=command, also=["learning_rate"]).learning_rate == 0.5
    )
    assert command.rnn_size == 16  # the command's options are not changed in place


def test_a_checkpoint_rebuilds_its_model_with_the_same_weights():
    model, opt = make_model("-copy_attn", "-coverage_attn")
    checkpoint = build_checkpoint(model, VOCABS, vars(opt), 7, None, None, None)
    rebuilt = model_from_checkpoint(
        model_options(checkpoint["opt"], "ckpt.pt"), VOCABS, checkpoint, "ckpt.pt"
    )
    for (name, a), (_, b) in zip(model.state_dict().items(), rebuilt.state_dict().items()):
        assert torch.equal(a.float(), b.float()), name
    other = argparse.Namespace(
        **{**vars(model_options(checkpoint["opt"], "ckpt.pt")), "rnn_size": 10}
    )
    with pytest.raises(UserError, match="ckpt.pt: "):
        model_from_checkpoint(other, VOCABS, checkpoint, "ckpt.pt")


@pytest.mark.parametrize(
    "corrupt,match",
    [
        (
            lambda c: c["model"].update({"encoder.extra": "a string"}),
            "model weights hold entries that are not tensors",
        ),
        (
            lambda c: c.update({"generator": [1, 2]}),
            "generator weights hold entries that are not tensors",
        ),
        (lambda c: c["vocab"].update({"tgt": "abc"}), "vocab is not a src and a tgt list of words"),
        (lambda c: c.update({"opt": ["-rnn_size", 8]}), "opt is not a dict of options"),
        (lambda c: c.update({"step": "7"}), "step is not a whole number"),
    ],
)
def test_a_checkpoint_with_entries_of_the_wrong_kind_is_refused_by_name(tmp_path, corrupt, match):
    from onmt_lite.models.checkpoint import load_checkpoint
    from onmt_lite.utils.files import save_tensors

    model, opt = make_model()
    checkpoint = build_checkpoint(model, VOCABS, vars(opt), 7, None, None, None)
    save_tensors(checkpoint, str(tmp_path / "good.pt"))
    assert load_checkpoint(str(tmp_path / "good.pt"))["step"] == 7
    corrupt(checkpoint)
    save_tensors(checkpoint, str(tmp_path / "bad.pt"))
    with pytest.raises(UserError, match=f"bad.pt: checkpoint's {match}"):
        load_checkpoint(str(tmp_path / "bad.pt"))


def test_keep_checkpoint_prunes_by_step_but_never_best_or_what_this_run_wrote(tmp_path):
    prefix = str(tmp_path / "m")
    for step in (10, 20, 30):  # an earlier run's
        save_tensors({"step": step}, checkpoint_path(prefix, step))
    save_tensors({"step": 30}, best_path(prefix))
    others = [tmp_path / "m_step_x.pt", tmp_path / "m_step_5_step_1.pt", tmp_path / "n_step_1.pt"]
    for path in others:
        path.write_bytes(b"")

    def steps():
        return sorted(saved_checkpoints(prefix))

    resumed = checkpoint_path(prefix, 30)
    with CheckpointWriter(prefix, keep=2, train_from=resumed) as writer:  # its steps are the newest
        writer.save({"step": 40})
        assert steps() == [30, 40]
    # a new run (-overwrite): what it writes is newer
    with CheckpointWriter(prefix, keep=2, overwrite=True) as writer:
        writer.save({"step": 1})
        assert steps() == [1, 40]
        writer.save({"step": 2})
        assert steps() == [1, 2] and writer.last_path() == checkpoint_path(prefix, 2)
    assert os.path.exists(best_path(prefix)) and all(path.exists() for path in others)


def test_a_writer_over_an_earlier_runs_checkpoints_is_refused_unless_resumed_or_overwrite(tmp_path):
    prefix = str(tmp_path / "m")
    with CheckpointWriter(prefix) as writer:
        writer.save({"step": 2})
        writer.save_best({"step": 2})
    named = f"{prefix}_step_2.pt, {prefix}_best.pt"
    for train_from in ("", str(tmp_path / "other.pt")):
        expected = (
            f"an earlier run's checkpoints are there \\({named}\\); continue that run "
            f"with -train_from {prefix}_step_2.pt"
        )
        with pytest.raises(UserError, match=expected):
            CheckpointWriter(prefix, train_from=train_from)
        assert not os.path.exists(f"{prefix}.lock")  # a refused writer leaves no lock file
    os.symlink(best_path(prefix), tmp_path / "link.pt")
    # -train_from names one of them: that run goes on
    for train_from in (checkpoint_path(prefix, 2), str(tmp_path / "link.pt")):
        CheckpointWriter(prefix, train_from=train_from).close()
    CheckpointWriter(prefix, overwrite=True).close()
    CheckpointWriter(str(tmp_path / "n")).close()  # nothing there: nothing to refuse


def test_a_writer_makes_the_missing_directories_and_removes_them_if_nothing_was_written(
    tmp_path,
):
    prefix = str(tmp_path / "a" / "b" / "m")
    CheckpointWriter(prefix).close()  # refused or failed before a checkpoint
    assert os.listdir(tmp_path) == []
    with CheckpointWriter(prefix) as writer:
        assert os.listdir(tmp_path / "a" / "b") == ["m.lock"]
        (tmp_path / "a" / "notes.txt").write_text("another writer's")
    assert os.listdir(tmp_path / "a") == ["notes.txt"]  # b removed, a kept for the other file
    with CheckpointWriter(str(tmp_path / "c" / "m")) as writer:
        writer.save({"step": 1})
    assert os.listdir(tmp_path / "c") == ["m_step_1.pt"]
    (tmp_path / "file").write_text("")
    with pytest.raises(UserError, match=r"file/m: cannot create the directory .*is not a direct"):
        CheckpointWriter(str(tmp_path / "file" / "m"))


class FakeCuda:
    """torch.cuda's random-state calls on a machine with ``count`` GPUs, the current one
    ``current``."""

    def __init__(self, count, current):
        self.count = count
        self.current = current
        self.states = {i: torch.tensor([i], dtype=torch.uint8) for i in range(count)}

    def install(self, monkeypatch):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: self.current)
        monkeypatch.setattr(torch.cuda, "get_rng_state", lambda device: self.states[device].clone())

        def set_rng_state(state, device):
            assert device < self.count, "a device this machine lacks"
            self.states[device] = state

        monkeypatch.setattr(torch.cuda, "set_rng_state", set_rng_state)
        monkeypatch.setattr(
            torch.cuda, "get_rng_state_all", lambda: pytest.fail("saves every GPU's state")
        )
        monkeypatch.setattr(
            torch.cuda, "set_rng_state_all", lambda states: pytest.fail("restores every GPU")
        )


def test_the_cuda_random_state_is_the_training_devices_and_resumes_on_fewer_gpus(monkeypatch):
    from onmt_lite.models.checkpoint import rng_state, set_rng_state

    FakeCuda(8, current=5).install(monkeypatch)
    state = rng_state()
    assert torch.equal(state["cuda"], torch.tensor([5], dtype=torch.uint8))
    one_gpu = FakeCuda(1, current=0)
    one_gpu.install(monkeypatch)
    set_rng_state(state)  # a checkpoint from an 8-GPU node on a 1-GPU machine
    assert torch.equal(one_gpu.states[0], torch.tensor([5], dtype=torch.uint8))
    earlier = dict(state, cuda=[torch.tensor([i], dtype=torch.uint8) for i in (10, 11, 12)])
    set_rng_state(earlier)  # an earlier version's list of every visible GPU's state
    assert torch.equal(one_gpu.states[0], torch.tensor([10], dtype=torch.uint8))


def test_a_checkpoint_of_one_dropout_number_gives_dropout_schedules():
    """Checkpoints written before -dropout and -attention_dropout became schedules hold numbers."""
    saved = saved_options(
        "-encoder_type", "transformer", "-decoder_type", "transformer", "-heads", 2
    )
    saved["dropout"] = 0.2
    saved["attention_dropout"] = 0.15
    assert model_options(saved, "ckpt.pt").attention_dropout == [0.15]
    onto = argparse.Namespace(**{**saved, "dropout": 0.25})
    resumed = model_options(saved, "ckpt.pt", onto=onto)
    assert (resumed.dropout, resumed.attention_dropout) == ([0.25], [0.15])


def test_a_checkpoint_keeps_the_options_not_which_of_them_were_given(tmp_path):
    """``vars`` of a parsed namespace holds ``given_options`` (a frozenset, which
    ``weights_only`` loading refuses): a checkpoint leaves it out and opens."""
    from onmt_lite.models.checkpoint import load_checkpoint

    model, opt = make_model()
    assert "rnn_size" in opt.given_options
    checkpoint = build_checkpoint(model, VOCABS, vars(opt), 7, None, None, None)
    save_tensors(checkpoint, str(tmp_path / "c.pt"))
    saved = load_checkpoint(str(tmp_path / "c.pt"))["opt"]
    assert saved == {k: v for k, v in vars(opt).items() if k != "given_options"}
