"""onmt_lite_preprocess end to end: outputs, counts, and every bad input of the foundation issue."""

import os
import subprocess
import sys

import pytest
import torch

from onmt_lite.data.shards import shard_paths
from tests.integration.test_convert import write_one_x_checkpoint, write_one_x_vocab
from tests.helpers import (
    invoke_captured,
    preprocess_in_process,
    run_in_process,
    shared_data,
    write_lines,
)
from tests.model_helpers import make_model


def load(path):
    return torch.load(path, weights_only=True)


@pytest.fixture
def corpus(tmp_path):
    src = write_lines(tmp_path / "src.txt", ["the cat sat", "a  dog\tran", "", "the Zed cat"])
    tgt = write_lines(tmp_path / "tgt.txt", ["die katze", "ein hund lief", "leer", "der Zed"])
    out = tmp_path / "out"
    out.mkdir()
    return src, tgt, out


def test_writes_vocab_and_shards_with_counts_and_copy_data(corpus):
    src, tgt, out = corpus
    result = run_in_process(
        "preprocess",
        "-train_src",
        src,
        "-train_tgt",
        tgt,
        "-valid_src",
        src,
        "-valid_tgt",
        tgt,
        "-save_data",
        out / "d",
        "-dynamic_dict",
        "-shard_size",
        2,
    )
    assert result.returncode == 0, result.stderr
    assert "4 pairs read, 3 kept, 1 with an empty side skipped" in result.stderr
    assert sorted(os.listdir(out)) == [
        "d.train.0.pt",
        "d.train.1.pt",
        "d.valid.0.pt",
        "d.valid.1.pt",
        "d.vocab.pt",
    ]
    vocab = load(out / "d.vocab.pt")
    # by count, then alphabet
    assert vocab["src"][4:] == [
        "cat",
        "the",
        "Zed",
        "a",
        "dog",
        "ran",
        "sat",
    ]
    assert "" not in vocab["src"] and "" not in vocab["tgt"]
    shard = load(out / "d.train.1.pt")
    assert shard["indices"].tolist() == [4]
    assert shard["src_ex_vocab"] == [["<unk>", "<blank>", "the", "Zed", "cat"]]
    assert shard["alignment"].tolist() == [0, 3]  # "der" is not in the source, "Zed" is


def error_of(result):
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and result.stderr.rstrip().endswith(errors[0]), result.stderr
    return errors[0]


def bad_utf8(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"the cat\nthe \xe9 cat\nx\nthe Zed\n")
    return str(path)


@pytest.mark.parametrize(
    "case,expected",
    [
        ("missing", "missing.txt: cannot open"),
        ("line_counts", "src.txt has 4 lines, {tmp}/short.txt has 2"),
        ("utf8_train", "bad.txt:2: not valid UTF-8 (byte 0xe9 at column 5)"),
        ("utf8_valid", "bad.txt:2: not valid UTF-8"),
        ("directory_through_a_file", "src.txt/d: cannot create the directory"),
        ("unknown_option", "unrecognized arguments: -frobnicate 3"),
        ("unsupported_option", "option -src_dir is not supported"),
        ("unsupported_value", "does not support -data_type img"),
        ("valid_without_tgt", "-valid_src and -valid_tgt go together"),
        ("all_filtered", "no training pairs left"),
    ],
)
def test_bad_input_exits_2_with_one_line_and_writes_nothing(
    corpus, tmp_path, case, expected, capsys
):
    src, tgt, out = corpus
    args = {"-train_src": src, "-train_tgt": tgt, "-save_data": out / "d"}
    extra = []
    if case == "missing":
        args["-train_tgt"] = tmp_path / "missing.txt"
    elif case == "line_counts":
        args["-train_tgt"] = write_lines(tmp_path / "short.txt", ["a", "b"])
    elif case == "utf8_train":
        args["-train_src"] = bad_utf8(tmp_path)
    elif case == "utf8_valid":
        extra = ["-valid_src", bad_utf8(tmp_path), "-valid_tgt", tgt]
    elif case == "directory_through_a_file":
        args["-save_data"] = f"{src}/d"
    elif case == "unknown_option":
        extra = ["-frobnicate", "3"]
    elif case == "unsupported_option":
        extra = ["-src_dir", "x"]
    elif case == "unsupported_value":
        extra = ["-data_type", "img"]
    elif case == "valid_without_tgt":
        extra = ["-valid_src", src]
    elif case == "all_filtered":
        extra = ["-src_seq_length", "1"]
    command = [*[x for kv in args.items() for x in kv], *extra]
    code, out_text, err = invoke_captured("preprocess", command, capsys)  # in this process: faster
    result = subprocess.CompletedProcess(command, code, out_text, err)
    assert expected.format(tmp=tmp_path) in error_of(result)
    assert os.listdir(out) == []


