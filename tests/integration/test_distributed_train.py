"""onmt_lite_train with 2 gloo processes on this machine: -world_size (onmt_lite starts them) and
torchrun, checkpoints across process counts, a killed rank, and a real corpus's loss curve."""

import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from onmt_lite.models.checkpoint import load_checkpoint
from tests.helpers import (
    free_port,
    preprocess_in_process,
    run_cli,
    run_in_process,
    shared_data,
    step_losses,
    train_in_process,
)

MODEL = [
    "-rnn_size",
    32,
    "-word_vec_size",
    16,
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
    3,
]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return preprocess_in_process(str(tmp_path_factory.mktemp("dist")))


def log_lines(prefix):
    with open(f"{prefix}.log", encoding="utf-8") as f:
        return f.read().splitlines()


def train_command(data, prefix, *args, launcher=()):
    """onmt_lite_train's command line (or ``launcher``'s) for MODEL, logging to PREFIX.log."""
    command = [*launcher] if launcher else [sys.executable, "-m", "onmt_lite.bin.train"]
    return [
        *command,
        "-data",
        data,
        "-save_model",
        prefix,
        "-log_file",
        f"{prefix}.log",
        *map(str, MODEL),
        *map(str, args),
    ]


def run_train(command):
    """Run the training ``command`` to the end, successfully; returns the CompletedProcess."""
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return result


def train(data, prefix, *args, launcher=()):
    """Train to the end; returns the lines of PREFIX.log."""
    run_train(train_command(data, prefix, *args, launcher=launcher))
    return log_lines(prefix)


def train_in_one_process(data, prefix, *args):
    """``train`` in one process, this one (a new one spends seconds importing); returns the lines
    of PREFIX.log."""
    return train_in_process(data, prefix, *MODEL, *args)[1]


# 6 steps, validating and saving every 3: the steps of the two-process run that several tests read
SIX_STEPS = ["-train_steps", 6, "-save_checkpoint_steps", 3, "-valid_steps", 3]


@pytest.fixture(scope="module")
def two_processes(data, tmp_path_factory):
    """SIX_STEPS with -world_size 2: the run's ``command``, ``prefix``, ``lines`` (its log) and
    ``stderr``."""
    prefix = str(tmp_path_factory.mktemp("two_processes") / "m")
    idle = ["-adagrad_accumulator_init", 0.1]  # with -optim adam: every process would warn
    command = train_command(
        data, prefix, *SIX_STEPS, *idle, "-world_size", 2, "-master_port", free_port()
    )
    result = run_train(command)
    return {
        "command": command,
        "prefix": prefix,
        "lines": log_lines(prefix),
        "stderr": result.stderr,
    }


def test_world_size_2_logs_validates_and_saves_once_and_its_checkpoints_resume_in_one_process(
    data, tmp_path, two_processes
):
    prefix = two_processes["prefix"]
    lines = two_processes["lines"]
    assert any("2 processes (gloo)" in line for line in lines)
    assert [
        int(line.split("] Step ")[1].split("/")[0]) for line in lines if "] Step " in line
    ] == list(range(1, 7))
    assert sum("Validation at step" in line for line in lines) == 2
    saved = load_checkpoint(f"{prefix}_step_3.pt")
    # both processes' batches consumed
    assert saved["step"] == 3 and saved["data"]["batch"] == 3 * 2
    resumed = train_in_one_process(
        data, str(tmp_path / "single"), "-train_from", f"{prefix}_step_3.pt", "-train_steps", 5
    )
    assert any("resuming from" in line and "at step 3" in line for line in resumed)
    assert sorted(step_losses(resumed)) == [4, 5]


def test_world_size_2_saves_the_moving_average_of_the_weights_every_process_trains(data, tmp_path):
    """-average_decay with 2 processes: rank 0's average follows 1.x's formula over the raw weights
    that the checkpoints keep, and a resume in one process continues that average."""
    prefix = str(tmp_path / "m")
    decay = 0.1
    train(
        data,
        prefix,
        "-world_size",
        2,
        "-master_port",
        free_port(),
        "-train_steps",
        3,
        "-save_checkpoint_steps",
        1,
        "-average_decay",
        decay,
    )
    saved = {step: load_checkpoint(f"{prefix}_step_{step}.pt") for step in (1, 2, 3)}
    average = dict(saved[1]["raw_weights"]["model"])
    for step in (2, 3):
        w = max(decay, 1 - (step + 1) / (step + 10))
        raw = saved[step]["raw_weights"]["model"]
        average = {k: (1 - w) * average[k] + w * raw[k] for k in average}
        assert all(torch.equal(saved[step]["model"][k], average[k]) for k in average)
    resumed = train_in_one_process(
        data,
        str(tmp_path / "single"),
        "-train_from",
        f"{prefix}_step_2.pt",
        "-train_steps",
        3,
        "-average_decay",
        decay,
    )
    assert any("moving average continues" in line for line in resumed)
    # one process: step 3 has other batches
    single = load_checkpoint(str(tmp_path / "single_step_3.pt"))
    w = 1 - 4 / 13
    assert all(
        torch.equal(
            single["model"][k],
            (1 - w) * saved[2]["model"][k] + w * single["raw_weights"]["model"][k],
        )
        for k in average
    )


