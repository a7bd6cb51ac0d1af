"""Several training corpora: onmt_lite_preprocess -train_ids, onmt_lite_train -data_ids
-data_weights (per-corpus shards, one vocabulary, the weighted round robin, exact resume,
refusals)."""

import os

import pytest
import torch

from onmt_lite.models.checkpoint import load_checkpoint
from onmt_lite.utils.errors import UserError
from tests.helpers import (
    TINY_MODEL,
    free_port,
    reversal_corpus,
    run_in_process,
    step_losses,
    train_in_process,
    write_lines,
)


def load(path):
    return torch.load(path, weights_only=True)


def error_of(result):
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr
    return result.stderr.strip().splitlines()[-1]


@pytest.fixture
def tiny(tmp_path):
    """Two tiny corpora; a's third pair has a source longer than -src_seq_length 3."""
    files = {
        "src_a": ["x y", "y z y", "q q q q"],
        "tgt_a": ["k", "m n", "o"],
        "src_b": ["z w", "w w w"],
        "tgt_b": ["n k", "k"],
    }
    out = tmp_path / "out"
    out.mkdir()
    return {name: write_lines(tmp_path / name, text) for name, text in files.items()}, out


def test_two_corpora_get_their_own_shards_and_one_vocabulary_counted_over_both(tiny):
    files, out = tiny
    result = run_in_process(
        "preprocess",
        "-train_src",
        files["src_a"],
        files["src_b"],
        "-train_tgt",
        files["tgt_a"],
        files["tgt_b"],
        "-train_ids",
        "a",
        "b",
        "-valid_src",
        files["src_b"],
        "-valid_tgt",
        files["tgt_b"],
        "-save_data",
        out / "d",
        "-shard_size",
        1,
        "-src_seq_length",
        3,
    )
    assert result.returncode == 0, result.stderr
    assert sorted(os.listdir(out)) == [
        "d.train_a.0.pt",
        "d.train_a.1.pt",
        "d.train_b.0.pt",
        "d.train_b.1.pt",
        "d.valid.0.pt",
        "d.valid.1.pt",
        "d.vocab.pt",
    ]
    vocab = load(out / "d.vocab.pt")
    # by hand over the kept pairs of both corpora (q q q q / o filtered): w 4, y 3, z 2, x 1; k 3, n
    # 2, m 1
    assert vocab["src"][4:] == ["w", "y", "z", "x"] and vocab["tgt"][4:] == ["k", "n", "m"]
    assert vocab["train_ids"] == ["a", "b"]
    assert vocab["counts"]["train_a"]["examples"] == vocab["counts"]["train_b"]["examples"] == 2
    second_b = load(out / "d.train_b.1.pt")
    assert second_b["indices"].tolist() == [2]  # line numbers within its own corpus
    assert [vocab["src"][i] for i in second_b["src"].tolist()] == ["w", "w", "w"]
    assert [load(out / f"d.train_a.{n}.pt")["indices"].tolist() for n in (0, 1)] == [[1], [2]]


@pytest.mark.parametrize(
    "case,expected",
    [
        ("tgt_count", "-train_src gives 2 file(s) but -train_tgt 1"),
        ("no_ids", "-train_src gives 2 corpora: name each with -train_ids"),
        ("id_count", "-train_ids gives 1 id(s) for 2 corpora"),
        ("duplicate", "-train_ids a a: a is given twice"),
        ("bad_id", "-train_ids a.1: an id is made of letters, digits, - and _"),
        ("align", "-train_align aligns one training corpus; -train_src gives 2"),
    ],
)
def test_bad_corpus_lists_are_refused_and_nothing_is_written(tiny, case, expected):
    files, out = tiny
    src = [files["src_a"], files["src_b"]]
    tgt = [files["tgt_a"], files["tgt_b"]]
    ids = ["-train_ids", "a", "b"]
    if case == "tgt_count":
        tgt = tgt[:1]
    elif case == "no_ids":
        ids = []
    elif case == "id_count":
        ids = ["-train_ids", "a"]
    elif case == "duplicate":
        ids = ["-train_ids", "a", "a"]
    elif case == "bad_id":
        src = src[:1]
        tgt = tgt[:1]
        ids = ["-train_ids", "a.1"]
    elif case == "align":
        ids += ["-train_align", files["src_a"]]
    result = run_in_process(
        "preprocess", "-train_src", *src, "-train_tgt", *tgt, *ids, "-save_data", out / "d"
    )
    assert expected in error_of(result)
    assert os.listdir(out) == []