def test_a_missing_save_data_directory_is_made_and_a_failed_run_removes_it(
    corpus, tmp_path, capsys
):
    src, tgt, out = corpus
    base = ["-train_src", src, "-train_tgt", tgt]
    code, _, err = invoke_captured(
        "preprocess", [*base, "-save_data", out / "a" / "b" / "d"], capsys
    )
    assert code == 0, err
    assert sorted(os.listdir(out / "a" / "b")) == ["d.train.0.pt", "d.vocab.pt"]
    # "c/": the prefix is the directory itself (c/.vocab.pt)
    code, _, err = invoke_captured("preprocess", [*base, "-save_data", f"{out}/c/"], capsys)
    assert code == 0, err
    assert sorted(os.listdir(out / "c")) == [".train.0.pt", ".vocab.pt"]
    # the validation text is read once the outputs are being written: their directory is made
    bad_valid = ["-valid_src", bad_utf8(tmp_path), "-valid_tgt", tgt]
    command = [*base, *bad_valid, "-save_data", out / "new" / "deep" / "d"]
    code, _, err = invoke_captured("preprocess", command, capsys)
    assert code == 2 and "bad.txt:2: not valid UTF-8" in err
    assert sorted(os.listdir(out)) == ["a", "c"]


def test_a_log_file_that_is_one_of_the_corpora_is_refused_before_it_opens(corpus, capsys):
    """The log was appended to the corpus, whose second reading (the shards) saw other lines."""
    src, tgt, out = corpus
    with open(src, encoding="utf-8") as f:
        text = f.read()
    args = ["-train_src", src, "-train_tgt", tgt, "-save_data", out / "d", "-log_file", src]
    code, _, err = invoke_captured("preprocess", args, capsys)
    assert code == 2 and err.strip() == (
        f"onmt_lite_preprocess: error: -log_file {src}: the same file as -train_src {src}, which "
        "this command reads; give the output a file of its own"
    )
    with open(src, encoding="utf-8") as f:
        assert f.read() == text
    assert os.listdir(out) == []


def test_existing_outputs_are_refused_without_overwrite_and_replaced_with_it(corpus):
    src, tgt, out = corpus
    base = ["-train_src", src, "-train_tgt", tgt, "-save_data", out / "d"]
    assert run_in_process("preprocess", *base, "-shard_size", 1).returncode == 0
    before = {name: os.stat(out / name).st_mtime_ns for name in os.listdir(out)}
    assert "d.vocab.pt already exists (use -overwrite to replace)" in error_of(
        run_in_process("preprocess", *base)
    )
    assert {name: os.stat(out / name).st_mtime_ns for name in os.listdir(out)} == before
    result = run_in_process("preprocess", *base, "-shard_size", 2, "-overwrite")
    assert result.returncode == 0, result.stderr
    # the third shard of the first run would be read as training data: it must be gone
    assert sorted(os.listdir(out)) == ["d.train.0.pt", "d.train.1.pt", "d.vocab.pt"]


