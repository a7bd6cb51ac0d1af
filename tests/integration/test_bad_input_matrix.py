"""Bad input to every command and tool: exit status 2, one line naming the problem, no traceback,
no output file. Commands run in this process (fast); the read-only-directory cases run as a process
without the power to override file permissions."""

import os
import shutil
import subprocess
import sys

import pytest
import torch

from tests.helpers import (
    COMMAND_NAMES,
    PickledCall,
    TINY_MODEL,
    invoke,
    preprocess_in_process,
    train_in_process,
    write_lines,
)

TOOLS = (
    "bleu",
    "average_models",
    "release_model",
    "extract_embeddings",
    "embeddings_to_torch",
    "create_vocabulary",
    "spm_train",
    "g2p_scores",
    "prepare_cmudict",
)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Good inputs (a corpus, its data, a model) and every kind of bad file."""
    d = tmp_path_factory.mktemp("matrix")
    data = preprocess_in_process(str(d))
    train_in_process(data, str(d / "m"), *TINY_MODEL, "-train_steps", 2)
    f = {
        "dir": d,
        "data": data,
        "model": str(d / "m_step_2.pt"),
        "src": str(d / "src-train.txt"),
        "tgt": str(d / "tgt-train.txt"),
        "vocab": f"{data}.vocab.pt",
        "missing": str(d / "missing.txt"),
        "empty": write_lines(d / "empty.txt", []),
        "blank": write_lines(d / "blank.txt", ["", "  ", "\t"]),
        "short": write_lines(d / "short.txt", ["w1 w2"] * 3),
        "nodir": str(d / "no" / "such" / "out"),
    }
    (d / "utf8.txt").write_bytes(b"w1 w2\nw3 \xc3\x28 w4\n")
    (d / "nul.txt").write_bytes(b"w1 w2\nw3\x00w4\n")
    (d / "empty.pt").write_bytes(b"")
    f.update(utf8=str(d / "utf8.txt"), nul=str(d / "nul.txt"), empty_pt=str(d / "empty.pt"))
    f["long"] = write_lines(
        d / "long.txt", ["w1 w2 w3", " ".join(f"w{i % 20}" for i in range(100_000)), "w4"]
    )
    f["glove"] = write_lines(d / "glove.txt", ["w1 0.1 0.2", "w2 0.3"])
    (d / "glove_utf8.txt").write_bytes(b"w1 0.1 0.2\nw2 0.3 \xff\n")
    f["glove_utf8"] = str(d / "glove_utf8.txt")
    f["crafted"] = str(d / "crafted.pt")
    torch.save({"model": PickledCall(os.mkdir, str(d / "ran"))}, f["crafted"])
    os.makedirs(d / "readonly")
    os.chmod(d / "readonly", 0o555)
    os.mkfifo(d / "fifo")  # a pipe: read once (no writer: a command that opens it would wait)
    f["fifo"] = str(d / "fifo")
    return f


def out(f, name):
    return str(f["dir"] / "outputs" / name)


# (case id, command, arguments given the files ``f``, expected message, outputs that must not exist)
def PREPROCESS(f, src, tgt, *more):
    return [
        "-train_src",
        src,
        "-train_tgt",
        tgt,
        "-save_data",
        out(f, "p"),
        *more,
    ]


def TRAIN(f, *more):
    return [
        "-data",
        f["data"],
        "-save_model",
        out(f, "t"),
        *TINY_MODEL,
        "-train_steps",
        1,
        *more,
    ]


def TRANSLATE(f, src, *more):
    return [
        "-model",
        f["model"],
        "-src",
        src,
        "-output",
        out(f, "o.txt"),
        *more,
    ]


CASES = [
    (
        "missing file",
        "preprocess",
        lambda f: PREPROCESS(f, f["missing"], f["tgt"]),
        r"missing\.txt: cannot open",
    ),
    (
        "empty files",
        "preprocess",
        lambda f: PREPROCESS(f, f["empty"], f["empty"]),
        r"empty\.txt: no training pairs left \(0 pairs read",
    ),
    (
        "only empty lines",
        "preprocess",
        lambda f: PREPROCESS(f, f["blank"], f["blank"]),
        r"blank\.txt: no training pairs left \(3 pairs read, 0 kept, 3 with an empty side skipped",
    ),
    (
        "invalid UTF-8",
        "preprocess",
        lambda f: PREPROCESS(f, f["utf8"], f["utf8"]),
        r"utf8\.txt:2: not valid UTF-8 \(byte 0xc3 at column 4\)",
    ),
    (
        "NUL byte",
        "preprocess",
        lambda f: PREPROCESS(f, f["src"], f["nul"]),
        r"nul\.txt:2: contains a NUL byte",
    ),
    (
        "mismatched files",
        "preprocess",
        lambda f: PREPROCESS(f, f["src"], f["short"]),
        r"differ in length: .*src-train\.txt has 300 lines, .*short\.txt has 3",
    ),
    (
        "unknown option",
        "preprocess",
        lambda f: PREPROCESS(f, f["src"], f["tgt"], "-frobnicate", 1),
        r"unrecognized arguments: -frobnicate 1",
    ),
    (
        "out of range",
        "preprocess",
        lambda f: PREPROCESS(f, f["src"], f["tgt"], "-src_seq_length", 0),
        r"-src_seq_length.*0 is below the minimum 1",
    ),
    (
        "a pipe",
        "preprocess",
        lambda f: PREPROCESS(f, f["src"], f["fifo"]),
        r"-train_tgt .*fifo: can be read only once \(not a regular file\), and preprocess reads "
        r"it twice; give a regular file",
    ),
    (
        "output directory through a file",
        "preprocess",
        lambda f: ["-train_src", f["src"], "-train_tgt", f["tgt"], "-save_data", f"{f['src']}/d"],
        r"src-train\.txt/d: cannot create the directory .*src-train\.txt is not a directory\)",
    ),
    (
        "missing -data",
        "train",
        lambda f: ["-data", f["missing"], "-save_model", out(f, "t")],
        r"no training shards",
    ),
    (
        "empty checkpoint",
        "train",
        lambda f: TRAIN(f, "-train_from", f["empty_pt"]),
        r"empty\.pt: cannot load checkpoint: corrupt or truncated",
    ),
    (
        "zero batch size",
        "train",
        lambda f: TRAIN(f, "-batch_size", 0),
        r"-batch_size.*0 is below the minimum 1",
    ),
    (
        "dropout 1.5",
        "train",
        lambda f: TRAIN(f, "-dropout", 1.5),
        r"-dropout.*1\.5 is outside \[0, 1\]",
    ),
    (
        "unknown option",
        "train",
        lambda f: TRAIN(f, "-frobnicate"),
        r"unrecognized arguments: -frobnicate",
    ),
    (
        "unsupported option",
        "train",
        lambda f: TRAIN(f, "-encoder_type", "ggnn"),
        r"does not support -encoder_type ggnn",
    ),
    (
        "meaningless combination",
        "train",
        lambda f: TRAIN(f, "-decoder_type", "transformer", "-coverage_attn"),
        r"-coverage_attn is for RNN decoders",
    ),
    (
        "output directory through a file",
        "train",
        lambda f: ["-data", f["data"], "-save_model", f"{f['src']}/m"],
        r"src-train\.txt/m: cannot create the directory .*src-train\.txt is not a directory\)",
    ),
    (
        "missing file",
        "translate",
        lambda f: TRANSLATE(f, f["missing"]),
        r"missing\.txt: cannot open",
    ),
    (
        "missing model",
        "translate",
        lambda f: ["-model", f["missing"], "-src", f["src"], "-output", out(f, "o.txt")],
        r"missing\.txt: checkpoint not found",
    ),
    (
        "empty model file",
        "translate",
        lambda f: ["-model", f["empty_pt"], "-src", f["src"], "-output", out(f, "o.txt")],
        r"empty\.pt: cannot load checkpoint",
    ),
    (
        "invalid UTF-8",
        "translate",
        lambda f: TRANSLATE(f, f["utf8"]),
        r"utf8\.txt:2: not valid UTF-8",
    ),
    ("NUL byte", "translate", lambda f: TRANSLATE(f, f["nul"]), r"nul\.txt:2: contains a NUL byte"),
    (
        "mismatched -tgt",
        "translate",
        lambda f: TRANSLATE(f, f["src"], "-tgt", f["short"]),
        r"-src has 300 lines but -tgt has 3",
    ),
    (
        "negative beam",
        "translate",
        lambda f: TRANSLATE(f, f["src"], "-beam_size", -1),
        r"-beam_size.*-1 is below the minimum 1",
    ),
    (
        "zero batch size",
        "translate",
        lambda f: TRANSLATE(f, f["src"], "-batch_size", 0),
        r"-batch_size.*0 is below the minimum 1",
    ),
    (
        "fp16 on the CPU",
        "translate",
        lambda f: TRANSLATE(f, f["src"], "-precision", "fp16"),
        r"-precision fp16 is for CUDA devices \(-gpu\)",
    ),
    (
        "-fp32 against -precision",
        "translate",
        lambda f: TRANSLATE(f, f["src"], "-fp32", "-precision", "bf16"),
        r"-fp32 and -precision bf16 contradict each other",
    ),
    (
        "negative coverage weight",
        "translate",
        lambda f: TRANSLATE(f, f["src"], "-coverage_penalty", "wu", "-beta", -0.2),
        r"beta must be at least 0 with a coverage penalty \(got -0.2\)",
    ),
    (
        "unknown option",
        "translate",
        lambda f: TRANSLATE(f, f["src"], "-frobnicate"),
        r"unrecognized arguments",
    ),
    (
        "missing output directory",
        "translate",
        lambda f: ["-model", f["model"], "-src", f["src"], "-output", f["nodir"]],
        r"cannot write|does not exist",
    ),
    (
        "output is a directory",
        "translate",
        lambda f: ["-model", f["model"], "-src", f["src"], "-output", f["dir"] / "readonly"],
        r"-output .*readonly: is a directory",
    ),
    (
        "missing file",
        "bleu",
        lambda f: ["-hyp", f["missing"], "-ref", f["src"]],
        r"missing\.txt: cannot open",
    ),
    (
        "invalid UTF-8",
        "bleu",
        lambda f: ["-hyp", f["utf8"], "-ref", f["short"]],
        r"utf8\.txt:2: not valid UTF-8",
    ),
    (
        "mismatched files",
        "bleu",
        lambda f: ["-hyp", f["src"], "-ref", f["short"]],
        r"300 lines.*3|3 lines.*300",
    ),
    (
        "unknown metric",
        "bleu",
        lambda f: ["-hyp", f["src"], "-ref", f["src"], "-metrics", "METEOR"],
        r"invalid value 'METEOR'",
    ),
    (
        "missing model",
        "average_models",
        lambda f: ["-models", f["model"], f["missing"], "-output", out(f, "a.pt")],
        r"missing\.txt: checkpoint not found",
    ),
    (
        "missing output directory",
        "average_models",
        lambda f: ["-models", f["model"], "-output", f["nodir"]],
        r"does not exist",
    ),
    (
        "empty model file",
        "release_model",
        lambda f: ["-model", f["empty_pt"], "-output", out(f, "r.pt")],
        r"empty\.pt: cannot load checkpoint",
    ),
    (
        "missing model",
        "extract_embeddings",
        lambda f: ["-model", f["missing"], "-output_dir", out(f, "emb")],
        r"checkpoint not found",
    ),
    (
        "bad vectors",
        "embeddings_to_torch",
        lambda f: [
            "-emb_file_enc",
            f["glove"],
            "-emb_file_dec",
            f["glove"],
            "-dict_file",
            f["vocab"],
            "-output_file",
            out(f, "e"),
        ],
        r"glove\.txt:2: 1 values, the first vector has 2",
    ),
    (
        "invalid UTF-8",
        "embeddings_to_torch",
        lambda f: [
            "-emb_file_enc",
            f["glove_utf8"],
            "-emb_file_dec",
            f["glove"],
            "-dict_file",
            f["vocab"],
            "-output_file",
            out(f, "e"),
        ],
        r"glove_utf8\.txt:2: not valid UTF-8",
    ),
    (
        "invalid UTF-8",
        "create_vocabulary",
        lambda f: ["-file", f["utf8"], "-out_file", out(f, "v.txt")],
        r"utf8\.txt:2: not valid UTF-8",
    ),
    (
        "NUL byte",
        "create_vocabulary",
        lambda f: ["-file", f["nul"], "-out_file", out(f, "v.txt")],
        r"nul\.txt:2: contains a NUL byte",
    ),
    (
        "missing output directory",
        "create_vocabulary",
        lambda f: ["-file", f["src"], "-out_file", f["nodir"]],
        r"does not exist",
    ),
    (
        "a pipe",
        "spm_train",
        lambda f: ["-input", f["fifo"], "-model_prefix", out(f, "spm"), "-vocab_size", 8],
        r"-input .*fifo: can be read only once \(not a regular file\), and it is read twice",
    ),
    (
        "empty file",
        "spm_train",
        lambda f: ["-input", f["empty"], "-model_prefix", out(f, "spm"), "-vocab_size", 8],
        r"empty\.txt: no text to train on",
    ),
    (
        "invalid UTF-8",
        "spm_train",
        lambda f: ["-input", f["utf8"], "-model_prefix", out(f, "spm"), "-vocab_size", 8],
        r"utf8\.txt:2: not valid UTF-8",
    ),
    (
        "mismatched files",
        "g2p_scores",
        lambda f: ["-hyp", f["src"], "-ref", f["short"]],
        r"300.*3|3.*300",
    ),
    (
        "missing file",
        "g2p_scores",
        lambda f: ["-hyp", f["missing"], "-ref", f["short"]],
        r"missing\.txt",
    ),
    (
        "missing checkpoint",
        "convert",
        lambda f: ["-model", f["missing"], "-output", out(f, "c.pt"), "-to", "opennmt-py"],
        r"missing\.txt",
    ),
    (
        "a pickle that runs code",
        "convert",
        lambda f: ["-model", f["crafted"], "-from", "opennmt-py", "-output", out(f, "c.pt")],
        r"crafted\.pt: refused, not loaded: it names posix\.mkdir",
    ),
    (
        "an RNN for CTranslate2",
        "convert",
        lambda f: ["-model", f["model"], "-output", out(f, "ct2"), "-to", "ctranslate2"],
        r"m_step_2\.pt: -encoder_type rnn -decoder_type rnn: CTranslate2 runs Transformer models",
    ),
    (
        "nothing to convert",
        "convert",
        lambda f: ["-model", f["model"], "-output", out(f, "c.pt")],
        r"-from onmt_lite -to onmt_lite: nothing to convert",
    ),
    (
        "out of range",
        "prepare_cmudict",
        lambda f: ["-output_dir", out(f, "cmu"), "-valid_size", -5],
        r"-valid_size.*-5 is below the minimum 0",
    ),
]


def assert_one_line_error(code, lines, expected):
    import re

    assert code == 2, lines
    assert lines and not any("Traceback" in line for line in lines), lines
    assert re.search(expected, lines[-1]), lines[-1]


@pytest.mark.parametrize(
    "case,command,make_args,expected", CASES, ids=[f"{c[1]}: {c[0]}" for c in CASES]
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(
    files, capsys, case, command, make_args, expected
):
    outputs = files["dir"] / "outputs"
    shutil.rmtree(outputs, ignore_errors=True)
    os.makedirs(outputs)
    code, lines = invoke(command, make_args(files), capsys)
    assert_one_line_error(code, lines, expected)
    assert os.listdir(outputs) == []


def test_every_tool_and_command_is_in_the_matrix():
    assert {c[1] for c in CASES} == set(COMMAND_NAMES) | set(TOOLS)


FULL_DISK = [
    ("preprocess", lambda f: PREPROCESS(f, f["src"], f["tgt"]), 2000),
    ("train", TRAIN, 20_000),
    ("translate", lambda f: TRANSLATE(f, f["src"]), 100),
    ("average_models", lambda f: ["-models", f["model"], "-output", out(f, "a.pt")], 2000),
    ("release_model", lambda f: ["-model", f["model"], "-output", out(f, "r.pt")], 2000),
    ("create_vocabulary", lambda f: ["-file", f["src"], "-out_file", out(f, "v.txt")], 10),
    (
        "convert",
        lambda f: ["-model", f["model"], "-output", out(f, "p.pt"), "-to", "opennmt-py"],
        2000,
    ),
]


@pytest.mark.parametrize("command,make_args,limit", FULL_DISK, ids=[c[0] for c in FULL_DISK])
def test_a_full_disk_is_one_line_exit_2_and_leaves_no_partial_file(
    files, capsys, command, make_args, limit
):
    outputs = files["dir"] / "outputs"
    shutil.rmtree(outputs, ignore_errors=True)
    os.makedirs(outputs)
    code, lines = invoke(command, make_args(files), capsys, file_size_limit=limit)
    assert_one_line_error(code, lines, r"outputs/\S+: cannot write \(File too large\)")
    assert os.listdir(outputs) == []


def test_lines_of_100000_tokens_are_filtered_by_preprocess_and_translated_by_translate(
    files, capsys
):
    outputs = files["dir"] / "outputs"
    shutil.rmtree(outputs, ignore_errors=True)
    os.makedirs(outputs)
    code, lines = invoke("preprocess", PREPROCESS(files, files["long"], files["long"]), capsys)
    assert code == 0 and any(
        "train: 3 lines, 2 kept" in line or "2 kept" in line for line in lines
    ), lines
    code, lines = invoke(
        "translate", TRANSLATE(files, files["long"], "-beam_size", 2, "-max_length", 5), capsys
    )
    assert code == 0, lines
    with open(out(files, "o.txt"), encoding="utf-8") as f:
        assert len(f.read().split("\n")) == 3 + 1


@pytest.mark.parametrize("source,n_lines", [("empty", 0), ("blank", 3)])
def test_empty_input_to_translate_gives_as_many_empty_lines(files, capsys, source, n_lines):
    code, lines = invoke("translate", TRANSLATE(files, files[source]), capsys)
    assert code == 0, lines
    with open(out(files, "o.txt"), encoding="utf-8") as f:
        assert f.read() == "\n" * n_lines


def unprivileged():
    """A command prefix that runs without the power to override file permissions, or None."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv"):
        return ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", "--inh-caps", "-all"]
    return None


