"""Faults during training: SIGKILL at any moment, SIGINT/SIGTERM, NaN losses, files carrying
code."""

import glob
import os
import random
import re
import signal
import subprocess
import sys
import time

import pytest
import torch

from onmt_lite.models.checkpoint import load_checkpoint
from tests.helpers import (
    PickledCall,
    TINY_MODEL,
    invoke,
    one_line_error,
    preprocess_in_process,
    run_cli,
    run_in_process,
    step_losses,
    train_in_process,
)

# Big enough that writing a checkpoint (with Adam's moments, every step) takes a few milliseconds.
MODEL = [
    "-rnn_size",
    128,
    "-word_vec_size",
    64,
    "-layers",
    1,
    "-batch_size",
    8,
    "-optim",
    "adam",
    "-learning_rate",
    0.01,
    "-report_every",
    1,
    "-seed",
    5,
]
STEPS = 30


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return preprocess_in_process(str(tmp_path_factory.mktemp("faults")))


def start_train(data, prefix, *args):
    """Start onmt_lite_train in the background, logging to PREFIX.log."""
    log = f"{prefix}.log"
    command = [
        sys.executable,
        "-m",
        "onmt_lite.bin.train",
        "-data",
        data,
        "-save_model",
        prefix,
        "-log_file",
        log,
        *map(str, MODEL),
        *map(str, args),
    ]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def train(data, prefix, *args):
    """Run onmt_lite_train to the end, in this process (no signal is sent to it); returns
    {step: losses} from its log, PREFIX.log, which it appends to."""
    train_in_process(data, prefix, *MODEL, *args)
    return read_losses(prefix)


def read_losses(prefix):
    with open(f"{prefix}.log", encoding="utf-8") as f:
        return step_losses(f.read().splitlines())


def wait_for_step(prefix, step, proc, timeout=120):
    """Block until PREFIX.log reports ``step`` (or the process ends)."""
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        if os.path.exists(f"{prefix}.log") and step in read_losses(prefix):
            return
        time.sleep(0.01)


def checkpoints(prefix):
    """``{step: path}`` of the checkpoints under PREFIX."""
    paths = glob.glob(f"{glob.escape(prefix)}_step_*.pt")
    return {int(re.search(r"_step_(\d+)\.pt$", p).group(1)): p for p in paths}


def temporaries(prefix):
    return glob.glob(os.path.join(glob.escape(os.path.dirname(prefix)), ".*.tmp"))


@pytest.fixture(scope="module")
def reference(data, tmp_path_factory):
    """The losses of an uninterrupted run of STEPS steps, checkpointing every step."""
    return train(
        data,
        str(tmp_path_factory.mktemp("reference") / "m"),
        "-train_steps",
        STEPS,
        "-save_checkpoint_steps",
        1,
    )


def check_after_kill_and_resume(data, prefix, reference):
    """Every checkpoint loads; resuming from the newest reaches the reference losses. Returns its
    step."""
    saved = checkpoints(prefix)
    for step, path in saved.items():
        assert load_checkpoint(path)["step"] == step
        torch.load(path, weights_only=True)
    if not saved or max(saved) == STEPS:
        return None
    newest = max(saved)
    resumed = train(
        data,
        prefix,
        "-train_steps",
        STEPS,
        "-save_checkpoint_steps",
        1,
        "-train_from",
        saved[newest],
    )
    assert {s: resumed[s] for s in range(newest + 1, STEPS + 1)} == {
        s: reference[s] for s in range(newest + 1, STEPS + 1)
    }
    assert temporaries(prefix) == []  # what the killed writer left was cleaned up
    return newest


@pytest.mark.slow
def test_sigkill_at_random_moments_leaves_loadable_checkpoints_and_an_exact_resume(
    data, tmp_path, reference
):
    rng = random.Random(1)
    resumed_from = []
    for trial in range(3):
        prefix = str(tmp_path / f"kill{trial}" / "m")
        os.makedirs(os.path.dirname(prefix))
        proc = start_train(data, prefix, "-train_steps", STEPS, "-save_checkpoint_steps", 1)
        wait_for_step(prefix, 1, proc)
        time.sleep(rng.uniform(0, 0.25))
        proc.kill()
        proc.wait()
        resumed_from.append(check_after_kill_and_resume(data, prefix, reference))
    assert sum(step is not None for step in resumed_from) >= 2, resumed_from


