"""OpenNMT-py 1.x's command lines for the options of the later 1.x releases, one per group of them,
run unchanged but for the command names, the file names and the scale (steps, sizes), on the shared
corpora: the documented ones (1.x's FAQ), and for the groups its documentation has no command line
for, one as a 1.x user writes it."""

import json

from onmt_lite.models.checkpoint import load_checkpoint
from tests.helpers import run_in_process, shared_data, step_losses, write_lines


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


def halves(tmp_path, name):
    """The two halves of toy-ende's training file ``name``, as two corpora."""
    lines = read(f"{shared_data('toy-ende')}/{name}")
    return [
        write_lines(tmp_path / f"{name}.{part}", lines[i::2]) for part, i in (("1", 0), ("2", 1))
    ]


def test_faq_weighting_corpora(tmp_path):
    """1.x FAQ, "How can I weight different corpora at training?": -train_ids at preprocessing,
    -data_ids and -data_weights 1 7 at training."""
    data = shared_data("toy-ende")
    src = halves(tmp_path, "src-train.txt")
    tgt = halves(tmp_path, "tgt-train.txt")
    result = run_in_process(
        "preprocess",
        "-train_src",
        *src,
        "-train_tgt",
        *tgt,
        "-train_ids",
        "A",
        "B",
        "-valid_src",
        f"{data}/src-val.txt",
        "-valid_tgt",
        f"{data}/tgt-val.txt",
        "-save_data",
        tmp_path / "mydata",
        "-src_vocab_size",
        2000,
        "-tgt_vocab_size",
        2000,
    )
    assert result.returncode == 0, result.stderr
    result = run_in_process(
        "train",
        "-data",
        tmp_path / "mydata",
        "-save_model",
        tmp_path / "mymodel",
        "-data_ids",
        "A",
        "B",
        "-data_weights",
        1,
        7,
        "-layers",
        1,
        "-rnn_size",
        16,
        "-word_vec_size",
        8,
        "-batch_size",
        16,
        "-train_steps",
        16,
    )
    assert result.returncode == 0, result.stderr
    position = load_checkpoint(str(tmp_path / "mymodel_step_16.pt"))["data"]
    assert position["round"] == [["A", 1], ["B", 7]]
    assert (position["corpus"], position["count"]) == (0, 0)
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
    src, tgt = (
        write_lines(tmp_path / f"{side}.txt", lines[:400])
        for side, lines in (
            ("src", read(f"{data}/src-train.txt")),
            ("tgt", read(f"{data}/tgt-train.txt")),
        )
    )
    align = diagonal_alignments(src, tgt, tmp_path / "align.txt", 400)
    result = run_in_process(
        "preprocess",
        "-train_src",
        src,
        "-train_tgt",
        tgt,
        "-train_align",
        align,
        "-save_data",
        tmp_path / "data",
    )
    assert result.returncode == 0, result.stderr
    result = run_in_process(
        "train",
        "-data",
        tmp_path / "data",
        "-save_model",
        tmp_path / "model",
        "-layers",
        4,
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
        "-batch_size",
        512,
        "-batch_type",
        "tokens",
        "-normalization",
        "tokens",
        "-optim",
        "adam",
        "-learning_rate",
        0.001,
        "-param_init",
        0,
        "-param_init_glorot",
        "-lambda_align",
        0.05,
        "-alignment_layer",
        3,
        "-alignment_heads",
        0,
        "-full_context_alignment",
    )
    assert result.returncode == 0, result.stderr
    test_src = write_lines(tmp_path / "test.txt", read(f"{data}/src-test.txt")[:5])
    result = run_in_process(
        "translate",
        "-model",
        tmp_path / "model_step_10.pt",
        "-src",
        test_src,
        "-output",
        tmp_path / "pred.txt",
        "-report_align",
        "-max_length",
        8,
    )
    assert result.returncode == 0, result.stderr
    for source, line in zip(read(test_src), read(tmp_path / "pred.txt")):
        words, pairs = line.split(" ||| ")
        links = [tuple(map(int, pair.split("-"))) for pair in pairs.split()]
        # one link per output word, to a source word, sorted by source then target
        assert sorted(t for _, t in links) == list(range(len(words.split())))
        assert all(0 <= s < len(source.split()) for s, _ in links) and links == sorted(links)


# 1.x's documentation has command lines for two of the groups above only; for the others, a command
# line as a 1.x user writes it, with the options' spellings and values from 1.x's -help.
SMALL_RNN = ["-layers", 1, "-rnn_size", 16, "-word_vec_size", 8, "-batch_size", 16]


