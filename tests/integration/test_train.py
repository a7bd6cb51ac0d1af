"""onmt_lite_train end to end: 1.x command lines, exact resume, checkpoints, early stopping, bad
input."""

import fcntl
import os

import pytest
import torch

from onmt_lite.models.checkpoint import load_checkpoint
from tests.helpers import (
    TINY_MODEL,
    assert_resumes_exactly,
    invoke,
    one_line_error,
    preprocess_in_process,
    run_in_process,
    step_losses,
    train_in_process,
)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    prefixes = {}
    for kind, extra in (("plain", []), ("copy", ["-dynamic_dict"])):
        prefixes[kind] = preprocess_in_process(str(tmp_path_factory.mktemp(kind)), *extra)
    return prefixes


def error_of(result):
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and "Step 1/" not in result.stderr
    return result.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize("kind,extra", [("plain", []), ("copy", ["-copy_attn"])])
def test_the_opennmt_py_1x_command_line_runs_unchanged(data, tmp_path, kind, extra):
    result = run_in_process(
        "train",
        "-data",
        data[kind],
        "-rnn_size",
        2,
        "-batch_size",
        10,
        "-word_vec_size",
        5,
        "-report_every",
        5,
        "-rnn_size",
        10,
        "-train_steps",
        10,
        *extra,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert "Step 5/10" in result.stderr and "Step 10/10" in result.stderr
    checkpoint = torch.load(tmp_path / "model_step_10.pt", weights_only=True)
    assert checkpoint["step"] == 10 and checkpoint["opt"]["rnn_size"] == 10
    assert checkpoint["model"]["encoder.rnn.weight_hh_l0"].shape == (40, 10)


def test_save_model_in_a_missing_directory_makes_it_as_1x_does_and_a_refused_run_removes_it(
    data, tmp_path
):
    """OpenNMT-py 1.x makes -save_model's directory with its parents (its examples write
    ``-save_model models/cnndm``); a run refused after that leaves no directory behind."""
    result = run_in_process(
        "train", "-data", data["plain"], "-save_model", "runs/a/m", *TINY_MODEL,
        "-train_steps", 2, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert os.listdir(tmp_path / "runs" / "a") == ["m_step_2.pt"]
    # "runs/": the prefix is the directory itself, as in 1.x (runs/_step_N.pt)
    result = run_in_process(
        "train", "-data", data["plain"], "-save_model", "other/", *TINY_MODEL,
        "-train_steps", 1, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert os.listdir(tmp_path / "other") == ["_step_1.pt"]
    # refused after the checkpoints' writer made the directories (the optimizer's check)
    result = run_in_process(
        "train", "-data", data["plain"], "-save_model", "new/deep/m", *TINY_MODEL,
        "-learning_rate", 1e10, "-lr_mult", "*=1e38", cwd=tmp_path,
    )  # fmt: skip
    assert "beyond float32's range" in error_of(result)
    assert sorted(os.listdir(tmp_path)) == ["other", "runs"]
    (tmp_path / "file").write_text("")
    result = run_in_process(
        "train", "-data", data["plain"], "-save_model", "file/m", *TINY_MODEL, cwd=tmp_path
    )
    assert error_of(result) == (
        f"onmt_lite_train: error: -save_model file/m: cannot create the directory "
        f"{tmp_path / 'file'} ({tmp_path / 'file'} is not a directory)"
    )


def test_a_resumed_run_gives_the_same_losses_as_an_uninterrupted_one(data, tmp_path):
    args = [
        *TINY_MODEL,
        "-optim",
        "adam",
        "-learning_rate",
        "0.01",
        "-dropout",
        "0.3",
        "-accum_count",
        2,
        "-report_every",
        1,
        "-valid_steps",
        3,
        "-save_checkpoint_steps",
        4,
        "-seed",
        7,
        "-pool_factor",
        2,
    ]
    second = assert_resumes_exactly(data["plain"], tmp_path, *args)
    assert any("resuming from" in line and "at step 4" in line for line in second)


def test_adafactor_trains_and_resumes_exactly_from_its_factored_moments(data, tmp_path):
    """-optim adafactor with the schedule 1.x's users gave it (noam); its checkpoint holds a row
    and a column of second moments per matrix and the step count each parameter's rates grow by."""
    args = [*TINY_MODEL, "-optim", "adafactor", "-decay_method", "noam", "-warmup_steps", 4]
    args += ["-learning_rate", 2, "-dropout", "0.2", "-report_every", 1, "-seed", 3]
    assert_resumes_exactly(data["plain"], tmp_path, *args)
    saved = torch.load(tmp_path / "full_step_8.pt", weights_only=True)["optim"]
    weight = load_checkpoint(str(tmp_path / "full_step_8.pt"))["model"][
        "decoder.attn.linear_in.weight"
    ]
    state = saved["state"]["decoder.attn.linear_in.weight"]
    assert saved["optim"] == "adafactor" and state["step"] == 8
    assert state["row_moments"].shape == (weight.shape[0], 1)
    assert state["column_moments"].shape == (1, weight.shape[1])


def test_sparseadam_trains_and_resumes_exactly_and_its_refusals_are_one_line_errors(data, tmp_path):
    """1.x's -optim sparseadam: the embeddings' rows of a step's tokens move by SparseAdam, the rest
    by Adam; the moments of both come back from the checkpoint."""
    args = [*TINY_MODEL, "-optim", "sparseadam", "-learning_rate", "0.01", "-dropout", "0.2"]
    args += ["-report_every", 1, "-seed", 4, "-accum_count", 2]
    assert_resumes_exactly(data["plain"], tmp_path, *args)
    saved = torch.load(tmp_path / "full_step_8.pt", weights_only=True)["optim"]
    assert saved["optim"] == "sparseadam"
    assert set(saved["state"]["encoder.embeddings.lut.weight"]) == {"step", "exp_avg", "exp_avg_sq"}
    result = run_in_process(
        "train", "-data", data["plain"], *TINY_MODEL, "-optim", "sparseadam",
        "-share_decoder_embeddings", cwd=tmp_path,
    )  # fmt: skip
    assert error_of(result) == (
        "onmt_lite_train: error: -optim sparseadam: -share_decoder_embeddings gives the decoder's "
        "embeddings the generator's dense gradient (1.x's SparseAdam failed on it); use -optim adam"
    )


def test_batches_made_by_a_thread_train_and_resume_with_the_losses_of_the_loops_own(data, tmp_path):
    args = [*TINY_MODEL, "-report_every", 1, "-save_checkpoint_steps", 3, "-seed", 5]
    args += ["-pool_factor", 2, "-dropout", "0.2", "-accum_count", 2]
    _, full = train_in_process(data["plain"], str(tmp_path / "full"), *args, "-train_steps", 7)
    ahead = [*args, "-num_workers", 1]
    _, first = train_in_process(data["plain"], str(tmp_path / "part"), *ahead, "-train_steps", 3)
    resume = ["-train_steps", 7, "-train_from", tmp_path / "part_step_3.pt"]
    _, second = train_in_process(data["plain"], str(tmp_path / "part"), *ahead, *resume)
    full_losses = step_losses(full)
    assert sorted(full_losses) == list(range(1, 8))
    assert {**step_losses(first), **step_losses(second)} == full_losses
    # the thread had made batches past step 3's when the checkpoint was written
    saved = load_checkpoint(str(tmp_path / "part_step_3.pt"))["data"]
    assert saved == {"epoch": 0, "shard": 0, "batch": 6}


@pytest.mark.parametrize("reset,expected_lr", [("none", 0.5 / 5**0.5), ("all", 0.5)])
def test_reset_optim_decides_where_the_schedule_continues(data, tmp_path, reset, expected_lr):
    args = [
        *TINY_MODEL,
        "-learning_rate",
        0.5,
        "-decay_method",
        "rsqrt",
        "-warmup_steps",
        1,
        "-report_every",
        1,
    ]
    train_in_process(data["plain"], str(tmp_path / "m"), *args, "-train_steps", 4)
    _, lines = train_in_process(
        data["plain"],
        str(tmp_path / "m"),
        *args,
        "-train_steps",
        5,
        "-train_from",
        tmp_path / "m_step_4.pt",
        "-reset_optim",
        reset,
    )
    step5 = next(line for line in lines if "] Step 5/5" in line)
    assert f"lr: {expected_lr:.5g};" in step5


def test_checkpoints_are_plain_data_and_only_the_newest_are_kept(data, tmp_path):
    train_in_process(
        data["copy"],
        str(tmp_path / "m"),
        *TINY_MODEL,
        "-copy_attn",
        "-train_steps",
        6,
        "-save_checkpoint_steps",
        2,
        "-keep_checkpoint",
        2,
        "-valid_steps",
        2,
    )
    assert sorted(p for p in os.listdir(tmp_path) if p.endswith(".pt")) == [
        "m_best.pt",
        "m_step_4.pt",
        "m_step_6.pt",
    ]
    checkpoint = torch.load(tmp_path / "m_step_6.pt", weights_only=True)
    assert set(checkpoint) >= {"model", "generator", "vocab", "opt", "optim", "step", "rng", "data"}
    assert all(t.device.type == "cpu" for t in checkpoint["model"].values())
    assert checkpoint["vocab"]["src"][:4] == ["<unk>", "<blank>", "<s>", "</s>"]
    assert "linear_copy.weight" in checkpoint["generator"]


def test_early_stopping_stops_and_says_so(data, tmp_path):
    _, lines = train_in_process(
        data["plain"],
        str(tmp_path / "m"),
        *TINY_MODEL,
        "-learning_rate",
        0,
        "-train_steps",
        50,
        "-valid_steps",
        2,
        "-early_stopping",
        2,
    )
    assert any("early stopping at step 6" in line for line in lines)
    assert os.path.exists(tmp_path / "m_step_6.pt") and not os.path.exists(tmp_path / "m_step_8.pt")
    assert load_checkpoint(str(tmp_path / "m_best.pt"))["step"] == 2


@pytest.mark.kernels  # a quality that depends on the kernels' rounding: run again under others
def test_training_learns_the_reversal_task(data, tmp_path):
    _, lines = train_in_process(
        data["plain"],
        str(tmp_path / "m"),
        "-rnn_size",
        64,
        "-word_vec_size",
        32,
        "-layers",
        1,
        "-batch_size",
        32,
        "-optim",
        "adam",
        "-learning_rate",
        0.01,
        "-dropout",
        0,
        "-train_steps",
        500,
        "-valid_steps",
        500,
        "-seed",
        1,
    )
    validation = next(line for line in lines if "Validation at step 500" in line)
    # at 300 steps 96.65 to 99.52 by kernel set (still learning); at 500 99.52 to 100 on the
    # default, AVX2 and AVX-512 kernels, 1 and 2 threads
    assert float(validation.split("accuracy ")[1].split(",")[0]) > 95


def test_bad_inputs_are_refused_before_training(data, tmp_path, capsys):
    base = ["-rnn_size", 4, "-word_vec_size", 4, "-train_steps", 2, "-save_model", tmp_path / "m"]

    def error(*args):  # the command in this process: its exit status and stderr as from a shell
        return one_line_error(invoke("train", args, capsys))

    assert "no training shards" in error("-data", tmp_path / "none", *base)
    log = tmp_path / "refused.log"  # a run in the background is read in its log: the line is there
    refused = error("-data", tmp_path / "none", *base, "-log_file", log)
    assert log.read_text(encoding="utf-8").rstrip("\n").endswith(f" ERROR] {refused}")
    assert "preprocessed with -dynamic_dict" in error("-data", data["plain"], *base, "-copy_attn")
    os.makedirs(tmp_path / "small")
    different = preprocess_in_process(str(tmp_path / "small"), "-tgt_vocab_size", 5)
    shared = error("-data", different, *base, "-share_embeddings")
    assert "-share_embeddings needs one vocabulary" in shared
    assert torch.cuda.is_available() or "CUDA device 0 requested" in error(
        "-data", data["plain"], *base, "-gpu_ranks", 0
    )
    corrupt = tmp_path / "corrupt.pt"
    corrupt.write_bytes(b"PK\x03\x04 not really a checkpoint")
    assert "cannot load checkpoint" in error("-data", data["plain"], *base, "-train_from", corrupt)
    assert invoke("train", ["-data", data["plain"], *base], capsys)[0] == 0
    other = preprocess_in_process(str(tmp_path), vocab=25)
    assert "vocabulary" in error("-data", other, *base, "-train_from", tmp_path / "m_step_2.pt")


def test_tensorboard_writes_scalars_or_says_plainly_that_it_cannot(data, tmp_path):
    import importlib.util

    board = tmp_path / "board"
    _, lines = train_in_process(
        data["plain"],
        str(tmp_path / "m"),
        *TINY_MODEL,
        "-train_steps",
        2,
        "-report_every",
        1,
        "-tensorboard",
        "-tensorboard_log_dir",
        board,
    )
    if importlib.util.find_spec("tensorboard") is None:
        assert any(
            "the tensorboard package is not installed (pip install tensorboard)" in line
            for line in lines
        )
        assert not board.exists()
    else:
        assert any(name.startswith("events.out.tfevents") for name in os.listdir(board))


def test_exp_names_the_tensorboard_run_and_is_reported_without_tensorboard(
    data, tmp_path, monkeypatch
):
    import sys
    import types

    opened = []  # a stand-in for torch.utils.tensorboard, which needs the tensorboard package
    writer = types.SimpleNamespace(
        add_scalar=lambda *args: None, flush=lambda: None, close=lambda: None
    )
    fake = types.ModuleType("torch.utils.tensorboard")
    fake.SummaryWriter = lambda log_dir: opened.append(str(log_dir)) or writer
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", fake)
    base = [*TINY_MODEL, "-train_steps", 1, "-exp", "run7"]
    train_in_process(
        data["plain"],
        str(tmp_path / "m"),
        *base,
        "-tensorboard",
        "-tensorboard_log_dir",
        tmp_path / "b",
    )
    assert opened == [os.path.join(str(tmp_path / "b"), "run7")]
    _, lines = train_in_process(data["plain"], str(tmp_path / "n"), *base)
    assert opened == [os.path.join(str(tmp_path / "b"), "run7")]
    assert any(
        "-exp run7 has no effect: without -tensorboard nothing is written" in line for line in lines
    )


@pytest.mark.parametrize("copy", [["-copy_attn"], []])  # a plain model on -dynamic_dict data too
def test_valid_metrics_log_bleu_and_chrf_and_drive_early_stopping(data, tmp_path, copy):
    _, lines = train_in_process(
        data["copy"],
        str(tmp_path / "m"),
        *TINY_MODEL,
        *copy,
        "-train_steps",
        4,
        "-valid_steps",
        2,
        "-valid_metrics",
        "BLEU",
        "chrF",
        "-early_stopping_criteria",
        "BLEU",
        "-early_stopping",
        5,
    )
    validations = [line for line in lines if "Validation at step" in line]
    assert len(validations) == 2
    assert all(
        "BLEU = " in line and "chrF2 = " in line and "nrefs:1" in line for line in validations
    )
    assert load_checkpoint(str(tmp_path / "m_best.pt"))["step"] in (2, 4)
    result = run_in_process(
        "train",
        "-data",
        data["plain"],
        *TINY_MODEL,
        "-early_stopping_criteria",
        "chrF",
        "-save_model",
        tmp_path / "x",
    )
    assert "-early_stopping_criteria chrF needs -valid_metrics chrF" in error_of(result)


def test_training_continues_from_a_checkpoint_without_training_state(data, tmp_path):
    train_in_process(data["plain"], str(tmp_path / "m"), *TINY_MODEL, "-train_steps", 2)
    checkpoint = torch.load(tmp_path / "m_step_2.pt", weights_only=True)
    for key in ("optim", "rng", "data", "trainer"):
        del checkpoint[key]
    torch.save(checkpoint, tmp_path / "released.pt")
    # another prefix: m holds the checkpoints of the first run, which this one does not continue
    _, lines = train_in_process(
        data["plain"],
        str(tmp_path / "r"),
        *TINY_MODEL,
        "-train_steps",
        3,
        "-train_from",
        tmp_path / "released.pt",
    )
    assert any("holds weights only" in line for line in lines)
    assert torch.load(tmp_path / "r_step_3.pt", weights_only=True)["step"] == 3


@pytest.mark.parametrize("corpus_type", ["train", "valid"])
def test_shards_of_another_preprocessing_run_are_refused_by_name(tmp_path, corpus_type, capsys):
    """Shards hold ids into their run's vocabularies: a shard of a run with other vocabularies is
    refused naming the file, instead of training on ids that mean other words."""
    for name in ("small", "full", "same"):
        (tmp_path / name).mkdir()
    small = preprocess_in_process(
        str(tmp_path / "small"), "-src_vocab_size", 5, "-tgt_vocab_size", 5
    )
    full = preprocess_in_process(str(tmp_path / "full"))
    # the same vocabularies: its shards are welcome
    same = preprocess_in_process(str(tmp_path / "same"))
    os.replace(f"{same}.{corpus_type}.0.pt", f"{full}.{corpus_type}.0.pt")
    args = [*TINY_MODEL, "-train_steps", 2, "-valid_steps", 1]
    code, lines = invoke("train", ["-data", full, "-save_model", tmp_path / "ok", *args], capsys)
    assert code == 0, lines
    os.replace(f"{small}.{corpus_type}.0.pt", f"{full}.{corpus_type}.0.pt")
    invoked = invoke("train", ["-data", full, "-save_model", tmp_path / "m", *args], capsys)
    message = one_line_error(invoked)
    refusal = f"{full}.{corpus_type}.0.pt: its ids index other vocabularies than the vocab file's"
    assert refusal in message


def test_a_second_run_on_a_save_model_in_use_is_refused_and_a_lock_file_left_behind_does_not_block(
    data, tmp_path
):
    prefix = str(tmp_path / "m")
    theirs = tmp_path / ".m_step_2.pt.abc123.tmp"  # the other run's checkpoint being written
    theirs.write_bytes(b"half")
    args = ["-data", data["plain"], *TINY_MODEL, "-train_steps", 2, "-save_model", prefix]
    with open(f"{prefix}.lock", "a+", encoding="utf-8") as held:  # as the other run holds it
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        held.write("4242\n")
        held.flush()
        line = error_of(run_in_process("train", *args))
        assert line.startswith(
            f"onmt_lite_train: error: -save_model {prefix}: another run is using this prefix"
        )
        assert "by process 4242" in line
        # nothing of theirs touched
        assert theirs.exists() and not os.path.exists(f"{prefix}_step_2.pt")
    assert os.path.exists(f"{prefix}.lock")  # left behind, as by a killed run: it does not block
    result = run_in_process("train", *args)
    assert result.returncode == 0, result.stderr
    assert os.path.exists(f"{prefix}_step_2.pt") and not theirs.exists()  # stale now: removed
    assert not os.path.exists(f"{prefix}.lock")  # removed and released when the run ended


def test_a_run_over_an_earlier_runs_checkpoints_is_refused_unless_resumed_or_overwrite(
    data, tmp_path, capsys
):
    prefix = str(tmp_path / "m")
    args = ["-data", data["plain"], *TINY_MODEL, "-valid_steps", 2, "-save_model", prefix]
    assert invoke("train", [*args, "-train_steps", 2], capsys)[0] == 0
    earlier = [f"{prefix}_step_2.pt", f"{prefix}_best.pt"]

    def state():
        return {path: (os.stat(path).st_mtime_ns, open(path, "rb").read()) for path in earlier}

    before = state()
    line = one_line_error(invoke("train", [*args, "-train_steps", 2, "-seed", 2], capsys))
    assert line == (
        f"onmt_lite_train: error: -save_model {prefix}: an earlier run's checkpoints "
        f"are there ({', '.join(earlier)}); continue that run with -train_from "
        f"{earlier[0]}, replace them with -overwrite, or choose another -save_model"
    )
    assert state() == before and not os.path.exists(f"{prefix}.lock")
    resumed = invoke("train", [*args, "-train_steps", 3, "-train_from", earlier[0]], capsys)
    assert resumed[0] == 0, resumed[1]
    assert state() == before and load_checkpoint(f"{prefix}_step_3.pt")["step"] == 3  # it wrote on
    replaced = invoke("train", [*args, "-train_steps", 2, "-seed", 2, "-overwrite"], capsys)
    assert replaced[0] == 0, replaced[1]
    assert all(os.stat(path).st_mtime_ns != before[path][0] for path in earlier)


def test_keep_checkpoint_counts_the_checkpoints_of_earlier_runs_after_a_resume(data, tmp_path):
    args = [*TINY_MODEL, "-save_checkpoint_steps", 1, "-keep_checkpoint", 3, "-valid_steps", 2]
    prefix = str(tmp_path / "m")
    train_in_process(data["plain"], prefix, *args, "-train_steps", 6)
    train_in_process(
        data["plain"], prefix, *args, "-train_steps", 8, "-train_from", f"{prefix}_step_6.pt"
    )
    assert sorted(p for p in os.listdir(tmp_path) if p.endswith(".pt")) == [
        "m_best.pt",
        "m_step_6.pt",
        "m_step_7.pt",
        "m_step_8.pt",
    ]


def test_keep_checkpoint_0_writes_no_checkpoint_as_1x(data, tmp_path):
    """1.x's ModelSaver saved nothing with -keep_checkpoint 0 (onmt_lite kept every checkpoint):
    no step checkpoint, no best one, and an earlier run's are neither refused nor touched."""
    prefix = str(tmp_path / "m")
    earlier = tmp_path / "m_step_1.pt"
    earlier.write_bytes(b"an earlier run's")
    args = [*TINY_MODEL, "-save_checkpoint_steps", 1, "-valid_steps", 1, "-keep_checkpoint", 0]
    _, lines = train_in_process(data["plain"], prefix, *args, "-train_steps", 3)
    assert sorted(os.listdir(tmp_path)) == ["m.log", "m_step_1.pt"]
    assert earlier.read_bytes() == b"an earlier run's"
    assert any(
        line.endswith("-keep_checkpoint 0: this run writes no checkpoint (as OpenNMT-py 1.x)")
        for line in lines
    )
    assert sum("Validation at step" in line for line in lines) == 3


@pytest.mark.parametrize("accum", [1, 3])
def test_single_pass_stops_after_one_pass_over_the_training_data(data, tmp_path, accum):
    """As many steps as the batches of one epoch (counted by a BatchIterator that does not repeat),
    the last step taking those left; the last step is saved."""
    import math

    from onmt_lite.data.iterator import BatchIterator
    from onmt_lite.data.shards import shard_paths

    batches = sum(
        1
        for _ in BatchIterator(
            shard_paths(data["plain"], "train"), 8, "sents", 8192, shuffle=True, seed=1
        )
    )
    prefix = str(tmp_path / "m")
    _, lines = train_in_process(
        data["plain"],
        prefix,
        *TINY_MODEL,
        "-seed",
        1,
        "-single_pass",
        "-accum_count",
        accum,
        "-train_steps",
        100000,
        "-report_every",
        1,
        "-save_checkpoint_steps",
        100000,
    )
    steps = math.ceil(batches / accum)
    assert sorted(step_losses(lines)) == list(range(1, steps + 1))
    assert any(f"1 pass(es) over the training data end at step {steps}" in line for line in lines)
    assert load_checkpoint(f"{prefix}_step_{steps}.pt")["step"] == steps


def test_epochs_stops_after_that_many_passes(data, tmp_path):
    """-epochs 2: the batches of epochs 0 and 1 (each counted by a BatchIterator at that epoch)."""
    from onmt_lite.data.iterator import BatchIterator
    from onmt_lite.data.shards import shard_paths

    def epoch_batches(epoch):
        iterator = BatchIterator(
            shard_paths(data["plain"], "train"), 8, "sents", 8192, shuffle=True, seed=1
        )
        iterator.epoch = epoch
        return sum(1 for _ in iterator)

    steps = epoch_batches(0) + epoch_batches(1)
    _, lines = train_in_process(
        data["plain"],
        str(tmp_path / "m"),
        *TINY_MODEL,
        "-seed",
        1,
        "-epochs",
        2,
        "-train_steps",
        100000,
        "-report_every",
        1,
        "-save_checkpoint_steps",
        100000,
    )
    assert sorted(step_losses(lines)) == list(range(1, steps + 1))
    assert any(f"2 pass(es) over the training data end at step {steps}" in line for line in lines)


def test_an_accumulation_schedule_takes_more_batches_a_step_after_its_steps(data, tmp_path):
    """-accum_count 1 3 -accum_steps 0 2: steps 1-2 take a batch each, steps 3-4 three each: the
    checkpoint's data position is 8 batches."""
    prefix = str(tmp_path / "m")
    train_in_process(
        data["plain"],
        prefix,
        *TINY_MODEL,
        "-seed",
        1,
        "-accum_count",
        1,
        3,
        "-accum_steps",
        0,
        2,
        "-train_steps",
        4,
    )
    assert load_checkpoint(f"{prefix}_step_4.pt")["data"]["batch"] == 8


def test_a_dropout_schedule_changes_the_rates_at_its_steps_and_resumes_exactly(data, tmp_path):
    """-dropout 0.5 0 -dropout_steps 0 3 (1.x's rule: 0 from step 4): the run says so; from step 4
    on a step equals a run built with -dropout 0 given the same weights; a run resumed at step 4
    gives the uninterrupted run's losses."""
    args = [
        *TINY_MODEL,
        "-layers",
        2,
        "-optim",
        "adam",
        "-learning_rate",
        "0.01",
        "-dropout",
        0.5,
        0,
        "-dropout_steps",
        0,
        3,
        "-report_every",
        1,
        "-save_checkpoint_steps",
        4,
        "-seed",
        7,
    ]
    _, full = train_in_process(data["plain"], str(tmp_path / "full"), *args, "-train_steps", 6)
    assert any("dropout 0, attention dropout 0.1 from step 4" in line for line in full)
    _, second = train_in_process(
        data["plain"],
        str(tmp_path / "resumed"),
        *args,
        "-train_steps",
        6,
        "-train_from",
        tmp_path / "full_step_4.pt",
    )
    assert {s: v for s, v in step_losses(full).items() if s > 4} == step_losses(second)
    plain = [a if a != 0.5 else 0.0 for a in args]  # -dropout 0 0: no dropout from the start
    _, no_dropout = train_in_process(
        data["plain"],
        str(tmp_path / "none"),
        *plain,
        "-train_steps",
        6,
        "-train_from",
        tmp_path / "full_step_4.pt",
    )
    assert step_losses(no_dropout) == step_losses(second)
    assert len(set(step_losses(full).values())) == 6