@pytest.mark.slow
def test_sigkill_during_a_checkpoint_write_leaves_no_partial_checkpoint(data, tmp_path, reference):
    for attempt in range(5):
        prefix = str(tmp_path / f"write{attempt}" / "m")
        os.makedirs(os.path.dirname(prefix))
        proc = start_train(data, prefix, "-train_steps", STEPS, "-save_checkpoint_steps", 1)
        wait_for_step(prefix, 2, proc)
        while proc.poll() is None and not temporaries(prefix):
            pass
        proc.kill()
        proc.wait()
        if temporaries(prefix):  # killed while a checkpoint was being written
            break
    else:
        pytest.fail("never caught a checkpoint write in 5 attempts")
    assert check_after_kill_and_resume(data, prefix, reference) is not None


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_sigint_and_sigterm_save_a_checkpoint_at_the_current_step_and_say_where(
    data, tmp_path, reference, signum
):
    prefix = str(tmp_path / "m")
    proc = start_train(data, prefix, "-train_steps", 10**6, "-save_checkpoint_steps", 10**6)
    wait_for_step(prefix, 3, proc)
    proc.send_signal(signum)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signum, stderr
    last = stderr.strip().splitlines()[-1]
    match = re.fullmatch(
        rf"onmt_lite_train: stopped by {signal.Signals(signum).name} at step (\d+); "
        rf"resume with -train_from (\S+)",
        last,
    )
    assert match, last
    step = int(match.group(1))
    path = match.group(2)
    assert path == f"{prefix}_step_{step}.pt" and load_checkpoint(path)["step"] == step
    assert "Traceback" not in stderr
    resumed = train(data, prefix, "-train_steps", step + 2, "-train_from", path)
    # the uninterrupted run's losses do not depend on how often it saved
    assert step + 2 <= STEPS
    assert (resumed[step + 1], resumed[step + 2]) == (reference[step + 1], reference[step + 2])


def test_a_diverging_run_stops_at_the_first_non_finite_step_and_keeps_good_checkpoints(
    data, tmp_path
):
    prefix = str(tmp_path / "m")
    result = run_in_process(
        "train",
        "-data",
        data,
        "-save_model",
        prefix,
        *MODEL,
        "-train_steps",
        50,
        "-save_checkpoint_steps",
        1,
        "-optim",
        "sgd",
        "-learning_rate",
        1e37,
    )
    assert result.returncode == 2, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    match = re.fullmatch(
        r"onmt_lite_train: error: step (\d+): the (loss|gradient norm) is (nan|inf); training "
        r"stopped without applying this step \(last good checkpoint: (.+)\)",
        last,
    )
    assert match, last
    bad_step = int(match.group(1))
    saved = checkpoints(prefix)
    assert sorted(saved) == list(range(1, bad_step))
    expected_last = saved[bad_step - 1] if bad_step > 1 else "none was written"
    assert match.group(4) == expected_last
    for path in saved.values():
        assert all(torch.isfinite(t).all() for t in load_checkpoint(path)["model"].values())


def test_a_bad_step_read_later_is_named_and_no_checkpoint_holds_it(data, tmp_path, monkeypatch):
    """With Adam (fused: train/step_checks.py) a step's loss and gradient norm are read at the
    next report, validation or checkpoint: a step made infinite (step 5 here) and the steps after
    it are skipped on the device, and the read at the report of step 6 names step 5 and the last
    checkpoint before it."""
    from onmt_lite.train.optim import Optimizer
    from onmt_lite.utils.errors import UserError

    gradient_norm = Optimizer.gradient_norm

    def poisoned_norm(self):
        if self.decay_step == 4:  # step 5's gradients
            with torch.no_grad():
                self.params[0].grad[0] = float("inf")
        return gradient_norm(self)

    monkeypatch.setattr(Optimizer, "gradient_norm", poisoned_norm)
    prefix = str(tmp_path / "m")
    with pytest.raises(UserError) as error:
        train_in_process(
            data,
            prefix,
            *TINY_MODEL,
            "-optim",
            "adam",
            "-learning_rate",
            0.001,
            "-train_steps",
            12,
            "-save_checkpoint_steps",
            4,
            "-report_every",
            3,
            "-seed",
            1,
        )
    expected = (
        r"step 5: the gradient norm is inf; training stopped without applying this step or the 1 "
        rf"after it \(last good checkpoint: {re.escape(prefix)}_step_4.pt\)"
    )
    assert re.fullmatch(expected, str(error.value)), str(error.value)
    assert sorted(checkpoints(prefix)) == [4]


