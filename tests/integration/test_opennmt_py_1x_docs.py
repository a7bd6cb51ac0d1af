"""OpenNMT-py 1.x's documented command lines for the options of the later 1.x releases, run unchanged
but for the command names, the file names and the scale (steps, sizes), on the shared corpora."""
from onmt_lite.models.checkpoint import load_checkpoint
from tests.helpers import run_cli, shared_data, write_lines


def halves(tmp_path, name):
    """The two halves of toy-ende's training file ``name``, as two corpora."""
    with open(f"{shared_data('toy-ende')}/{name}", encoding="utf-8") as f:
        lines = f.read().splitlines()
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