def train_into(path):
    """The arguments of a one-step training whose -save_model is ``path`` in the directory."""
    return lambda f, d: [
        "-data",
        f["data"],
        "-save_model",
        f"{d}/{path}",
        *TINY_MODEL,
        "-train_steps",
        1,
    ]


READ_ONLY = [
    ("preprocess", "preprocess", lambda f, d: PREPROCESS(f, f["src"], f["tgt"])[:-1] + [f"{d}/p"]),
    (
        "preprocess: a new directory in it",
        "preprocess",
        lambda f, d: PREPROCESS(f, f["src"], f["tgt"])[:-1] + [f"{d}/new/p"],
    ),
    ("train", "train", train_into("t")),
    ("train: a new directory in it", "train", train_into("new/t")),
    (
        "translate",
        "translate",
        lambda f, d: ["-model", f["model"], "-src", f["src"], "-output", f"{d}/o.txt"],
    ),
]


@pytest.mark.parametrize("case,command,make_args", READ_ONLY, ids=[c[0] for c in READ_ONLY])
def test_a_read_only_output_directory_is_refused_before_any_work(files, case, command, make_args):
    prefix = unprivileged()
    if prefix is None:
        pytest.skip("running as root without setpriv: a read-only directory cannot be simulated")
    readonly = files["dir"] / "readonly"
    result = subprocess.run(
        [
            *prefix,
            sys.executable,
            "-m",
            f"onmt_lite.bin.{command}",
            *map(str, make_args(files, readonly)),
        ],
        capture_output=True,
        text=True,
    )
    assert_one_line_error(
        result.returncode,
        result.stderr.strip().splitlines(),
        r"readonly.*not writable|"
        r"readonly.*Permission denied",
    )
    assert os.listdir(readonly) == []
