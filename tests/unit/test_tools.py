"""The scripts in tools/: scoring, checkpoint averaging and release, embeddings, vocabularies,
spm."""

import os
import subprocess
import sys

import pytest
import torch

from onmt_lite.data.shards import VOCAB_FORMAT
from onmt_lite.data.vocab import SPECIALS, Vocab
from onmt_lite.models.checkpoint import CHECKPOINT_FORMAT, load_checkpoint
from onmt_lite.utils.files import save_tensors
from tests.helpers import (
    REPO,
    TINY_MODEL,
    preprocess_in_process,
    shared_data,
    tool,
    train_in_process,
    write_lines,
)

TOOLS = [
    "bleu",
    "average_models",
    "release_model",
    "extract_embeddings",
    "embeddings_to_torch",
    "create_vocabulary",
    "spm_train",
    "plot_training",
]


def run(name, *args):
    """Run the tool's main with ``args``."""
    return tool(name).main([str(a) for a in args])


def fails(capsys, name, *args):
    """Run the tool, expect exit status 2 and return its one stderr line."""
    with pytest.raises(SystemExit) as exc:
        run(name, *args)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    return err


@pytest.mark.parametrize("name", TOOLS)
def test_help_runs_as_a_script(name):
    result = subprocess.run(
        [sys.executable, os.path.join(REPO, "tools", f"{name}.py"), "-h"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr
    assert f"usage: {name}.py" in result.stdout


# --- bleu.py --------------------------------------------------------------------------------------

HYP = ["the cat sat on the mat .", "a quick brown fox jumps", "hello , world !"]
REF = ["the cat sat on a mat .", "the quick brown fox jumped", "Hello , world !"]


def test_bleu_of_identical_files_is_100(tmp_path, capsys):
    hyp = write_lines(tmp_path / "h.txt", HYP)
    run("bleu", "-hyp", hyp, "-ref", hyp, "-metrics", "BLEU", "chrF", "TER")
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("|")[0] for line in lines] == ["BLEU", "chrF2", "TER"]
    assert " = 100.00 " in lines[0] and "tok:13a" in lines[0] and lines[1].endswith(" = 100.00")
    assert lines[2].endswith(" = 0.00")


@pytest.mark.parametrize("tokenize", ["13a", "none"])
def test_bleu_matches_sacrebleu(tmp_path, capsys, tokenize):
    import sacrebleu

    hyp = write_lines(tmp_path / "h.txt", HYP)
    ref = write_lines(tmp_path / "r.txt", REF)
    run("bleu", "-hyp", hyp, "-ref", ref, "-tokenize", tokenize, "-lowercase")
    expected = sacrebleu.corpus_bleu(HYP, [REF], tokenize=tokenize, lowercase=True)
    out = capsys.readouterr().out
    assert f" = {expected.score:.2f} " in out and "case:lc" in out and f"tok:{tokenize}" in out


def test_bleu_refuses_different_line_counts(tmp_path, capsys):
    hyp = write_lines(tmp_path / "h.txt", HYP)
    ref = write_lines(tmp_path / "r.txt", REF[:2])
    err = fails(capsys, "bleu", "-hyp", hyp, "-ref", ref)
    assert "h.txt has 3 lines" in err and "r.txt has 2" in err
    assert "not/there.txt" in fails(capsys, "bleu", "-hyp", "not/there.txt", "-ref", ref)
    assert "-tokenize" in fails(capsys, "bleu", "-hyp", hyp, "-ref", hyp, "-tokenize", "moses")


def test_bleu_refuses_empty_files_in_one_line(tmp_path, capsys):
    empty = write_lines(tmp_path / "e.txt", [])
    err = fails(capsys, "bleu", "-hyp", empty, "-ref", empty, "-metrics", "BLEU", "chrF", "TER")
    assert "e.txt: the hypothesis file is empty" in err
    blank = write_lines(tmp_path / "b.txt", ["", ""])  # empty lines are sentences: scored
    run("bleu", "-hyp", blank, "-ref", blank)
    assert " = 0.00 " in capsys.readouterr().out


# --- average_models.py ----------------------------------------------------------------------------


def fake_checkpoint(path, scale, step, vocab=("<unk>", "<blank>", "<s>", "</s>", "a")):
    base = torch.arange(6, dtype=torch.float32).view(2, 3)
    save_tensors(
        {
            "format": CHECKPOINT_FORMAT,
            "model": {"w": base * scale, "n": torch.tensor([7])},
            "generator": {"g": torch.full((2,), float(scale))},
            "vocab": {"src": list(vocab), "tgt": list(vocab)},
            "opt": {"step_opt": step},
            "optim": {"x": 1},
            "step": step,
            "rng": {},
            "data": {},
            "trainer": {},
            "preprocess": {"lower": False},
        },
        str(path),
    )
    return str(path)


def test_average_is_the_elementwise_mean(tmp_path):
    paths = [
        fake_checkpoint(tmp_path / f"c{i}.pt", scale, step)
        for i, (scale, step) in enumerate([(1.0, 10), (2.0, 20), (6.0, 30)])
    ]
    run("average_models", "-models", *paths, "-output", tmp_path / "avg.pt")
    avg = torch.load(tmp_path / "avg.pt", weights_only=True)
    assert torch.equal(avg["model"]["w"], torch.arange(6, dtype=torch.float32).view(2, 3) * 3)
    assert torch.equal(avg["generator"]["g"], torch.full((2,), 3.0))
    assert torch.equal(avg["model"]["n"], torch.tensor([7]))
    assert avg["step"] == 30 and avg["opt"] == {"step_opt": 30}
    assert not {"optim", "rng", "data", "trainer"} & set(avg)
    load_checkpoint(str(tmp_path / "avg.pt"))


def test_average_refuses_mismatches(tmp_path, capsys):
    a = fake_checkpoint(tmp_path / "a.pt", 1.0, 1)
    b = fake_checkpoint(tmp_path / "b.pt", 1.0, 2, vocab=("<unk>", "<blank>", "<s>", "</s>", "b"))
    assert "vocabularies differ" in fails(
        capsys, "average_models", "-models", a, b, "-output", tmp_path / "o.pt"
    )
    c = torch.load(a, weights_only=True)
    c["model"]["w"] = torch.zeros(3, 2)
    save_tensors(c, str(tmp_path / "c.pt"))
    err = fails(
        capsys, "average_models", "-models", a, tmp_path / "c.pt", "-output", tmp_path / "o.pt"
    )
    assert "model tensor w has shape (3, 2)" in err
    assert not os.path.exists(tmp_path / "o.pt")


@pytest.mark.parametrize(
    "name, args",
    [
        ("release_model", ["-model", "absent.pt", "-output"]),
        ("average_models", ["-models", "absent.pt", "absent.pt", "-output"]),
        ("create_vocabulary", ["-file", "absent.txt", "-out_file"]),
    ],
)
def test_an_output_that_is_a_directory_is_refused_before_any_work(tmp_path, capsys, name, args):
    (tmp_path / "out").mkdir()
    for output in (tmp_path / "out", f"{tmp_path}/new/"):
        err = fails(capsys, name, *args, output)
        # not the missing input: nothing was read
        assert f"{args[-1]} {output}: is a directory" in err
    assert os.listdir(tmp_path) == ["out"] and os.listdir(tmp_path / "out") == []


def test_spm_train_refuses_an_output_that_is_a_directory(tmp_path, capsys):
    (tmp_path / "sp.vocab").mkdir()
    err = fails(
        capsys,
        "spm_train",
        "-input",
        "absent.txt",
        "-model_prefix",
        tmp_path / "sp",
        "-vocab_size",
        8,
    )
    assert "sp.vocab is a directory" in err
    assert os.listdir(tmp_path) == ["sp.vocab"]


# --- tools on a real (tiny) checkpoint -----------------------------------------------------------


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """``(data prefix, checkpoint path)`` of a 2-step tiny model on the reversal corpus."""
    directory = tmp_path_factory.mktemp("tools")
    prefix = preprocess_in_process(str(directory))
    train_in_process(prefix, str(directory / "m"), *TINY_MODEL, "-train_steps", 2)
    return prefix, str(directory / "m_step_2.pt")


def translations(path):
    from onmt_lite import Translator

    results = Translator.load([path], min_length=3, max_length=5, n_best=2).translate(
        ["w1 w2 w3", "w4"]
    )
    return [(r.hypotheses, r.scores) for r in results]


def test_release_drops_training_state_and_translates_the_same(trained, tmp_path):
    _, ckpt = trained
    run("release_model", "-model", ckpt, "-output", tmp_path / "r.pt")
    released = torch.load(tmp_path / "r.pt", weights_only=True)
    assert not {"optim", "rng", "data", "trainer"} & set(released)
    assert released["vocab"] == load_checkpoint(ckpt)["vocab"]
    assert translations(str(tmp_path / "r.pt")) == translations(ckpt)


def test_release_fp16_halves_weights_and_still_translates(trained, tmp_path):
    from onmt_lite import Translator

    _, ckpt = trained
    run("release_model", "-model", ckpt, "-output", tmp_path / "h.pt", "-fp16")
    half = torch.load(tmp_path / "h.pt", weights_only=True)
    full = load_checkpoint(ckpt)
    for part in ("model", "generator"):
        for name, tensor in full[part].items():
            assert half[part][name].dtype == torch.float16
            assert torch.equal(half[part][name], tensor.half())
    assert os.path.getsize(tmp_path / "h.pt") < os.path.getsize(ckpt)
    hyp = (
        Translator.load([str(tmp_path / "h.pt")], min_length=2)
        .translate(["w1 w2"])[0]
        .hypotheses[0]
    )
    assert isinstance(hyp, str) and len(hyp.split()) >= 2


def test_release_fp16_refuses_a_weight_that_overflows_float16(trained, tmp_path, capsys):
    _, ckpt = trained
    checkpoint = load_checkpoint(ckpt)
    name = "decoder.embeddings.lut.weight"
    checkpoint["model"][name][3, 1] = -1e5  # float16's largest is 65504: this would become -inf
    big = str(tmp_path / "big.pt")
    save_tensors(checkpoint, big)
    err = fails(capsys, "release_model", "-model", big, "-output", tmp_path / "h.pt", "-fp16")
    assert f"big.pt: -fp16: parameter model.{name} has a weight of magnitude 100000" in err
    assert "release without -fp16" in err
    assert sorted(os.listdir(tmp_path)) == ["big.pt"]  # no output, no temporary
    run("release_model", "-model", big, "-output", tmp_path / "f.pt")  # float32 keeps it
    assert torch.load(tmp_path / "f.pt", weights_only=True)["model"][name][3, 1] == -1e5
    checkpoint["model"][name][3, 1] = -65519.0  # rounds to float16's largest, -65504: kept
    save_tensors(checkpoint, big)
    run("release_model", "-model", big, "-output", tmp_path / "h.pt", "-fp16")
    assert torch.load(tmp_path / "h.pt", weights_only=True)["model"][name][3, 1] == -65504.0


def test_average_of_a_checkpoint_with_itself_translates_the_same(trained, tmp_path):
    _, ckpt = trained
    run("average_models", "-models", ckpt, ckpt, "-output", tmp_path / "a.pt")
    assert translations(str(tmp_path / "a.pt")) == translations(ckpt)


def test_extract_embeddings_writes_the_checkpoint_tables(trained, tmp_path):
    _, ckpt = trained
    checkpoint = load_checkpoint(ckpt)
    run("extract_embeddings", "-model", ckpt, "-output_dir", tmp_path / "emb")
    for side, enc_dec in (("src", "encoder"), ("tgt", "decoder")):
        with open(tmp_path / "emb" / f"{side}_embeddings.txt", encoding="utf-8") as f:
            rows = [line.split() for line in f]
        weight = checkpoint["model"][f"{enc_dec}.embeddings.lut.weight"]
        assert [r[0] for r in rows] == checkpoint["vocab"][side] and rows[0][0] == "<unk>"
        assert {len(r) for r in rows} == {weight.shape[1] + 1}
        assert torch.equal(torch.tensor([[float(v) for v in r[1:]] for r in rows]), weight)


def test_extract_embeddings_writes_into_the_current_directory_by_default(
    trained, tmp_path, monkeypatch
):
    _, ckpt = trained
    monkeypatch.chdir(tmp_path)
    run("extract_embeddings", "-model", ckpt, "-gpu", -1)  # OpenNMT-py 1.x's command line
    assert sorted(os.listdir(tmp_path)) == ["src_embeddings.txt", "tgt_embeddings.txt"]
    words = [
        line.split()[0]
        for line in (tmp_path / "tgt_embeddings.txt").read_text(encoding="utf-8").splitlines()
    ]
    assert words == load_checkpoint(ckpt)["vocab"]["tgt"]


def test_extract_embeddings_refuses_an_output_dir_that_is_a_file_before_loading(tmp_path, capsys):
    not_dir = write_lines(tmp_path / "f.txt", ["x"])
    err = fails(
        capsys, "extract_embeddings", "-model", tmp_path / "absent.pt", "-output_dir", not_dir
    )
    assert f"-output_dir {not_dir}: not a directory" in err
    (tmp_path / "d" / "src_embeddings.txt").mkdir(parents=True)
    err = fails(
        capsys,
        "extract_embeddings",
        "-model",
        tmp_path / "absent.pt",
        "-output_dir",
        tmp_path / "d",
    )
    assert "src_embeddings.txt is a directory" in err
    assert sorted(os.listdir(tmp_path)) == ["d", "f.txt"] and os.listdir(tmp_path / "d") == [
        "src_embeddings.txt"
    ]


# --- embeddings_to_torch.py -----------------------------------------------------------------------


def read_vectors(path):
    with open(path, encoding="utf-8") as f:
        return {
            fields[0]: torch.tensor([float(v) for v in fields[1:]]) for fields in map(str.split, f)
        }


def test_embeddings_to_torch_on_sample_glove(tmp_path, capsys):
    glove = shared_data("embeddings", "sample_glove.txt")
    vectors = read_vectors(glove)
    words = {
        "src": list(SPECIALS) + ["the", "zebra", "of", "said"],
        "tgt": list(SPECIALS) + ["in", "nothing"],
    }
    dict_file = str(tmp_path / "d.vocab.pt")
    save_tensors({"format": VOCAB_FORMAT, **words}, dict_file)
    run(
        "embeddings_to_torch",
        "-emb_file_enc",
        glove,
        "-emb_file_dec",
        glove,
        "-dict_file",
        dict_file,
        "-output_file",
        tmp_path / "emb",
    )
    out = capsys.readouterr().out
    assert "enc: found 3 of 8" in out and "dec: found 1 of 6" in out
    for side in ("enc", "dec"):
        tensor = torch.load(tmp_path / f"emb.{side}.pt", weights_only=True)
        side_words = words["src" if side == "enc" else "tgt"]
        assert tensor.dtype == torch.float32 and tensor.shape == (len(side_words), 100)
        for row, word in zip(tensor, side_words):
            assert torch.equal(row, vectors.get(word, torch.zeros(100)))


def test_pretrained_word2vec_vectors_are_loaded_by_training(trained, tmp_path, capsys):
    prefix, _ = trained
    w2v = write_lines(
        tmp_path / "w2v.txt",
        [
            "3 8",
            "w3  " + " ".join(str(i / 8) for i in range(8)),
            "w1\t" + " ".join(str(-i) for i in range(8)) + "  ",
            "absent " + " ".join(["1.5"] * 8),
        ],
    )
    run(
        "embeddings_to_torch",
        "-emb_file_enc",
        w2v,
        "-emb_file_dec",
        w2v,
        "-dict_file",
        f"{prefix}.vocab.pt",
        "-output_file",
        tmp_path / "pre",
    )
    assert "enc: found 2 of 24" in capsys.readouterr().out
    train_in_process(
        prefix,
        str(tmp_path / "p"),
        *TINY_MODEL,
        "-pre_word_vecs_enc",
        tmp_path / "pre.enc.pt",
        "-fix_word_vecs_enc",
        "-train_steps",
        1,
        "-valid_steps",
        100,
    )
    checkpoint = load_checkpoint(str(tmp_path / "p_step_1.pt"))
    vocab = Vocab.from_plain(checkpoint["vocab"]["src"])
    weight = checkpoint["model"]["encoder.embeddings.lut.weight"]
    assert torch.equal(weight[vocab.lookup("w3")], torch.arange(8) / 8)
    assert torch.equal(weight[vocab.lookup("w1")], -torch.arange(8.0))
    assert torch.equal(weight[vocab.lookup("w2")], torch.zeros(8))


def test_embeddings_to_torch_refuses_ragged_lines(tmp_path, capsys):
    bad = write_lines(tmp_path / "bad.txt", ["a 1 2 3", "b 1 2"])
    dict_file = str(tmp_path / "d.vocab.pt")
    save_tensors(
        {"format": VOCAB_FORMAT, "src": list(SPECIALS) + ["a"], "tgt": list(SPECIALS)}, dict_file
    )
    err = fails(
        capsys,
        "embeddings_to_torch",
        "-emb_file_enc",
        bad,
        "-emb_file_dec",
        bad,
        "-dict_file",
        dict_file,
        "-output_file",
        tmp_path / "o",
    )
    assert "bad.txt:2: 2 values, the first vector has 3" in err
    assert not os.path.exists(tmp_path / "o.enc.pt")


@pytest.mark.parametrize("value", ["nan", "-inf", "1e40"])  # 1e40 is finite, inf as float32
def test_embeddings_to_torch_refuses_a_vector_not_finite_as_float32(tmp_path, capsys, value):
    dict_file = str(tmp_path / "d.vocab.pt")
    words = {"src": list(SPECIALS) + ["a", "b"], "tgt": list(SPECIALS)}
    save_tensors({"format": VOCAB_FORMAT, **words}, dict_file)
    bad = write_lines(tmp_path / "bad.txt", ["a 1 2 3", f"b 4 {value} 6"])
    err = fails(
        capsys,
        "embeddings_to_torch",
        "-emb_file_both",
        bad,
        "-dict_file",
        dict_file,
        "-output_file",
        tmp_path / "o",
    )
    assert f"bad.txt:2: the vector of 'b' has value 2 '{value}', which is not a finite" in err
    assert sorted(os.listdir(tmp_path)) == ["bad.txt", "d.vocab.pt"]  # neither output, no temporary
    # the largest float32 values and an underflow to 0 are fine
    good = write_lines(tmp_path / "good.txt", ["a 1 2 3", "b -3.4e38 3.4028235e38 1e-50"])
    run(
        "embeddings_to_torch",
        "-emb_file_both",
        good,
        "-dict_file",
        dict_file,
        "-output_file",
        tmp_path / "o",
    )
    enc = torch.load(tmp_path / "o.enc.pt", weights_only=True)
    assert enc.isfinite().all() and enc[5, 0] == -3.4e38 and enc[5, 2] == 0.0


def small_dict_file(tmp_path):
    dict_file = str(tmp_path / "d.vocab.pt")
    save_tensors(
        {
            "format": VOCAB_FORMAT,
            "src": list(SPECIALS) + ["a", "b"],
            "tgt": list(SPECIALS) + ["b", "c"],
        },
        dict_file,
    )
    return dict_file


def test_embeddings_to_torch_emb_file_both_as_in_the_1x_faq(tmp_path, capsys):
    emb = write_lines(tmp_path / "both.txt", ["b 1 2", "c 3 4", "a 5 6", "zz 7 8"])
    run(
        "embeddings_to_torch",
        "-emb_file_both",
        emb,
        "-dict_file",
        small_dict_file(tmp_path),
        "-output_file",
        tmp_path / "o",
        "-verbose",
    )
    out = capsys.readouterr().out
    assert (
        "enc: found 2 of 6" in out and "dec: found 2 of 6" in out and "enc: not found: <unk>" in out
    )
    assert "not found: a" not in out and "not found: c" not in out
    enc, dec = (torch.load(tmp_path / f"o.{side}.pt", weights_only=True) for side in ("enc", "dec"))
    assert torch.equal(enc[4:], torch.tensor([[5.0, 6.0], [1.0, 2.0]])) and not enc[:4].any()
    assert torch.equal(dec[4:], torch.tensor([[1.0, 2.0], [3.0, 4.0]])) and not dec[:4].any()


def test_embeddings_to_torch_skip_lines_and_word2vec_type(tmp_path):
    dict_file = small_dict_file(tmp_path)
    w2v = write_lines(tmp_path / "w2v.txt", ["comment line", "2 3", "a 1 2 3", "c 4 5 6"])
    run(
        "embeddings_to_torch",
        "-emb_file_both",
        w2v,
        "-dict_file",
        dict_file,
        "-output_file",
        tmp_path / "w",
        "-skip_lines",
        1,
        "-type",
        "word2vec",
    )
    dec = torch.load(tmp_path / "w.dec.pt", weights_only=True)
    assert dec.shape == (6, 3) and torch.equal(dec[5], torch.tensor([4.0, 5.0, 6.0]))
    glove = write_lines(tmp_path / "g.txt", ["# a header", "of two lines", "a 1 2 3"])
    run(
        "embeddings_to_torch",
        "-emb_file_enc",
        glove,
        "-emb_file_dec",
        glove,
        "-dict_file",
        dict_file,
        "-output_file",
        tmp_path / "g",
        "-skip_lines",
        2,
        "-type",
        "GloVe",
    )
    assert torch.equal(
        torch.load(tmp_path / "g.enc.pt", weights_only=True)[4], torch.tensor([1.0, 2.0, 3.0])
    )


def test_embeddings_to_torch_refusals_name_the_options(tmp_path, capsys):
    dict_file = small_dict_file(tmp_path)
    emb = write_lines(tmp_path / "e.txt", ["a 1 2"])
    out = ["-dict_file", dict_file, "-output_file", tmp_path / "o"]
    assert "-emb_file_both" in fails(capsys, "embeddings_to_torch", *out)
    assert "-emb_file_both" in fails(capsys, "embeddings_to_torch", "-emb_file_enc", emb, *out)
    assert "not both ways" in fails(
        capsys, "embeddings_to_torch", "-emb_file_both", emb, "-emb_file_enc", emb, *out
    )
    err = fails(capsys, "embeddings_to_torch", "-emb_file_both", emb, "-type", "word2vec", *out)
    assert "e.txt:1: -type word2vec: expected the header 'COUNT DIM'" in err
    assert "-type" in fails(
        capsys, "embeddings_to_torch", "-emb_file_both", emb, "-type", "fasttext", *out
    )
    assert "after the first 1 lines" in fails(
        capsys, "embeddings_to_torch", "-emb_file_both", emb, "-skip_lines", 1, *out
    )
    (tmp_path / "o.dec.pt").mkdir()
    err = fails(capsys, "embeddings_to_torch", "-emb_file_both", tmp_path / "absent.txt", *out)
    assert "o.dec.pt: is a directory" in err
    assert sorted(os.listdir(tmp_path)) == ["d.vocab.pt", "e.txt", "o.dec.pt"]


# --- create_vocabulary.py -------------------------------------------------------------------------


def test_create_vocabulary_counts_and_orders(tmp_path):
    a = write_lines(tmp_path / "a.txt", ["b a  c", "c\tb d", ""])
    b = write_lines(tmp_path / "b.txt", ["c e <unk>", "é"])
    out = tmp_path / "v.txt"
    run("create_vocabulary", "-file", a, b, "-out_file", out)
    assert out.read_text(encoding="utf-8") == "c 3\nb 2\na 1\nd 1\ne 1\né 1\n"
    run("create_vocabulary", "-file", a, b, "-out_file", out, "-size", 3)
    assert out.read_text(encoding="utf-8") == "c 3\nb 2\na 1\n"
    run("create_vocabulary", "-file", a, b, "-out_file", out, "-min_frequency", 2)
    assert Vocab.from_file(str(out), 0).itos == list(SPECIALS) + ["c", "b"]


def test_create_vocabulary_refuses_bad_input(tmp_path, capsys):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"ok\n\xff\n")
    err = fails(capsys, "create_vocabulary", "-file", bad, "-out_file", tmp_path / "v")
    assert "bad.txt:2: not valid UTF-8" in err
    assert "-size" in fails(
        capsys, "create_vocabulary", "-file", bad, "-out_file", tmp_path / "v", "-size", "-1"
    )


