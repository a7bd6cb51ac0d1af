"""translate/loading.py: a translation option that another option makes idle is translated as
asked, and named (the command and the server warn of it; 1.x warned of the penalties' four cases);
the warning tells the truth: the search gives what it gives without the idle option."""

import pytest
import torch

from onmt_lite.models.builder import build_model
from onmt_lite.opts import build_parser, parse, translate_opts
from onmt_lite.translate.loading import idle_translation_options, search_options
from onmt_lite.translate.search import SearchOptions
from onmt_lite.translate.translator import Translator
from tests.model_helpers import VOCABS, model_options

# (the options around it, the idle option, the warning)
IDLE = [
    ([], ["-alpha", "0.6"], "-alpha 0.6 has no effect: only -length_penalty wu reads it"),
    (
        ["-length_penalty", "avg"],
        ["-alpha", "0.6"],
        "-alpha 0.6 has no effect: only -length_penalty wu reads it",
    ),
    (
        [],
        ["-length_penalty", "wu"],
        "-length_penalty wu has no effect with -alpha 0 (its penalty is 1)",
    ),
    ([], ["-beta", "0.3"], "-beta 0.3 has no effect without -coverage_penalty wu or summary"),
    (
        [],
        ["-coverage_penalty", "summary"],
        "-coverage_penalty summary has no effect with -beta 0",
    ),
    (
        [],
        ["-stepwise_penalty"],
        "-stepwise_penalty has no effect without -coverage_penalty wu or summary",
    ),
    (
        [],
        ["-ignore_when_blocking", "t3"],
        "-ignore_when_blocking has no effect without -block_ngram_repeat",
    ),
    (
        [],
        ["-random_sampling_temp", "0.5"],
        "-random_sampling_temp 0.5 has no effect: -random_sampling_topk 1 is greedy search, not "
        "sampling",
    ),
    (
        ["-beam_size", "1"],
        ["-ratio", "0.5"],
        "-ratio 0.5 has no effect with -beam_size 1: it stops a beam search (greedy search and "
        "sampling stop at </s>)",
    ),
    (
        ["-max_length", "4"],
        ["-min_length", "9"],
        "-min_length 9 is above -max_length 4: every output stops at -max_length, without </s>",
    ),
]


# options idle outside the search: its options are the same with or without them
IDLE_OUTSIDE_THE_SEARCH = [
    (
        [],
        ["-phrase_table", "table.txt"],
        "-phrase_table table.txt has no effect: only -replace_unk reads it",
    ),
    (
        [],
        ["-avg_raw_probs"],
        "-avg_raw_probs has no effect: -model gives one model, not an ensemble",
    ),
    (
        [],
        ["-seed", "7"],
        "-seed 7 has no effect: only random sampling (-random_sampling_topk other than 1) draws",
    ),
]


def command(*args, models=("m.pt",)):
    required = ["-model", *models, "-src", "s.txt"]
    return parse(build_parser("test", [translate_opts]), [*required, *args])


@pytest.mark.parametrize("around,idle,warning", IDLE + IDLE_OUTSIDE_THE_SEARCH)
def test_an_idle_option_is_named(around, idle, warning):
    assert idle_translation_options(command(*around, *idle)) == [warning]


SAMPLING = ["-beam_size", "1", "-random_sampling_topk", "5", "-random_sampling_temp", "0.5"]


def test_options_that_act_are_not_named():
    acting = [
        "-replace_unk",
        "-phrase_table",
        "table.txt",
        "-length_penalty",
        "wu",
        "-alpha",
        "0.6",
        "-coverage_penalty",
        "wu",
        "-beta",
        "0.2",
        "-stepwise_penalty",
        "-block_ngram_repeat",
        "2",
        "-ignore_when_blocking",
        "t3",
        "-min_length",
        "3",
        "-ratio",
        "0.5",
    ]
    assert idle_translation_options(command(*acting)) == []
    assert idle_translation_options(command(*SAMPLING, "-seed", "7")) == []


@pytest.fixture(scope="module")
def translator_of():
    torch.manual_seed(1)  # outputs of several words, repeated ones among them (t3)
    model = build_model(model_options("-global_attention", "mlp", "-param_init", "1"), VOCABS)
    model.eval()

    def translator(args):
        return Translator([model], VOCABS, search=search_options(command(*args), VOCABS["tgt"]))

    return translator


@pytest.mark.parametrize("around,idle,warning", IDLE[:-1])
def test_the_search_is_the_same_without_the_idle_option(translator_of, around, idle, warning):
    lines = ["s1 s2 s3", "s3 s1", "s2 s2 s4 s1", "s4"]
    baseline = translator_of(["-beam_size", "3", "-max_length", "8", *around])
    with_idle = translator_of(["-beam_size", "3", "-max_length", "8", *around, *idle])
    for alone, idled in zip(baseline.translate(lines), with_idle.translate(lines)):
        assert idled.hypotheses == alone.hypotheses
        assert idled.scores == pytest.approx(alone.scores, abs=1e-6)


def test_a_minimum_above_the_maximum_ends_every_output_at_the_maximum(translator_of):
    results = translator_of(["-min_length", "9", "-max_length", "4"]).translate(["s1 s2", "s3"])
    assert [len(result.tokens[0]) for result in results] == [4, 4]
    assert SearchOptions(min_length=9, max_length=4).max_length == 4


def test_an_ensembles_averaging_is_idle_with_one_model(translator_of):
    assert idle_translation_options(command("-avg_raw_probs", models=("a.pt", "b.pt"))) == []
    translator = translator_of(["-beam_size", "3", "-max_length", "8"])
    lines = ["s1 s2 s3", "s3 s1", "s2 s2 s4 s1"]
    log_probs = translator.translate(lines)
    translator.avg_raw_probs = True
    for averaged, alone in zip(translator.translate(lines), log_probs):
        assert averaged.hypotheses == alone.hypotheses
        assert averaged.scores == pytest.approx(alone.scores, abs=1e-5)
