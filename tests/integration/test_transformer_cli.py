"""The Transformer end to end: 1.x's FAQ command line, learning the reversal task to exact match,
copying words outside the vocabulary, exact resume, and translation (batch invariance, n-best,
ensembles with an RNN, -replace_unk, gold scores, -attn_debug, int8)."""

import os

import pytest
import torch

from onmt_lite import Translator
from tests.helpers import (
    assert_resumes_exactly,
    exact_match,
    lines,
    preprocess_in_process,
    run_in_process,
    step_losses,
    train_in_process,
    trained_reversal_model,
    translate_in_process,
)

# the tests marked kernels hold the models to a quality or compare translations: make test-kernels
# runs them again under other kernels

TRANSFORMER = [
    "-encoder_type",
    "transformer",
    "-decoder_type",
    "transformer",
    "-position_encoding",
    "-max_relative_positions",
    8,
    "-layers",
    2,
    "-rnn_size",
    64,
    "-word_vec_size",
    64,
    "-heads",
    4,
    "-transformer_ff",
    128,
    "-dropout",
    0,
    "-attention_dropout",
    0,
    "-param_init",
    0,
    "-param_init_glorot",
    "-optim",
    "adam",
    "-seed",
    1,
]
# exact match of the checkpoints every 200 steps on the held-out lines, measured on the default,
# AVX2 and AVX-512 kernels: the plain model 1.0 from 1,000 steps on (AVX2: 0.98 at 800); the copy
# one 1.0 from 1,400 on, after swings before (default kernels: 1.0 at 1,000, 0.79 at 1,200); the
# <unk> one, with -replace_unk, 0.75 to 1.0 (see its test). Each trains 200 steps past the point
# from which every kernel set holds its figure.
STEPS = {"plain": 1200, "copy": 1600, "unk": 1000}
NOAM = ["-batch_size", 64, "-decay_method", "noam", "-warmup_steps", 300, "-learning_rate", 2]
# 1.x's FAQ recipe (docs/FAQ.md, "How do I use the Transformer model?"), sizes and steps cut down
FAQ = [
    "-layers",
    2,
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
    40,
    "-max_generator_batches",
    2,
    "-dropout",
    0.1,
    "-batch_size",
    256,
    "-batch_type",
    "tokens",
    "-normalization",
    "tokens",
    "-accum_count",
    2,
    "-optim",
    "adam",
    "-adam_beta2",
    0.998,
    "-decay_method",
    "noam",
    "-warmup_steps",
    10,
    "-learning_rate",
    2,
    "-max_grad_norm",
    0,
    "-param_init",
    0,
    "-param_init_glorot",
    "-label_smoothing",
    0.1,
    "-valid_steps",
    20,
    "-save_checkpoint_steps",
    20,
]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """A Transformer trained on 3,000 reversal pairs (measured: 100% exact match on held-out lines);
    a copy Transformer whose target vocabulary lacks most words (it must copy them); a plain one
    with that small vocabulary (it can only write <unk> for them)."""
    corpus = {"n_train": 3000, "n_valid": 100}
    return {
        kind: trained_reversal_model(
            tmp_path_factory, kind, pre, [*TRANSFORMER, *extra], STEPS[kind], **corpus
        )
        for kind, pre, extra in (
            ("plain", [], NOAM),
            ("copy", ["-dynamic_dict", "-tgt_vocab_size", 6], ["-copy_attn", *NOAM]),
            ("unk", ["-tgt_vocab_size", 6], NOAM),
        )
    }


def translate(model, src, out, *args):
    """The output lines of onmt_lite_translate, run in this process."""
    translate_in_process(
        "-model",
        *([model] if isinstance(model, str) else model),
        "-src",
        src,
        "-output",
        out,
        *args,
    )
    return lines(out)


def test_the_faq_recipe_runs_unchanged_but_for_the_sizes(tmp_path):
    prefix = preprocess_in_process(str(tmp_path))
    result = run_in_process(
        "train", "-data", prefix, "-save_model", tmp_path / "faq", *FAQ, "-report_every", 10
    )
    assert result.returncode == 0, result.stderr
    losses = step_losses(result.stderr.splitlines())
    assert sorted(losses) == [10, 20, 30, 40]
    xent = [float(losses[s].split("xent:")[1]) for s in (10, 40)]
    assert xent[1] < xent[0]
    checkpoint = torch.load(tmp_path / "faq_step_40.pt", weights_only=True)
    assert checkpoint["opt"]["encoder_type"] == "transformer"
    assert checkpoint["model"]["decoder.layers.1.self_attn.qkv.weight"].shape == (48, 16)
    out = translate(
        str(tmp_path / "faq_step_40.pt"),
        os.path.join(os.path.dirname(prefix), "src-valid.txt"),
        tmp_path / "out.txt",
    )
    assert len(out) == 40