def test_create_vocabulary_never_writes_over_a_file_it_counts(tmp_path, capsys):
    corpus = write_lines(tmp_path / "a.txt", ["b a c"])
    other = write_lines(tmp_path / "b.txt", ["c"])
    err = fails(capsys, "create_vocabulary", "-file", other, corpus, "-out_file", corpus)
    assert err.strip() == (
        f"create_vocabulary.py: error: -out_file {corpus}: the same file as -file {corpus}, which "
        "this command reads; give the output a file of its own"
    )
    with open(corpus, encoding="utf-8") as f:
        assert f.read() == "b a c\n"  # it was replaced by the vocabulary


def test_create_vocabulary_from_a_preprocessed_vocab_field(trained, tmp_path, capsys):
    prefix, _ = trained
    saved = torch.load(f"{prefix}.vocab.pt", weights_only=True)
    for side in ("src", "tgt"):
        out = tmp_path / f"{side}.txt"
        run(
            "create_vocabulary",
            "-file_type",
            "field",
            "-file",
            f"{prefix}.vocab.pt",
            "-side",
            side,
            "-out_file",
            out,
        )
        assert out.read_text(encoding="utf-8") == "".join(
            f"{w}\n" for w in saved[side][len(SPECIALS) :]
        )
        # -src_vocab/-tgt_vocab give the same vocabulary
        assert Vocab.from_file(str(out), 0).itos == saved[side]
    run(
        "create_vocabulary",
        "-file_type",
        "field",
        "-file",
        f"{prefix}.vocab.pt",
        "-side",
        "src",
        "-out_file",
        tmp_path / "s3.txt",
        "-size",
        3,
    )
    assert (tmp_path / "s3.txt").read_text(encoding="utf-8").split() == saved["src"][4:7]
    text = write_lines(tmp_path / "t.txt", ["a b"])
    run(
        "create_vocabulary",
        "-file_type",
        "text",
        "-file",
        text,
        "-out_file",
        tmp_path / "t.vocab",
        "-side",
        "src",
    )
    assert (tmp_path / "t.vocab").read_text(encoding="utf-8") == "a 1\nb 1\n"
    vocab = f"{prefix}.vocab.pt"
    field = ["create_vocabulary", "-file_type", "field", "-out_file", tmp_path / "x.txt"]
    assert "needs -side src or -side tgt" in fails(capsys, *field, "-file", vocab)
    assert "-side" in fails(capsys, *field, "-file", vocab, "-side", "both")
    assert "reads one vocabulary file; got 2" in fails(
        capsys, *field, "-file", vocab, vocab, "-side", "src"
    )
    assert "-min_frequency" in fails(
        capsys, *field, "-file", vocab, "-side", "src", "-min_frequency", 2
    )
    assert "t.txt" in fails(capsys, *field, "-file", text, "-side", "src")
    assert "-file_type" in fails(
        capsys, "create_vocabulary", "-file_type", "json", "-file", text, "-out_file", "x"
    )
    assert not os.path.exists(tmp_path / "x.txt")


