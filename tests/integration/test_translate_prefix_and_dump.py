"""onmt_lite_translate -tgt_prefix and -dump_beam end to end, on a model trained here on the reversal task."""
import json

import pytest

from onmt_lite.serve.config import translation_options
from onmt_lite.utils.errors import UserError
from tests.helpers import (
    exact_match,
    lines,
    run_cli,
    scores_agree,
    trained_reversal_model,
    write_lines,
)

# the tests marked kernels hold a trained model to a quality or compare translations: make
# test-kernels runs them again under other kernels

SMALL = ["-rnn_size", 64, "-word_vec_size", 32, "-layers", 1, "-batch_size", 32, "-optim", "adam",
         "-learning_rate", 0.01, "-dropout", 0, "-seed", 1]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return trained_reversal_model(tmp_path_factory, "prefix", [], SMALL, 300)


def translate(model, tmp_path, *args, name="out.txt"):
    out = tmp_path / name
    result = run_cli("translate", "-model", model["model"], "-output", out, *map(str, args))
    assert result.returncode == 0, result.stderr
    return lines(out), result.stderr


@pytest.mark.kernels
def test_the_reference_as_prefix_is_reproduced_and_ends_there(model, tmp_path):
    references = lines(model["tgt"])
    outputs, log = translate(model, tmp_path, "-src", model["src"], "-tgt", model["tgt"], "-tgt_prefix")
    assert all(out.split()[:len(ref.split())] == ref.split() for out, ref in zip(outputs, references))
    assert exact_match(outputs, references) >= 0.95  # the model ends the reversed line there
    assert "GOLD AVG SCORE" in log and "BLEU" not in log  # a prefix is no reference


@pytest.mark.kernels
def test_half_a_reference_as_prefix_starts_every_output(model, tmp_path):
    halves = [" ".join(ref.split()[: len(ref.split()) // 2]) for ref in lines(model["tgt"])]
    prefixes = write_lines(tmp_path / "prefixes.txt", halves)
    free, _ = translate(model, tmp_path, "-src", model["src"], name="free.txt")
    outputs, _ = translate(model, tmp_path, "-src", model["src"], "-tgt", prefixes, "-tgt_prefix", "-beam_size", 3)
    assert all(out.split()[:len(half.split())] == half.split() for out, half in zip(outputs, halves))
    assert exact_match(outputs, lines(model["tgt"])) >= exact_match(free, lines(model["tgt"]))


def test_tgt_prefix_without_tgt_is_refused_before_any_output(model, tmp_path):
    result = run_cli("translate", "-model", model["model"], "-src", model["src"], "-output", tmp_path / "o.txt",
                     "-tgt_prefix")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].endswith("-tgt_prefix needs -tgt: the file of target prefixes, "
                                                           "one a line")
    assert not (tmp_path / "o.txt").exists()


def test_a_dump_beam_path_that_is_a_directory_is_refused_before_any_output(model, tmp_path):
    result = run_cli("translate", "-model", model["model"], "-src", model["src"], "-output", tmp_path / "o.txt",
                     "-dump_beam", tmp_path)
    assert result.returncode == 2
    assert f"-dump_beam {tmp_path}: is a directory" in result.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "o.txt").exists()


def backtrack_words(entry, step, place):
    words = []
    while step >= 0:
        words.append(entry["predicted_tokens"][step][place])
        place, step = entry["beam_parent_ids"][step][place], step - 1
    return words[::-1]


@pytest.mark.kernels
@pytest.mark.parametrize("beam", [1, 4])
def test_the_dump_leads_to_each_output_line_and_pieces_and_streams_change_nothing(model, tmp_path, beam):
    sources = lines(model["src"])[:12]
    src = write_lines(tmp_path / "src.txt", sources[:5] + [""] + sources[5:])
    runs = []
    for extra in ([], ["-shard_size", 4], ["-threads", 2]):  # 5 batches: 2 streams with -threads 2
        path = tmp_path / f"beam{len(runs)}.json"
        outputs, _ = translate(model, tmp_path, "-src", src, "-beam_size", beam, "-batch_size", 3, "-dump_beam", path,
                               *extra)
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
                assert scores_agree(entry["n_best"][0]["score"], other_entry["n_best"][0]["score"],
                                    len(output.split()) + 1)


def test_the_server_refuses_both_options_by_name(model):
    for key in ("tgt_prefix", "dump_beam"):
        with pytest.raises(UserError, match=f"option '{key}' is not for the server"):
            translation_options({key: True if key == "tgt_prefix" else "beam.json"}, [model["model"]], "/", "model 0")