def test_overwrite_removes_the_shards_of_corpora_the_new_run_lacks(tiny):
    files, out = tiny
    named = [
        "-train_src",
        files["src_a"],
        files["src_b"],
        "-train_tgt",
        files["tgt_a"],
        files["tgt_b"],
        "-train_ids",
        "a",
        "b",
        "-save_data",
        out / "d",
    ]
    assert run_in_process("preprocess", *named).returncode == 0
    os.remove(out / "d.vocab.pt")
    unnamed = ["-train_src", files["src_a"], "-train_tgt", files["tgt_a"], "-save_data", out / "d"]
    assert "d.train_a.0.pt already exists" in error_of(run_in_process("preprocess", *unnamed))
    result = run_in_process("preprocess", *unnamed, "-overwrite")
    assert result.returncode == 0, result.stderr
    # train_a and train_b would be read as data
    assert sorted(os.listdir(out)) == ["d.train.0.pt", "d.vocab.pt"]
    assert load(out / "d.vocab.pt")["train_ids"] == [None]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """Corpus a: 200 reversal pairs (25 batches of 8); corpus b: 12 (2 batches: 8 and 4), one valid
    set."""
    from onmt_lite.opts import build_parser, config_opts, parse, preprocess_opts
    from onmt_lite.preprocess import preprocess

    directory = tmp_path_factory.mktemp("corpora")
    for name in ("a", "b"):
        os.makedirs(directory / name)
    a = reversal_corpus(str(directory / "a"), n_train=200)
    b = reversal_corpus(str(directory / "b"), n_train=12, seed=1)
    prefix = str(directory / "data")
    preprocess(
        parse(
            build_parser("p", [config_opts, preprocess_opts]),
            [
                "-train_src",
                a["src_train"],
                b["src_train"],
                "-train_tgt",
                a["tgt_train"],
                b["tgt_train"],
                "-train_ids",
                "a",
                "b",
                "-valid_src",
                a["src_valid"],
                "-valid_tgt",
                a["tgt_valid"],
                "-save_data",
                prefix,
            ],
        )
    )
    return prefix


WEIGHTED = [*TINY_MODEL, "-data_ids", "a", "b", "-data_weights", 3, 1]


def test_a_resumed_run_with_weights_3_1_gives_the_losses_of_the_uninterrupted_run(data, tmp_path):
    """Resumed at step 3 (6 batches drawn: turn 2 of a a a b, b in its first epoch); by step 8
    corpus b (2 batches an epoch) is in its third epoch."""
    args = [
        *WEIGHTED,
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
        4,
        "-save_checkpoint_steps",
        3,
        "-seed",
        7,
        "-pool_factor",
        2,
    ]
    _, full = train_in_process(data, str(tmp_path / "full"), *args, "-train_steps", 8)
    _, first = train_in_process(data, str(tmp_path / "part"), *args, "-train_steps", 3)
    _, second = train_in_process(
        data,
        str(tmp_path / "part"),
        *args,
        "-train_steps",
        8,
        "-train_from",
        tmp_path / "part_step_3.pt",
    )
    full_losses = step_losses(full)
    resumed = {**step_losses(first), **step_losses(second)}
    assert sorted(full_losses) == list(range(1, 9)) and len(set(full_losses.values())) == 8
    assert resumed == full_losses
    assert load_checkpoint(str(tmp_path / "part_step_3.pt"))["data"] == {
        "round": [["a", 3], ["b", 1]],
        "corpus": 0,
        "count": 2,
        "corpora": {
            "a": {"epoch": 0, "shard": 0, "batch": 5},
            "b": {"epoch": 0, "shard": 0, "batch": 1},
        },
    }


