"""onmt_lite_translate -tgt_prefix and -dump_beam end to end, on a model trained here on the
reversal task."""

import fcntl
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

from onmt_lite.serve.config import translation_options
from onmt_lite.utils.errors import UserError
from tests.helpers import (
    exact_match,
    invoke_captured,
    lines,
    scores_agree,
    trained_reversal_model,
    translate_in_process,
    write_lines,
)

# the tests marked kernels hold a trained model to a quality or compare translations: make
# test-kernels runs them again under other kernels

SMALL = [
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
    "-seed",
    1,
]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return trained_reversal_model(tmp_path_factory, "prefix", [], SMALL, 300)


def translate(model, tmp_path, *args, name="out.txt"):
    out = tmp_path / name
    log = translate_in_process("-model", model["model"], "-output", out, *args)
    return lines(out), log


@pytest.mark.kernels
def test_the_reference_as_prefix_is_reproduced_and_ends_there(model, tmp_path):
    references = lines(model["tgt"])
    outputs, log = translate(
        model, tmp_path, "-src", model["src"], "-tgt", model["tgt"], "-tgt_prefix"
    )
    assert all(
        out.split()[: len(ref.split())] == ref.split() for out, ref in zip(outputs, references)
    )
    assert exact_match(outputs, references) >= 0.95  # the model ends the reversed line there
    assert "GOLD AVG SCORE" in log and "BLEU" not in log  # a prefix is no reference