def small_toy_ende(tmp_path, n=200, *preprocess_args, src_lines=None):
    data = shared_data("toy-ende")
    src = write_lines(tmp_path / "src.txt", src_lines or read(f"{data}/src-train.txt")[:n])
    tgt = write_lines(tmp_path / "tgt.txt", read(f"{data}/tgt-train.txt")[:n])
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
        tmp_path / "data",
        *preprocess_args,
    )
    assert result.returncode == 0, result.stderr
    return tmp_path / "data"


def case_feature(line):
    """Lua OpenNMT's case feature written out: each word lowercased, with ``C`` (capitalised) or
    ``l``."""
    return " ".join(f"{w.lower()}\uffe8{'C' if w[:1].isupper() else 'l'}" for w in line.split())


def test_source_word_features_from_preprocess_to_translate(tmp_path):
    lines = [case_feature(line) for line in read(f"{shared_data('toy-ende')}/src-train.txt")[:200]]
    data = small_toy_ende(tmp_path, 200, src_lines=lines)
    result = run_in_process(
        "train",
        "-data",
        data,
        "-save_model",
        tmp_path / "m",
        *SMALL_RNN,
        "-train_steps",
        4,
        "-feat_merge",
        "mlp",
        "-feat_vec_size",
        4,
    )
    assert result.returncode == 0, result.stderr
    checkpoint = load_checkpoint(str(tmp_path / "m_step_4.pt"))
    assert checkpoint["vocab"]["src_feats"][0][4:] in (["l", "C"], ["C", "l"])
    assert tuple(checkpoint["model"]["encoder.embeddings.feat_luts.0.weight"].shape) == (6, 4)
    test = write_lines(tmp_path / "test.txt", lines[:3])
    result = run_in_process(
        "translate",
        "-model",
        tmp_path / "m_step_4.pt",
        "-src",
        test,
        "-output",
        tmp_path / "p.txt",
        "-max_length",
        5,
    )
    assert result.returncode == 0, result.stderr
    assert len(read(tmp_path / "p.txt")) == 3


def train_small_rnn(tmp_path, data, *args):
    """``onmt_lite_train`` of ``SMALL_RNN`` on ``data`` with ``args``, saving to ``tmp_path/m``."""
    return run_in_process(
        "train", "-data", data, "-save_model", tmp_path / "m", *SMALL_RNN, *map(str, args)
    )


def test_averaging_and_schedules(tmp_path):
    data = small_toy_ende(tmp_path)
    result = train_small_rnn(
        tmp_path,
        data,
        "-train_steps",
        100,
        "-average_decay",
        1e-4,
        "-average_every",
        2,
        "-dropout",
        0.3,
        0.1,
        "-attention_dropout",
        0.1,
        0.0,
        "-dropout_steps",
        0,
        4,
        "-accum_count",
        1,
        2,
        "-accum_steps",
        0,
        4,
        "-single_pass",
    )
    assert result.returncode == 0, result.stderr
    # one pass of 13 batches of 16 (200 examples): steps 1-4 take a batch each, 5-8 two, 9 the last
    # one
    saved = sorted(tmp_path.glob("m_step_*.pt"))
    assert [p.name for p in saved] == ["m_step_9.pt"], saved
    checkpoint = load_checkpoint(str(saved[0]))
    raw = checkpoint["raw_weights"]["model"]  # kept for resuming; the saved "model" is the average
    assert raw.keys() == checkpoint["model"].keys()
    assert any(not (raw[k] == v).all() for k, v in checkpoint["model"].items())


def test_apex_fusedadam_and_the_noamwd_schedule(tmp_path):
    """1.x's -optim fusedadam (apex's FusedAdam, with fp16 on a GPU in 1.x; Adam here) and
    -decay_method noamwd (noam times the step decay): each step's logged learning rate is 1.x's
    formula's."""
    data = small_toy_ende(tmp_path)
    result = train_small_rnn(
        tmp_path,
        data,
        "-optim",
        "fusedadam",
        "-adam_beta2",
        0.998,
        "-decay_method",
        "noamwd",
        "-warmup_steps",
        4,
        "-learning_rate",
        2,
        "-learning_rate_decay",
        0.5,
        "-start_decay_steps",
        6,
        "-decay_steps",
        2,
        "-train_steps",
        9,
        "-report_every",
        1,
    )
    assert result.returncode == 0, result.stderr
    assert "WARNING" not in result.stderr  # every option given acts
    logged = {
        int(line.split("] Step ")[1].split("/")[0]): float(line.split("lr: ")[1].split(";")[0])
        for line in result.stderr.splitlines()
        if "] Step " in line
    }
    halvings = [0, 0, 0, 0, 0, 1, 1, 2, 2]  # steps 1 to 9: at step 6, then every 2 steps
    expected = {
        step: 2 * 16**-0.5 * min(step**-0.5, step * 4**-1.5) * 0.5**times
        for step, times in zip(range(1, 10), halvings)
    }
    assert logged.keys() == expected.keys()
    assert all(abs(logged[s] - expected[s]) <= 1e-4 * expected[s] for s in expected), logged