def test_weights_out_of_float_range_are_never_saved_nor_named_a_good_checkpoint(
    data, tmp_path, monkeypatch
):
    """An update that leaves a weight infinite while the step's loss was finite (here an optimizer
    step made to do so at step 3): training stops before saving those weights, naming the last
    checkpoint written, which holds finite weights."""
    from onmt_lite.train.optim import Optimizer
    from onmt_lite.utils.errors import UserError

    step = Optimizer.step

    def overflowing_step(self, *args, **kwargs):
        step(self, *args, **kwargs)
        if self.decay_step == 3:
            with torch.no_grad():
                self.params[0][0] = float("inf")

    monkeypatch.setattr(Optimizer, "step", overflowing_step)
    prefix = str(tmp_path / "m")
    with pytest.raises(UserError) as error:
        train_in_process(
            data, prefix, *TINY_MODEL, "-train_steps", 6, "-save_checkpoint_steps", 1, "-seed", 1
        )
    expected = (
        rf"step 3: 1 weight tensor\(s\) hold NaN or infinite values \(\S+\); training stopped "
        rf"without saving them \(last good checkpoint: {re.escape(prefix)}_step_2.pt\)"
    )
    assert re.fullmatch(expected, str(error.value)), str(error.value)
    assert sorted(checkpoints(prefix)) == [1, 2]
    for path in checkpoints(prefix).values():
        assert all(torch.isfinite(t).all() for t in load_checkpoint(path)["model"].values()), path


def test_a_learning_rate_beyond_float_range_is_refused_before_step_1(data, tmp_path):
    result = run_in_process(
        "train",
        "-data",
        data,
        "-save_model",
        tmp_path / "m",
        *TINY_MODEL,
        "-train_steps",
        2,
        "-learning_rate",
        1e10,
        "-lr_mult",
        "*=1e38",
    )
    assert result.returncode == 2
    assert "times -lr_mult 1e+38" in result.stderr and "beyond float32's range" in result.stderr
    assert "Traceback" not in result.stderr and not glob.glob(str(tmp_path / "m*"))
    nan_mult = run_in_process(
        "train", "-data", data, "-save_model", tmp_path / "m", *TINY_MODEL, "-lr_mult", "*=nan"
    )
    assert (
        nan_mult.returncode == 2
        and "expected PATTERN=FACTOR with a finite factor" in nan_mult.stderr
    )


def test_a_checkpoint_holding_nan_weights_is_refused_by_translation(data, tmp_path):
    prefix = str(tmp_path / "m")
    train(data, prefix, "-train_steps", 1)
    checkpoint = load_checkpoint(f"{prefix}_step_1.pt")
    name = next(iter(checkpoint["model"]))
    checkpoint["model"][name][0] = float("nan")
    torch.save(checkpoint, tmp_path / "nan.pt")
    source = tmp_path / "src.txt"
    source.write_text("a b c\n", encoding="utf-8")
    result = run_in_process(
        "translate", "-model", tmp_path / "nan.pt", "-src", source, "-output", tmp_path / "out.txt"
    )
    assert result.returncode == 2
    assert f"nan.pt: {name} holds NaN or infinite values" in result.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "out.txt").exists()