# --- spm_train.py ---------------------------------------------------------------------------------


def spm_corpus(tmp_path):
    import random

    rng = random.Random(0)
    words = ["lowest", "newer", "wider", "low", "new", "wide", "slower", "older"]
    return write_lines(
        tmp_path / "c.txt", [" ".join(rng.choice(words) for _ in range(6)) for _ in range(200)]
    )


def test_spm_train_writes_a_model_that_round_trips(tmp_path, capsys):
    import sentencepiece

    corpus = spm_corpus(tmp_path)
    run(
        "spm_train",
        "-input",
        corpus,
        "-model_prefix",
        tmp_path / "sp",
        "-vocab_size",
        30,
        "-model_type",
        "bpe",
    )
    assert capsys.readouterr().out.split() == [f"{tmp_path}/sp.model", f"{tmp_path}/sp.vocab"]
    processor = sentencepiece.SentencePieceProcessor(model_file=str(tmp_path / "sp.model"))
    assert processor.get_piece_size() == 30
    text = "newest lower wide"
    assert processor.decode(processor.encode(text)) == text
    with open(tmp_path / "sp.vocab", encoding="utf-8") as f:
        assert len(f.readlines()) == 30


def test_spm_train_too_large_vocabulary_is_one_line(tmp_path, capsys):
    corpus = spm_corpus(tmp_path)
    err = fails(
        capsys, "spm_train", "-input", corpus, "-model_prefix", tmp_path / "sp", "-vocab_size", 5000
    )
    assert err.startswith("spm_train.py: error: sentencepiece: ") and "5000" in err
    assert sorted(os.listdir(tmp_path)) == ["c.txt"]