def test_translation_options(tmp_path):
    data = small_toy_ende(tmp_path)
    result = run_in_process(
        "train", "-data", data, "-save_model", tmp_path / "m", *SMALL_RNN, "-train_steps", 2
    )
    assert result.returncode == 0, result.stderr
    src = write_lines(tmp_path / "s.txt", read(tmp_path / "src.txt")[:5])
    prefixes = write_lines(
        tmp_path / "t.txt", [" ".join(t.split()[:2]) for t in read(tmp_path / "tgt.txt")[:5]]
    )
    result = run_in_process(
        "translate",
        "-model",
        tmp_path / "m_step_2.pt",
        "-src",
        src,
        "-tgt",
        prefixes,
        "-tgt_prefix",
        "-shard_size",
        2,
        "-fp32",
        "-max_sent_length",
        6,
        "-dump_beam",
        tmp_path / "beam.json",
        "-beam_size",
        3,
        "-output",
        tmp_path / "p.txt",
    )
    assert result.returncode == 0, result.stderr
    for prefix, output in zip(read(prefixes), read(tmp_path / "p.txt"), strict=True):
        assert output.split()[:2] == prefix.split() and len(output.split()) <= 6
    with open(tmp_path / "beam.json", encoding="utf-8") as f:
        # one entry per line, over the shards
        assert [entry["line"] for entry in json.load(f)] == [
            1,
            2,
            3,
            4,
            5,
        ]


def test_attention_variants(tmp_path):
    data = small_toy_ende(tmp_path)
    result = run_in_process(
        "train",
        "-data",
        data,
        "-save_model",
        tmp_path / "m",
        *SMALL_RNN,
        "-train_steps",
        3,
        "-global_attention",
        "mlp",
        "-global_attention_function",
        "sparsemax",
        "-generator_function",
        "sparsemax",
        "-context_gate",
        "both",
    )
    assert result.returncode == 0, result.stderr
    checkpoint = load_checkpoint(str(tmp_path / "m_step_3.pt"))
    assert any(".context_gate." in name for name in checkpoint["model"])
    assert {checkpoint["opt"][k] for k in ("global_attention_function", "generator_function")} == {
        "sparsemax"
    }
    test = write_lines(tmp_path / "test.txt", read(tmp_path / "src.txt")[:3])
    result = run_in_process(
        "translate",
        "-model",
        tmp_path / "m_step_3.pt",
        "-src",
        test,
        "-output",
        tmp_path / "p.txt",
        "-max_length",
        5,
        "-replace_unk",
    )
    assert result.returncode == 0, result.stderr
    assert len(read(tmp_path / "p.txt")) == 3


def test_the_rest(tmp_path):
    # infilling's word starts: every word (1.x's default is ▁)
    data = small_toy_ende(
        tmp_path,
        200,
        "-vocab_size_multiple",
        8,
        "-num_threads",
        2,
        "-train_ids",
        "news",
        "-subword_prefix",
        "",
    )
    result = run_in_process(
        "train",
        "-data",
        data,
        "-save_model",
        tmp_path / "m",
        *SMALL_RNN,
        "-data_ids",
        "news",
        "-brnn",
        "-epochs",
        1,
        "-batch_size_multiple",
        8,
        "-gpu_verbose_level",
        0,
        "-queue_size",
        40,
        "-log_file",
        tmp_path / "train.log",
        "-log_file_level",
        "DEBUG",
    )
    assert result.returncode == 0, result.stderr
    # one epoch: 13 batches of 16 (200 examples)
    checkpoint = load_checkpoint(str(tmp_path / "m_step_13.pt"))
    assert checkpoint["opt"]["encoder_type"] == "brnn"
    assert all(len(checkpoint["vocab"][side]) % 8 == 0 for side in ("src", "tgt"))
    assert "1 pass(es) over the training data end at step 13" in "".join(
        read(tmp_path / "train.log")
    )
    losses = {}
    for noise in (
        [],
        [
            "-data_to_noise",
            "news",
            "-src_noise",
            "sen_shuffling",
            "infilling",
            "-src_noise_prob",
            0.5,
            0.3,
        ],
    ):
        result = run_in_process(
            "train",
            "-data",
            data,
            "-save_model",
            tmp_path / f"n{len(losses)}",
            *SMALL_RNN,
            "-data_ids",
            "news",
            "-train_steps",
            2,
            "-report_every",
            1,
            "-seed",
            5,
            *noise,
        )
        assert result.returncode == 0, result.stderr
        losses[bool(noise)] = step_losses(result.stderr.splitlines())
    assert losses[True][1] != losses[False][1]  # the same batch, its sources noised