def test_a_single_process_checkpoint_resumes_with_two_processes(data, tmp_path):
    single = str(tmp_path / "single")
    train_in_one_process(data, single, "-train_steps", 2)
    lines = train(
        data,
        str(tmp_path / "two"),
        "-train_from",
        f"{single}_step_2.pt",
        "-train_steps",
        4,
        "-world_size",
        2,
        "-master_port",
        free_port(),
    )
    assert sorted(step_losses(lines)) == [3, 4]
    assert load_checkpoint(str(tmp_path / "two_step_4.pt"))["step"] == 4


def test_torchrun_runs_the_same_training_as_world_size(data, tmp_path, two_processes):
    torchrun = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        "1",
        "--nproc_per_node",
        "2",
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        str(free_port()),
        # its agent's logs: else a torchelastic_* directory in the system's temporary one, kept
        "--log-dir",
        str(tmp_path / "torchrun_logs"),
        "-m",
        "onmt_lite.bin.train",
    ]
    launched = train(data, str(tmp_path / "torchrun"), *SIX_STEPS, launcher=torchrun)
    assert any("2 processes (gloo)" in line for line in launched)
    # one code path (both 1 thread a process here)
    spawned = step_losses(two_processes["lines"])
    assert sorted(spawned) == list(range(1, 7)) and step_losses(launched) == spawned


def child_pids(pid):
    children = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    cmdline = f.read()
            except OSError:
                continue
            if int(fields[1]) == pid and b"resource_tracker" not in cmdline:
                children.append(int(entry))
    return children