def test_files_carrying_pickled_code_are_refused_by_every_command_and_tool(data, tmp_path, capsys):
    marker = tmp_path / "marker"
    crafted = str(tmp_path / "crafted.pt")
    torch.save(
        {
            "format": "onmt_lite.checkpoint.v1",
            "step": 1,
            "model": PickledCall(open, str(marker), "w"),
        },
        crafted,
    )
    src = tmp_path / "src.txt"
    src.write_text("w1 w2\n")
    # A -data prefix whose vocabulary file is the crafted file.
    os.symlink(crafted, f"{tmp_path}/evil.vocab.pt")
    os.symlink(f"{data}.train.0.pt", f"{tmp_path}/evil.train.0.pt")
    # in this process: code the pickle ran would make the marker here as well as in a new one
    runs = {
        "translate": ("translate", ["-model", crafted, "-src", src, "-output", tmp_path / "o.txt"]),
        "train -train_from": (
            "train",
            ["-data", data, "-save_model", tmp_path / "t", "-train_from", crafted],
        ),
        "train -data": ("train", ["-data", tmp_path / "evil", "-save_model", tmp_path / "t"]),
        "train -pre_word_vecs_enc": (
            "train",
            ["-data", data, "-save_model", tmp_path / "t", "-pre_word_vecs_enc", crafted],
        ),
        "average_models": (
            "average_models",
            ["-models", crafted, crafted, "-output", tmp_path / "a.pt"],
        ),
        "release_model": ("release_model", ["-model", crafted, "-output", tmp_path / "r.pt"]),
        "extract_embeddings": ("extract_embeddings", ["-model", crafted, "-output_dir", tmp_path]),
        "embeddings_to_torch": (
            "embeddings_to_torch",
            [
                "-emb_file_enc",
                src,
                "-emb_file_dec",
                src,
                "-dict_file",
                crafted,
                "-output_file",
                tmp_path / "e",
            ],
        ),
    }
    for name, (command, args) in runs.items():
        code, lines = invoke(command, args, capsys)
        error = "\n".join(lines)
        assert code == 2, (name, error)
        assert "refused" in error and "pickled Python objects" in error, (name, error)
        assert "Traceback" not in error
    assert not marker.exists()


def test_a_checkpoint_whose_options_do_not_match_its_weights_is_refused(data, tmp_path, capsys):
    train(data, str(tmp_path / "m"), "-train_steps", 1)
    checkpoint = load_checkpoint(str(tmp_path / "m_step_1.pt"))
    src = tmp_path / "src.txt"
    src.write_text("w1 w2\n")
    for change, expected in (
        (("rnn_size", 64), r"has shape \(\d+, \d+\), the model's options give \(\d+, \d+\)"),
        (("encoder_type", "ggnn"), r"option -encoder_type .ggnn. is not valid"),
        (("encoder_type", "mean"), r"-encoder_type mean needs -src_word_vec_size \(64\)"),
        (("rnn_type", "GRU"), r"has shape"),
    ):
        bad = dict(checkpoint, opt={**checkpoint["opt"], change[0]: change[1]})
        torch.save(bad, tmp_path / "bad.pt")
        args = ["-model", tmp_path / "bad.pt", "-src", src, "-output", tmp_path / "o.txt"]
        line = one_line_error(invoke("translate", args, capsys))
        assert re.search(expected, line), (change, line)
    assert not (tmp_path / "o.txt").exists()


def test_output_dash_and_dev_stdout_write_the_translations_to_standard_output(data, tmp_path):
    prefix = str(tmp_path / "tiny")
    train_in_process(data, prefix, *TINY_MODEL, "-train_steps", 2)
    # words, not empty lines, from a model trained for 2 steps
    args = [
        "-model",
        f"{prefix}_step_2.pt",
        "-src",
        os.path.join(os.path.dirname(data), "src-valid.txt"),
        "-min_length",
        2,
    ]
    to_file = run_in_process("translate", *args, "-output", tmp_path / "out.txt")
    assert to_file.returncode == 0, to_file.stderr
    expected = (tmp_path / "out.txt").read_text(encoding="utf-8")
    assert len(expected.split()) >= 80 and expected.count("\n") == 40 and to_file.stdout == ""
    for output in ("-", "/dev/stdout"):
        # a process of its own: the translations go to descriptor 1
        piped = run_cli("translate", *args, "-output", output, cwd=tmp_path)
        assert piped.returncode == 0, piped.stderr
        assert piped.stdout == expected  # the translations only: the logs went to stderr
        assert "PRED AVG SCORE" in piped.stderr
    assert not (tmp_path / "-").exists()
