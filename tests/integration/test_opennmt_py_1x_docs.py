"""OpenNMT-py 1.x's documented command lines for the options of the later 1.x releases, run unchanged
but for the command names, the file names and the scale (steps, sizes), on the shared corpora."""
from onmt_lite.models.checkpoint import load_checkpoint
from tests.helpers import run_cli, shared_data, write_lines


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


def halves(tmp_path, name):
    """The two halves of toy-ende's training file ``name``, as two corpora."""
    lines = read(f"{shared_data('toy-ende')}/{name}")
    return [write_lines(tmp_path / f"{name}.{part}", lines[i::2]) for part, i in (("1", 0), ("2", 1))]


def test_faq_weighting_corpora(tmp_path):
    """1.x FAQ, "How can I weight different corpora at training?": -train_ids at preprocessing,
    -data_ids and -data_weights 1 7 at training."""
    data = shared_data("toy-ende")
    src, tgt = halves(tmp_path, "src-train.txt"), halves(tmp_path, "tgt-train.txt")
    result = run_cli("preprocess", "-train_src", *src, "-train_tgt", *tgt, "-train_ids", "A", "B",
                     "-valid_src", f"{data}/src-val.txt", "-valid_tgt", f"{data}/tgt-val.txt",
                     "-save_data", tmp_path / "mydata", "-src_vocab_size", 2000, "-tgt_vocab_size", 2000)
    assert result.returncode == 0, result.stderr
    result = run_cli("train", "-data", tmp_path / "mydata", "-save_model", tmp_path / "mymodel",
                     "-data_ids", "A", "B", "-data_weights", 1, 7,
                     "-layers", 1, "-rnn_size", 16, "-word_vec_size", 8, "-batch_size", 16, "-train_steps", 16)
    assert result.returncode == 0, result.stderr
    position = load_checkpoint(str(tmp_path / "mymodel_step_16.pt"))["data"]
    assert position["turns"] == ["A"] + ["B"] * 7 and position["turn"] == 0
    # 16 batches: two rounds of 1 from A and 7 from B
    assert position["corpora"]["A"]["batch"] == 2 and position["corpora"]["B"]["batch"] == 14


def diagonal_alignments(src_path, tgt_path, out_path, n):
    """Pharaoh links i-i of the first ``n`` pairs (up to the shorter side): alignments of the right
    shape for a command-line run (toy-ende has none)."""
    with open(src_path, encoding="utf-8") as s, open(tgt_path, encoding="utf-8") as t:
        pairs = [(len(a.split()), len(b.split())) for a, b, _ in zip(s, t, range(n))]
    return write_lines(out_path, [" ".join(f"{i}-{i}" for i in range(min(pair))) for pair in pairs])


def test_faq_word_alignments_while_translating(tmp_path):
    """1.x FAQ, "Can I get word alignment while translating?": the Transformer recipe with
    -lambda_align 0.05 -alignment_layer 3 -alignment_heads 0 -full_context_alignment, preprocessing
    with -train_align, translation with -report_align (Pharaoh pairs after ' ||| ')."""
    data = shared_data("toy-ende")
    src, tgt = (write_lines(tmp_path / f"{side}.txt", lines[:400]) for side, lines in
                (("src", read(f"{data}/src-train.txt")), ("tgt", read(f"{data}/tgt-train.txt"))))
    align = diagonal_alignments(src, tgt, tmp_path / "align.txt", 400)
    result = run_cli("preprocess", "-train_src", src, "-train_tgt", tgt, "-train_align", align,
                     "-save_data", tmp_path / "data")
    assert result.returncode == 0, result.stderr
    result = run_cli("train", "-data", tmp_path / "data", "-save_model", tmp_path / "model",
                     "-layers", 4, "-rnn_size", 16, "-word_vec_size", 16, "-transformer_ff", 32, "-heads", 2,
                     "-encoder_type", "transformer", "-decoder_type", "transformer", "-position_encoding",
                     "-train_steps", 10, "-batch_size", 512, "-batch_type", "tokens", "-normalization", "tokens",
                     "-optim", "adam", "-learning_rate", 0.001, "-param_init", 0, "-param_init_glorot",
                     "-lambda_align", 0.05, "-alignment_layer", 3, "-alignment_heads", 0, "-full_context_alignment")
    assert result.returncode == 0, result.stderr
    test_src = write_lines(tmp_path / "test.txt", read(f"{data}/src-test.txt")[:5])
    result = run_cli("translate", "-model", tmp_path / "model_step_10.pt", "-src", test_src,
                     "-output", tmp_path / "pred.txt", "-report_align", "-max_length", 8)
    assert result.returncode == 0, result.stderr
    for source, line in zip(read(test_src), read(tmp_path / "pred.txt")):
        words, pairs = line.split(" ||| ")
        links = [tuple(map(int, pair.split("-"))) for pair in pairs.split()]
        # one link per output word, to a source word, sorted by source then target
        assert sorted(t for _, t in links) == list(range(len(words.split())))
        assert all(0 <= s < len(source.split()) for s, _ in links) and links == sorted(links)