@pytest.mark.kernels
def test_a_transformer_learns_the_reversal_task_to_exact_match(models, tmp_path):
    m = models["plain"]
    assert (
        exact_match(translate(m["model"], m["src"], tmp_path / "out.txt"), lines(m["tgt"])) == 1.0
    )


@pytest.mark.kernels
def test_a_copy_transformer_writes_words_outside_its_vocabulary(models, tmp_path):
    m = models["copy"]
    out = translate(m["model"], m["src"], tmp_path / "out.txt")
    vocab = set(torch.load(m["data"] + ".vocab.pt", weights_only=True)["tgt"])
    copied = {word for line in out for word in line.split()} - vocab
    assert len(copied) >= 10
    assert exact_match(out, lines(m["tgt"])) >= 0.9


@pytest.mark.parametrize("kind", ["plain", "copy"])
# make test-kernels runs beam 5 (greedy batches are test_translate's)
@pytest.mark.parametrize("beam", [1, pytest.param(5, marks=pytest.mark.kernels)])
def test_batch_size_and_joining_a_running_search_change_no_output_line(
    models, tmp_path, kind, beam
):
    m = models[kind]
    runs = [
        translate(m["model"], m["src"], tmp_path / f"out{i}.txt", "-beam_size", beam, *args)
        for i, args in enumerate(
            (
                ["-batch_size", 1],
                ["-batch_size", 64],
                ["-batch_size", 3],
                ["-batch_size", 40, "-batch_type", "tokens"],
            )
        )
    ]
    assert runs[1] == runs[0] and runs[2] == runs[0] and runs[3] == runs[0]


@pytest.mark.kernels
def test_n_best_lists_are_sorted_and_start_with_the_one_best(models, tmp_path):
    m = models["plain"]
    best = translate(m["model"], m["src"], tmp_path / "best.txt")
    translator = Translator.load(m["model"], beam_size=4, n_best=3)
    results = translator.translate(lines(m["src"])[:20])
    for result, first in zip(results, best):
        assert len(result.hypotheses) == 3 and result.hypotheses[0] == first
        assert result.scores == sorted(result.scores, reverse=True)
        assert result.attention[0].shape[1] == len(result.source)


@pytest.mark.kernels
def test_gold_scores_are_the_negative_loss_of_the_references(models):
    m = models["plain"]
    translator = Translator.load(m["model"])
    result = translator.translate(["w1 w2 w3"], ["w3 w2 w1"])[0]
    assert result.gold_words == 4 and result.gold_score < 0
    worse = translator.translate(["w1 w2 w3"], ["w1 w2 w3"])[0]
    assert worse.gold_score < result.gold_score


def test_an_ensemble_of_a_transformer_and_an_rnn_translates(models, tmp_path):
    m = models["plain"]
    rnn = str(tmp_path / "rnn")
    train_in_process(
        m["data"],
        rnn,
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
        "-train_steps",
        300,
        "-seed",
        1,
    )
    out = translate([m["model"], rnn + "_step_300.pt"], m["src"], tmp_path / "out.txt")
    assert exact_match(out, lines(m["tgt"])) >= 0.9