def test_the_command_line_trains_on_weighted_corpora_and_logs_them(data, tmp_path):
    result = run_in_process(
        "train",
        "-data",
        data,
        *WEIGHTED,
        "-train_steps",
        5,
        "-batch_type",
        "tokens",
        "-batch_size",
        40,
        "-save_model",
        tmp_path / "m",
    )
    assert result.returncode == 0, result.stderr
    assert (
        "training corpora: a (weight 3): 1 shard(s), 200 examples; b (weight 1): 1 shard(s), 12 "
        "examples" in result.stderr
    )
    # 5 batches drawn: a a a b a (b's 12 examples need more than one batch of 40 padded tokens)
    assert load_checkpoint(str(tmp_path / "m_step_5.pt"))["data"] == {
        "round": [["a", 3], ["b", 1]],
        "corpus": 0,
        "count": 1,
        "corpora": {
            "a": {"epoch": 0, "shard": 0, "batch": 4},
            "b": {"epoch": 0, "shard": 0, "batch": 1},
        },
    }


@pytest.mark.parametrize(
    "args,expected",
    [
        ([], "holds the corpora a, b: choose them with -data_ids"),
        (
            ["-data_ids", "a", "c", "-data_weights", 1, 1],
            "-data_ids c: -data {data} has no such corpus (it holds the corpora a, b)",
        ),
        (["-data_ids", "a", "a", "-data_weights", 1, 1], "-data_ids a a: a is given twice"),
        (["-data_ids", "a", "b"], "-data_weights gives 1 weight(s) for 2 -data_ids corpora"),
        (
            ["-data_ids", "a", "b", "-data_weights", 3, 1, "-single_pass"],
            "-single_pass counts passes over one corpus",
        ),
        (
            ["-data_ids", "a", "b", "-data_weights", 3, 1, "-epochs", 2],
            "-epochs counts passes over one corpus",
        ),
    ],
)
def test_bad_data_ids_are_refused_before_training(data, tmp_path, args, expected):
    with pytest.raises(UserError) as refused:
        train_in_process(data, str(tmp_path / "m"), *TINY_MODEL, "-train_steps", 1, *args)
    assert expected.format(data=data) in str(refused.value)
    assert not os.path.exists(tmp_path / "m_step_1.pt")


def test_a_weight_below_1_is_refused_by_the_command(data, tmp_path):
    assert "-data_weights" in error_of(
        run_in_process(
            "train",
            "-data",
            data,
            "-data_ids",
            "a",
            "b",
            "-data_weights",
            0,
            1,
            "-save_model",
            tmp_path / "m",
        )
    )


def test_two_processes_draw_both_shares_of_each_step_from_the_round_robin(data, tmp_path):
    """-world_size 2, 3 steps: 6 batches drawn from one stream (a a a b a a), as one process with
    -accum_count 2 would; the checkpoint's position says so."""
    result = run_in_process(
        "train",
        "-data",
        data,
        *WEIGHTED,
        "-world_size",
        2,
        "-master_port",
        free_port(),
        "-train_steps",
        3,
        "-save_model",
        tmp_path / "m",
    )
    assert result.returncode == 0, result.stderr
    assert load_checkpoint(str(tmp_path / "m_step_3.pt"))["data"] == {
        "round": [["a", 3], ["b", 1]],
        "corpus": 0,
        "count": 2,
        "corpora": {
            "a": {"epoch": 0, "shard": 0, "batch": 5},
            "b": {"epoch": 0, "shard": 0, "batch": 1},
        },
    }