def test_config_file_gives_the_same_files_as_the_command_line(corpus, tmp_path):
    src, tgt, out = corpus
    config = tmp_path / "run.yaml"
    config.write_text(
        f"train_src: {src}\ntrain_tgt: {tgt}\nsave_data: {out}/c\nlower: true\n"
        "dynamic_dict: true\nsrc_vocab_size: 3\n"
    )
    assert run_in_process("preprocess", "-config", config).returncode == 0
    assert (
        run_in_process(
            "preprocess",
            "-train_src",
            src,
            "-train_tgt",
            tgt,
            "-save_data",
            out / "l",
            "-lower",
            "-dynamic_dict",
            "-src_vocab_size",
            3,
        ).returncode
        == 0
    )
    assert load(out / "c.vocab.pt") == load(out / "l.vocab.pt")
    from_config = load(out / "c.train.0.pt")
    from_line = load(out / "l.train.0.pt")
    assert from_config.keys() == from_line.keys()
    for key, value in from_config.items():
        assert (
            torch.equal(value, from_line[key])
            if torch.is_tensor(value)
            else value == from_line[key]
        )


def test_toy_ende_with_the_opennmt_py_1x_command_line(tmp_path):
    data = shared_data("toy-ende")
    base = [
        "-train_src",
        f"{data}/src-train.txt",
        "-train_tgt",
        f"{data}/tgt-train.txt",
        "-valid_src",
        f"{data}/src-val.txt",
        "-valid_tgt",
        f"{data}/tgt-val.txt",
        "-src_vocab_size",
        1000,
        "-tgt_vocab_size",
        1000,
    ]
    result = run_in_process("preprocess", *base, "-save_data", tmp_path / "q")
    assert result.returncode == 0, result.stderr
    vocab = load(tmp_path / "q.vocab.pt")
    assert len(vocab["src"]) == len(vocab["tgt"]) == 1004
    result = run_in_process(
        "preprocess", *base, "-save_data", tmp_path / "c", "-dynamic_dict", "-shard_size", 1000
    )
    assert result.returncode == 0, result.stderr
    train = shard_paths(str(tmp_path / "c"), "train")
    assert len(train) == 10
    assert sum(load(p)["indices"].numel() for p in train) == vocab["counts"]["train"]["examples"]
    assert all("src_ex_vocab" in load(p) for p in train + shard_paths(str(tmp_path / "c"), "valid"))
    # 1.x's -src_vocab took an earlier run's vocab.pt: its vocabularies, on other data
    other = ["-train_src", f"{data}/src-val.txt", "-train_tgt", f"{data}/tgt-val.txt"]
    reused = ["-src_vocab", tmp_path / "q.vocab.pt", "-save_data", tmp_path / "r"]
    result = run_in_process("preprocess", *other, *reused)
    assert result.returncode == 0, result.stderr
    again = load(tmp_path / "r.vocab.pt")
    assert (again["src"], again["tgt"]) == (vocab["src"], vocab["tgt"])
    assert again["counts"]["train"]["examples"] < vocab["counts"]["train"]["examples"]


def test_a_1x_runs_vocab_pt_gives_its_vocabularies_without_running_torchtext(corpus):
    """1.x's -src_vocab took the vocab.pt of an earlier run: a 1.x one (torchtext fields, read as
    plain data: torchtext is never imported) gives its words in its order; a 1.x checkpoint is
    not one."""
    src, tgt, out = corpus
    old = out / "old.vocab.pt"
    write_one_x_vocab(old, ["the", "zebra", "cat"], ["die", "katze"])
    args = ["-train_src", src, "-train_tgt", tgt, "-save_data", out / "d"]
    result = run_in_process("preprocess", *args, "-src_vocab", old)
    assert result.returncode == 0, result.stderr
    vocab = load(out / "d.vocab.pt")
    assert (vocab["src"][4:], vocab["tgt"][4:]) == (["the", "zebra", "cat"], ["die", "katze"])
    assert "torchtext" not in sys.modules and "onmt" not in sys.modules
    checkpoint = out / "one_x.pt"
    model, _ = make_model()
    write_one_x_checkpoint(model, checkpoint)
    result = run_in_process("preprocess", *args, "-src_vocab", checkpoint, "-overwrite")
    assert result.returncode == 2
    assert f"{checkpoint}: cannot read a file without src and tgt vocabularies" in result.stderr