@pytest.mark.kernels
def test_half_a_reference_as_prefix_starts_every_output(model, tmp_path):
    halves = [" ".join(ref.split()[: len(ref.split()) // 2]) for ref in lines(model["tgt"])]
    prefixes = write_lines(tmp_path / "prefixes.txt", halves)
    free, _ = translate(model, tmp_path, "-src", model["src"], name="free.txt")
    outputs, _ = translate(
        model, tmp_path, "-src", model["src"], "-tgt", prefixes, "-tgt_prefix", "-beam_size", 3
    )
    assert all(
        out.split()[: len(half.split())] == half.split() for out, half in zip(outputs, halves)
    )
    assert exact_match(outputs, lines(model["tgt"])) >= exact_match(free, lines(model["tgt"]))


def test_tgt_prefix_without_tgt_is_refused_before_any_output(model, tmp_path, capsys):
    out = tmp_path / "o.txt"
    result = run_translate(capsys, model, "-src", model["src"], "-output", out, "-tgt_prefix")
    assert result.returncode == 2
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .endswith("-tgt_prefix needs -tgt: the file of target prefixes, one a line")
    )
    assert not out.exists()


def test_a_dump_beam_path_that_is_a_directory_is_refused_before_any_output(model, tmp_path, capsys):
    out = tmp_path / "o.txt"
    result = run_translate(
        capsys, model, "-src", model["src"], "-output", out, "-dump_beam", tmp_path
    )
    assert result.returncode == 2
    assert f"-dump_beam {tmp_path}: is a directory" in result.stderr.strip().splitlines()[-1]
    assert not out.exists()


def backtrack_words(entry, step, place):
    words = []
    while step >= 0:
        words.append(entry["predicted_tokens"][step][place])
        place = entry["beam_parent_ids"][step][place]
        step = step - 1
    return words[::-1]


@pytest.mark.kernels
@pytest.mark.parametrize("beam", [1, 4])
def test_the_dump_leads_to_each_output_line_and_pieces_and_streams_change_nothing(
    model, tmp_path, beam
):
    sources = lines(model["src"])[:12]
    src = write_lines(tmp_path / "src.txt", sources[:5] + [""] + sources[5:])
    runs = []
    for extra in ([], ["-shard_size", 4], ["-threads", 2]):  # 5 batches: 2 streams with -threads 2
        path = tmp_path / f"beam{len(runs)}.json"
        outputs, _ = translate(
            model,
            tmp_path,
            "-src",
            src,
            "-beam_size",
            beam,
            "-batch_size",
            3,
            "-dump_beam",
            path,
            *extra,
        )
        runs.append((outputs, json.loads(path.read_text(encoding="utf-8"))))
    for outputs, entries in runs:
        assert [e["line"] for e in entries] == list(range(1, len(sources) + 2))
        for entry, output in zip(entries, outputs):
            if not output:
                assert entry["predicted_ids"] == [] and entry["n_best"] == []
                continue
            end = entry["n_best"][0]
            assert backtrack_words(entry, end["step"], end["beam"]) == output.split() + ["</s>"]
            if beam == 1:
                assert len(entry["predicted_ids"]) == len(output.split()) + 1
    entries = runs[0][1]
    for _, other in runs[1:]:
        assert [e["predicted_ids"] for e in other] == [e["predicted_ids"] for e in entries]
        assert [e["beam_parent_ids"] for e in other] == [e["beam_parent_ids"] for e in entries]
        for entry, other_entry, output in zip(entries, other, runs[0][0]):
            if entry["n_best"]:
                assert scores_agree(
                    entry["n_best"][0]["score"],
                    other_entry["n_best"][0]["score"],
                    len(output.split()) + 1,
                )


def test_the_server_refuses_both_options_by_name(model):
    for key in ("tgt_prefix", "dump_beam"):
        with pytest.raises(UserError, match=f"option '{key}' is not for the server"):
            translation_options(
                {key: True if key == "tgt_prefix" else "beam.json"},
                [model["model"]],
                "/",
                "model 0",
            )


def run_translate(capsys, model, *args, file_size_limit=None):
    """onmt_lite_translate in this process (files limited to ``file_size_limit`` bytes)."""
    args = ["-model", model["model"], *args]
    code, out, err = invoke_captured("translate", args, capsys, file_size_limit)
    return subprocess.CompletedProcess(args, code, out, err)


def translate_process(model, *args):
    """onmt_lite_translate in a process of its own (its log read from its standard error)."""
    command = [sys.executable, "-m", "onmt_lite.bin.translate", "-model", model["model"]]
    return subprocess.run([*command, *map(str, args)], capture_output=True, text=True)


def test_two_outputs_naming_one_file_are_refused_before_any_work(model, tmp_path, capsys):
    same = tmp_path / "same.txt"
    same.write_text("an earlier file\n")
    (tmp_path / "link.txt").symlink_to(same)
    (tmp_path / "plots").mkdir()
    before = os.stat(same).st_mtime_ns
    link = tmp_path / "link.txt"
    plots = tmp_path / "plots"
    cases = [
        (
            ["-output", same, "-dump_beam", same],
            f"-dump_beam {same}: the same file as -output {same}",
        ),
        (
            ["-output", same, "-dump_beam", link],
            f"-dump_beam {link}: the same file as -output {same}",
        ),
        (
            ["-output", same, "-log_file", same],
            f"-log_file {same}: the same file as -output {same}",
        ),
        (  # refused before the log opens: no file made
            ["-output", tmp_path / "new.txt", "-log_file", tmp_path / "new.txt"],
            f"-log_file {tmp_path / 'new.txt'}: the same file as -output {tmp_path / 'new.txt'}",
        ),
        (
            ["-output", plots / "00001.png", "-attn_plot", plots],
            f"-output {plots / '00001.png'}: -attn_plot {plots} writes there",
        ),
    ]
    for args, message in cases:
        result = run_translate(capsys, model, "-src", model["src"], *args)
        assert result.returncode == 2, result.stderr
        last = result.stderr.strip().splitlines()[-1]
        assert last.startswith(f"onmt_lite_translate: error: {message}"), last
        assert "Traceback" not in result.stderr and "PRED AVG SCORE" not in result.stderr
        assert same.read_text() == "an earlier file\n" and os.stat(same).st_mtime_ns == before
        assert sorted(os.listdir(tmp_path)) == ["link.txt", "plots", "same.txt"]
        assert os.listdir(tmp_path / "plots") == []
    # two names of standard output are written into in turn: nothing is replaced, nothing lost
    result = translate_process(
        model, "-src", model["src"], "-output", "-", "-dump_beam", "/dev/stdout"
    )
    assert result.returncode == 0, result.stderr
    printed = result.stdout.splitlines()
    assert len(printed) == len(lines(model["src"])) + 1  # the translations, then the dump's line
    assert len(json.loads(printed[-1])) == len(lines(model["src"]))


def test_an_output_over_one_of_the_inputs_is_refused_before_any_work(model, tmp_path, capsys):
    """-output over -src replaced the source by its translation (the run read it, then renamed its
    output over it); the log appended to it would have been read as more lines."""
    source = tmp_path / "src.txt"
    source.write_bytes(pathlib.Path(model["src"]).read_bytes())
    target = tmp_path / "tgt.txt"
    target.write_bytes(pathlib.Path(model["tgt"]).read_bytes())
    table = tmp_path / "table.txt"
    table.write_text("a|||b\n")
    (tmp_path / "link.txt").symlink_to(source)
    checkpoint = model["model"]
    files = {path: path.read_bytes() for path in (source, target, table)}
    before = os.stat(checkpoint).st_mtime_ns
    reading = ["-src", source, "-tgt", target, "-replace_unk", "-phrase_table", table]
    out = tmp_path / "o.txt"
    cases = [
        (["-output", source], f"-output {source}: the same file as -src {source}"),
        (
            ["-output", tmp_path / "link.txt"],
            f"-output {tmp_path / 'link.txt'}: the same file as -src",
        ),
        (["-output", out, "-dump_beam", target], f"-dump_beam {target}: the same file as -tgt"),
        (["-output", out, "-log_file", source], f"-log_file {source}: the same file as -src"),
        (["-output", table], f"-output {table}: the same file as -phrase_table {table}"),
        (["-output", checkpoint], f"-output {checkpoint}: the same file as -model {checkpoint}"),
    ]
    for args, message in cases:
        result = run_translate(capsys, model, *reading, *args)
        assert result.returncode == 2, result.stderr
        last = result.stderr.strip().splitlines()[-1]
        assert last.startswith(f"onmt_lite_translate: error: {message}"), last
        assert last.endswith("which this command reads; give the output a file of its own")
        assert all(path.read_bytes() == data for path, data in files.items())
        assert os.stat(checkpoint).st_mtime_ns == before
        assert not out.exists()


def test_a_refused_dump_beam_leaves_no_output_nor_temporary(model, tmp_path, capsys):
    existing = tmp_path / "existing.txt"
    existing.write_text("an earlier translation\n")
    for output in (tmp_path / "new.txt", existing):
        result = run_translate(
            capsys,
            model,
            "-src",
            model["src"],
            "-output",
            output,
            "-dump_beam",
            tmp_path / "missing" / "beam.json",
        )
        assert result.returncode == 2
        assert f"-dump_beam {tmp_path / 'missing' / 'beam.json'}: directory" in result.stderr
        # refused at the end (its file outgrows the limit; the translations do not): none is written
        result = run_translate(
            capsys,
            model,
            "-src",
            model["src"],
            "-output",
            output,
            "-dump_beam",
            tmp_path / "beam.json",
            file_size_limit=4096,
        )
        assert result.returncode == 2, result.stderr
        last = result.stderr.strip().splitlines()[-1]
        beam = tmp_path / "beam.json"
        assert last == f"onmt_lite_translate: error: {beam}: cannot write (File too large)"
        assert sorted(os.listdir(tmp_path)) == ["existing.txt"]
        assert existing.read_text() == "an earlier translation\n"
    result = run_translate(
        capsys,
        model,
        "-src",
        model["src"],
        "-output",
        tmp_path / "new.txt",
        "-dump_beam",
        tmp_path / "beam.json",
    )
    assert result.returncode == 0, result.stderr  # the same run without the limit writes both
    assert len(lines(tmp_path / "new.txt")) == len(json.loads((tmp_path / "beam.json").read_text()))


def temporaries(directory, name):
    names = os.listdir(directory)
    return sorted(p for p in names if p.startswith(f".{name}.") and p.endswith(".tmp"))


def flocked(path) -> bool:
    """Whether a process holds a ``flock`` on ``path`` (tried without waiting, released at once)."""
    with open(path, "rb") as f:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f.fileno(), fcntl.LOCK_UN)
        return False


def test_a_killed_runs_temporary_is_removed_by_the_next_run_and_a_live_ones_kept(
    model, tmp_path, capsys
):
    # the translations that find the temporaries run in this process: a lock is held by an open
    # file, not by a process
    src = write_lines(tmp_path / "src.txt", lines(model["src"]) * 100)
    out = tmp_path / "out.txt"
    stale = tmp_path / ".out.txt.k1ll3d00.tmp"  # as a killed run leaves it
    stale.write_text("half a transl")
    live = tmp_path / ".out.txt.l1ve0000.tmp"  # a running translation's: locked while it lives
    live.write_text("half")
    with open(live, "rb") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        result = run_translate(capsys, model, "-src", model["src"], "-output", out)
        assert result.returncode == 0, result.stderr
        assert f"removed {stale}, left by an interrupted translation" in result.stderr
        assert temporaries(tmp_path, "out.txt") == [live.name]
    assert len(lines(out)) == len(lines(model["src"]))
    live.unlink()
    # a real one: stopped while it writes (alive, its temporary kept), then killed (removed)
    command = [sys.executable, "-m", "onmt_lite.bin.translate", "-model", model["model"]]
    proc = subprocess.Popen([*command, "-src", src, "-output", out], stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while proc.poll() is None and time.time() < deadline:
        made = temporaries(tmp_path, "out.txt")
        if made:
            proc.send_signal(signal.SIGSTOP)
            if flocked(tmp_path / made[0]):
                break
            proc.send_signal(signal.SIGCONT)  # stopped between making its temporary and locking it
        time.sleep(0.01)
    try:
        written = temporaries(tmp_path, "out.txt")
        assert proc.poll() is None and len(written) == 1, "it ended before it was caught"
        result = run_translate(capsys, model, "-src", model["src"], "-output", out)
        assert result.returncode == 0 and "removed" not in result.stderr, result.stderr
        assert written[0] in temporaries(tmp_path, "out.txt")
    finally:
        proc.kill()
        proc.wait()
    result = run_translate(capsys, model, "-src", model["src"], "-output", out)
    assert result.returncode == 0, result.stderr
    assert f"removed {tmp_path / written[0]}, left by an interrupted translation" in result.stderr
    assert temporaries(tmp_path, "out.txt") == [] and len(lines(out)) == len(lines(model["src"]))