def running(pid):
    """The process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_killing_one_rank_stops_the_others_instead_of_hanging(data, tmp_path):
    prefix = str(tmp_path / "m")
    proc = subprocess.Popen(
        train_command(
            data, prefix, "-train_steps", 100000, "-world_size", 2, "-master_port", free_port()
        ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not (
            os.path.exists(f"{prefix}.log") and 3 in step_losses(log_lines(prefix))
        ):
            assert proc.poll() is None, proc.stderr.read()
            time.sleep(0.05)
        workers = child_pids(proc.pid)
        assert len(workers) == 2
        os.kill(workers[1], signal.SIGKILL)
        _, stderr = proc.communicate(timeout=60)  # not a hang
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1
    assert "ended (killed by SIGKILL); the other processes were stopped" in stderr
    time.sleep(0.5)
    assert not [pid for pid in workers if running(pid)]


def test_bad_input_that_every_rank_meets_is_one_error_line_and_exit_2(data, tmp_path):
    """A refusal once the processes have met (the learning rate's check, on every rank): rank 0's
    one line last, exit 2, and no directory left for -save_model. The ranks ended through the
    interpreter's finalization, where a gloo thread could abort one (a run in three here: "rank 1
    ended (killed by SIGABRT)" last, exit 1); they now end by exit_process."""
    bad = ["-learning_rate", 1e10, "-lr_mult", "*=1e38"]
    for _ in range(3):
        result = run_cli(
            "train", "-data", data, "-save_model", tmp_path / "new" / "m", *MODEL, *bad,
            "-world_size", 2, "-master_port", free_port(),
        )  # fmt: skip
        assert result.returncode == 2, result.stderr
        assert result.stderr.strip().splitlines()[-1] == (
            "onmt_lite_train: error: -learning_rate 1e+10 times -lr_mult 1e+38 "
            "(encoder.embeddings.lut.weight, ...) is beyond float32's range"
        ), result.stderr
        assert os.listdir(tmp_path) == []


def test_world_size_that_disagrees_with_gpu_ranks_is_refused(data, tmp_path):
    result = run_in_process(
        "train", "-data", data, "-save_model", tmp_path / "m", "-world_size", 2, "-gpu_ranks", 0
    )
    assert result.returncode == 2
    assert "-world_size 2 but -gpu_ranks lists 1 device(s)" in result.stderr
    assert not list(tmp_path.iterdir())


@pytest.mark.skipif(torch.cuda.device_count() >= 4, reason="this machine has the 4 CUDA devices")
def test_the_faqs_four_gpu_line_without_those_gpus_is_one_error_before_any_start(data, tmp_path):
    """1.x's FAQ Transformer line ends in -world_size 4 -gpu_ranks 0 1 2 3: without 4 CUDA devices
    one line says so, exit 2, and no process starts (none logs a rank, none is terminated)."""
    faq = [
        "-layers",
        6,
        "-rnn_size",
        16,
        "-word_vec_size",
        16,
        "-transformer_ff",
        32,
        "-heads",
        2,
        "-encoder_type",
        "transformer",
        "-decoder_type",
        "transformer",
        "-position_encoding",
        "-train_steps",
        10,
        "-world_size",
        4,
        "-gpu_ranks",
        0,
        1,
        2,
        3,
    ]
    result = run_in_process(
        "train", "-data", data, "-save_model", tmp_path / "m", *faq, "-log_file", tmp_path / "m.log"
    )
    assert result.returncode == 2
    assert result.stderr.splitlines() == [result.stderr.strip()]  # one line
    assert "-world_size 4 asks for CUDA device(s)" in result.stderr
    assert "no process was started" in result.stderr
    assert not list(tmp_path.iterdir())


def test_two_processes_on_g2p_follow_the_loss_curve_of_one_process_with_twice_the_batch(tmp_path):
    corpus = shared_data("g2p-sr")
    prefix = str(tmp_path / "g2p")
    result = run_in_process(
        "preprocess",
        "-train_src",
        f"{corpus}/src.train",
        "-train_tgt",
        f"{corpus}/tgt.train",
        "-save_data",
        prefix,
    )
    assert result.returncode == 0, result.stderr
    settings = [
        "-rnn_size",
        64,
        "-word_vec_size",
        32,
        "-layers",
        1,
        "-optim",
        "adam",
        "-learning_rate",
        0.005,
        "-report_every",
        10,
        "-seed",
        1,
        "-train_steps",
        100,
        "-dropout",
        0,
    ]
    curves = {}
    for name, run, extra in (
        ("one", run_in_process, ["-batch_size", 64]),
        ("two", run_cli, ["-batch_size", 32, "-world_size", 2, "-master_port", free_port()]),
    ):
        result = run(
            "train",
            "-data",
            prefix,
            "-save_model",
            tmp_path / name,
            "-log_file",
            tmp_path / f"{name}.log",
            *settings,
            *extra,
        )
        assert result.returncode == 0, result.stderr
        curves[name] = {
            step: float(v.split("xent:")[1])
            for step, v in step_losses(log_lines(tmp_path / name)).items()
        }
    assert sorted(curves["one"]) == sorted(curves["two"]) == list(range(10, 101, 10))
    late = {
        name: sum(curve[step] for step in range(60, 101, 10)) / 5 for name, curve in curves.items()
    }
    # both learn (measured: 3.18 and 3.15 at step 10, 2.71 and 2.63 late)
    for name, curve in curves.items():
        assert late[name] < 0.9 * curve[10], (name, curve)
    # and at the same pace: the mean cross-entropy of steps 60-100 within noise of each other
    assert abs(late["two"] - late["one"]) < 0.06 * late["one"], curves


def test_gpu_verbose_level_lets_every_process_log_with_its_rank(data, tmp_path, two_processes):
    quiet = two_processes["stderr"]
    verbose = run_train(
        train_command(
            data,
            str(tmp_path / "m"),
            "-world_size",
            2,
            "-master_port",
            free_port(),
            "-train_steps",
            2,
            "-gpu_verbose_level",
            1,
        )
    )
    # the run's checkpoints are there: no -overwrite, no start
    again = subprocess.run(two_processes["command"], capture_output=True, text=True, timeout=300)
    assert again.returncode == 2 and len(again.stderr.strip().splitlines()) == 1, again.stderr
    assert "an earlier run's checkpoints are there" in again.stderr  # before any process started
    assert "rank 1: " not in quiet
    assert quiet.count("-adagrad_accumulator_init 0.1 has no effect") == 1  # rank 0's warning
    assert any(
        "rank 1: model: " in line and "parameters" in line for line in verbose.stderr.splitlines()
    )
    # steps: rank 0's report
    assert not any("rank 1: Step" in line for line in verbose.stderr.splitlines())