def test_g2p_sr_whitespace_runs_give_no_empty_vocabulary_entry(tmp_path):
    data = shared_data("g2p-sr")
    result = run_in_process(
        "preprocess",
        "-train_src",
        f"{data}/src.train",
        "-train_tgt",
        f"{data}/tgt.train",
        "-valid_src",
        f"{data}/src.valid",
        "-valid_tgt",
        f"{data}/tgt.valid",
        "-save_data",
        tmp_path / "g",
    )
    assert result.returncode == 0, result.stderr
    vocab = load(tmp_path / "g.vocab.pt")
    assert all(word and not word.isspace() for word in vocab["src"] + vocab["tgt"])
    assert "8500 pairs read, 8500 kept" in result.stderr


def test_shards_are_numbered_from_0_as_opennmt_py_1x_names_them(tmp_path):
    """1.x's preprocess writes {save_data}.{corpus_type}.{shard_index}.pt with the index from 0: a
    1.x user's scripts name PREFIX.train.0.pt and PREFIX.valid.0.pt."""
    prefix = preprocess_in_process(str(tmp_path), "-shard_size", 100, n_train=300, n_valid=40)
    names = sorted(name for name in os.listdir(tmp_path) if name.startswith("data."))
    assert names == [
        "data.train.0.pt",
        "data.train.1.pt",
        "data.train.2.pt",
        "data.valid.0.pt",
        "data.vocab.pt",
    ]
    assert shard_paths(prefix, "train") == [f"{prefix}.train.{n}.pt" for n in range(3)]


def test_data_an_earlier_version_numbered_from_1_still_trains(tmp_path):
    prefix = preprocess_in_process(str(tmp_path), "-shard_size", 150, n_train=300)
    for corpus_type, count in (("train", 2), ("valid", 1)):
        for n in reversed(range(count)):  # the names an earlier onmt_lite wrote: from 1
            os.replace(f"{prefix}.{corpus_type}.{n}.pt", f"{prefix}.{corpus_type}.{n + 1}.pt")
    assert shard_paths(prefix, "train") == [f"{prefix}.train.1.pt", f"{prefix}.train.2.pt"]
    result = run_in_process(
        "train",
        "-data",
        prefix,
        "-save_model",
        tmp_path / "m",
        "-rnn_size",
        8,
        "-word_vec_size",
        4,
        "-layers",
        1,
        "-batch_size",
        8,
        "-train_steps",
        2,
        "-valid_steps",
        2,
    )
    assert result.returncode == 0, result.stderr
    assert "training corpus: 2 shard(s), 300 examples; 1 valid shard(s)" in result.stderr


def test_shard_size_0_writes_one_shard_as_in_1x(tmp_path):
    from onmt_lite.data.shards import shard_paths

    prefix = preprocess_in_process(str(tmp_path), "-shard_size", 0, n_train=300)
    assert len(shard_paths(prefix, "train")) == 1


def test_temporaries_left_by_a_killed_preprocess_are_removed_by_the_next_and_nothing_else(corpus):
    src, tgt, out = corpus
    stale = [
        out / ".d.vocab.pt.k1ll3d.tmp",
        out / ".d.train.1.pt.abc.tmp",
        out / ".d.valid.12.pt.x_y.tmp",
    ]
    kept = [out / ".other.train.1.pt.abc.tmp", out / ".d.notes.txt.abc.tmp", out / "d.txt"]
    for path in stale + kept:
        path.write_bytes(b"half")
    result = run_in_process(
        "preprocess", "-train_src", src, "-train_tgt", tgt, "-save_data", out / "d"
    )
    assert result.returncode == 0, result.stderr
    for path in stale:
        assert (
            not path.exists()
            and f"removed {path}, left by an interrupted preprocess" in result.stderr
        )
    expected = [p.name for p in kept] + ["d.train.0.pt", "d.vocab.pt"]
    assert sorted(os.listdir(out)) == sorted(expected)