@pytest.mark.kernels
def test_replace_unk_writes_the_source_word_the_top_layer_attends_to(models, tmp_path):
    """Each <unk> of the output becomes the source word of its largest attention weight, and no
    other word changes: checked word by word. How many lines that makes right depends on where the
    attention, which nothing trains to point at the copied word, happens to point: 0.75 to 0.98 of
    the held-out lines across kernel sets and checkpoints (0.98 from 800 steps on with the default
    kernels; AVX-512: 0.89 at 800, 0.80 at 1,000, 0.75 from 1,400 on), so the quality asked is
    0.6."""
    m = models["unk"]
    sources = lines(m["src"])
    plain = Translator.load(m["model"]).translate(sources)
    replacing = Translator.load(m["model"], replace_unk=True)
    replaced = [r.hypotheses[0] for r in replacing.translate(sources)]
    unknown = 0
    for result, line in zip(plain, replaced):
        # [out_len x src_len]
        words = result.hypotheses[0].split()
        attention = result.attention[0]
        expected = [
            result.source[int(attention[i].argmax())] if word == "<unk>" else word
            for i, word in enumerate(words)
        ]
        assert line.split() == expected
        unknown += words.count("<unk>")
    assert unknown > 50
    assert exact_match(replaced, lines(m["tgt"])) >= 0.6
    assert translate(m["model"], m["src"], tmp_path / "replaced.txt", "-replace_unk") == replaced
    result = run_in_process(
        "translate",
        "-model",
        m["model"],
        "-src",
        m["src"],
        "-output",
        tmp_path / "debug.txt",
        "-attn_debug",
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("ATTENTION ") == len(lines(m["src"]))


@pytest.mark.kernels
def test_int8_translation_stays_close_to_float(models, tmp_path):
    m = models["plain"]
    float_out = translate(m["model"], m["src"], tmp_path / "f.txt")
    int8_out = translate(m["model"], m["src"], tmp_path / "q.txt", "-quantize", "int8")
    assert exact_match(int8_out, float_out) >= 0.95


# a small Transformer with dropout everywhere, reporting every step
SMALL_WITH_DROPOUT = [
    *TRANSFORMER[:-2],
    "-layers",
    1,
    "-rnn_size",
    16,
    "-word_vec_size",
    16,
    "-heads",
    2,
    "-transformer_ff",
    32,
    "-dropout",
    0.3,
    "-attention_dropout",
    0.2,
    "-batch_size",
    8,
    "-accum_count",
    2,
    "-report_every",
    1,
    "-valid_steps",
    3,
    "-save_checkpoint_steps",
    4,
    "-seed",
    7,
    "-decay_method",
    "noam",
    "-warmup_steps",
    3,
    "-learning_rate",
    2,
]


def test_a_resumed_transformer_run_gives_the_same_losses_as_an_uninterrupted_one(models, tmp_path):
    assert_resumes_exactly(models["plain"]["data"], tmp_path, *SMALL_WITH_DROPOUT)


def test_the_average_attention_network_resumes_exactly_and_translates_whatever_the_batch(
    models, tmp_path
):
    """1.x's -self_attn_type average -aan_useffn end to end: a resumed run gives the uninterrupted
    run's losses (dropout in the average's feed-forward block too), every line translates alike at
    any batch size (rows joining a running search), and its conversion to OpenNMT-py and back
    translates alike; CTranslate2's is refused by name."""
    m = models["plain"]
    args = [*SMALL_WITH_DROPOUT, "-self_attn_type", "average", "-aan_useffn"]
    assert_resumes_exactly(m["data"], tmp_path, *args)
    model = str(tmp_path / "full_step_8.pt")
    search = ["-beam_size", 3, "-n_best", 2, "-max_length", 12]
    one = translate(model, m["src"], tmp_path / "b1.txt", *search, "-batch_size", 1)
    seven = translate(model, m["src"], tmp_path / "b7.txt", *search, "-batch_size", 7)
    assert one == seven and len(one) == 2 * len(lines(m["src"]))
    peer = tmp_path / "peer.pt"
    back = tmp_path / "back.pt"
    for args in (["-to", "opennmt-py", "-output", peer], ["-from", "opennmt-py", "-output", back]):
        source = model if args[0] == "-to" else peer
        assert run_in_process("convert", "-model", source, *args).returncode == 0
    assert translate(str(back), m["src"], tmp_path / "back.txt", *search) == one
    out = tmp_path / "ct2"
    result = run_in_process("convert", "-model", model, "-to", "ctranslate2", "-output", out)
    assert result.returncode == 2 and "no average attention" in result.stderr.splitlines()[-1]
    assert not out.exists()


def test_use_ckpting_trains_with_the_losses_of_a_run_without_it(models, tmp_path):
    """Activation checkpointing recomputes with the same dropout masks: the same logged losses."""
    m = models["plain"]
    run = [*SMALL_WITH_DROPOUT, "-train_steps", 4]
    _, plain = train_in_process(m["data"], str(tmp_path / "plain"), *run)
    _, recomputed = train_in_process(
        m["data"], str(tmp_path / "ckpt"), *run, "-use_ckpting", "ffn", "mha"
    )
    assert sorted(step_losses(plain)) == [1, 2, 3, 4]
    assert step_losses(recomputed) == step_losses(plain)
    # 1 encoder layer (feed-forward, self-attention) and 1 decoder layer (and context attention)
    assert any("-use_ckpting ffn mha: 5 modules recompute" in line for line in recomputed)
    result = run_in_process(
        "train", "-data", m["data"], "-save_model", tmp_path / "lora", "-use_ckpting", "lora"
    )
    assert result.returncode == 2
    assert "-use_ckpting lora (it has no LoRA layers)" in result.stderr


def test_bf16_training_and_translation_run(models, tmp_path):
    m = models["plain"]
    _, log = train_in_process(
        m["data"],
        str(tmp_path / "bf16"),
        *TRANSFORMER,
        "-model_dtype",
        "bf16",
        *NOAM,
        "-train_steps",
        20,
        "-report_every",
        10,
    )
    # measured: 3.56 then 2.86 (a bf16 step takes some 200 ms on a CPU without bf16 arithmetic)
    xent = [float(step_losses(log)[s].split("xent:")[1]) for s in (10, 20)]
    assert xent[1] < xent[0]
    out = translate(str(tmp_path / "bf16_step_20.pt"), m["src"], tmp_path / "out.txt")
    assert len(out) == len(lines(m["src"]))