@pytest.mark.parametrize(
    "level,file_has_info", [("WARNING", False), ("INFO", True), ("20", True), ("ERROR", False)]
)
def test_log_file_level_filters_the_log_file_not_the_console(corpus, level, file_has_info):
    """1.x's -log_file_level: the least level the log file records; the console still logs INFO."""
    src, tgt, out = corpus
    log = out / "preprocess.log"
    result = run_in_process(
        "preprocess",
        "-train_src",
        src,
        "-train_tgt",
        tgt,
        "-valid_src",
        src,
        "-valid_tgt",
        tgt,
        "-save_data",
        out / "d",
        "-log_file",
        log,
        "-log_file_level",
        level,
    )
    assert result.returncode == 0, result.stderr
    assert " INFO] " in result.stderr
    written = log.read_text(encoding="utf-8")
    assert (" INFO] " in written) == file_has_info and ("pairs read" in written) == file_has_info


def test_vocab_size_multiple_pads_both_vocabularies_and_keeps_their_words(tmp_path):
    for name in ("plain", "padded", "shared"):
        (tmp_path / name).mkdir()
    plain = load(preprocess_in_process(str(tmp_path / "plain"), "-src_vocab_size", 9) + ".vocab.pt")
    padded = load(
        preprocess_in_process(
            str(tmp_path / "padded"), "-src_vocab_size", 9, "-vocab_size_multiple", 8
        )
        + ".vocab.pt"
    )
    for side in ("src", "tgt"):
        assert len(padded[side]) % 8 == 0 and len(padded[side]) - len(plain[side]) < 8
        assert padded[side][: len(plain[side])] == plain[side]
    shared = load(
        preprocess_in_process(str(tmp_path / "shared"), "-share_vocab", "-vocab_size_multiple", 16)
        + ".vocab.pt"
    )
    assert shared["src"] == shared["tgt"] and len(shared["src"]) % 16 == 0


def test_num_threads_writes_the_same_files_as_one_process_on_toy_ende(tmp_path):
    """-num_threads: 10,000 lines in chunks over 3 worker processes give byte-identical vocab and
    shards (shuffled, with copy data and validation references) to one process."""
    data = shared_data("toy-ende")
    base = [
        "-train_src",
        f"{data}/src-train.txt",
        "-train_tgt",
        f"{data}/tgt-train.txt",
        "-valid_src",
        f"{data}/src-val.txt",
        "-valid_tgt",
        f"{data}/tgt-val.txt",
        "-src_vocab_size",
        1000,
        "-src_seq_length",
        20,
        "-dynamic_dict",
        "-shuffle",
        1,
        "-shard_size",
        3000,
        "-report_every",
        2500,
    ]
    outputs = {}
    for threads in (1, 3):
        (tmp_path / str(threads)).mkdir()
        result = run_in_process(
            "preprocess",
            *base,
            "-save_data",
            tmp_path / str(threads) / "d",
            "-num_threads",
            threads,
        )
        assert result.returncode == 0, result.stderr
        outputs[threads] = {
            name: (tmp_path / str(threads) / name).read_bytes()
            for name in sorted(os.listdir(tmp_path / str(threads)))
        }
        read = [
            int(line.split("train: ")[1].split()[0])
            for line in result.stderr.splitlines()
            if "train: " in line and "lines read" in line
        ]
        # each multiple of -report_every logged once
        assert [n // 2500 for n in read] == [
            1,
            2,
            3,
            4,
        ]
    assert list(outputs[3])[:2] == ["d.train.0.pt", "d.train.1.pt"]
    assert list(outputs[3])[-1] == "d.vocab.pt"
    assert outputs[3] == outputs[1]
