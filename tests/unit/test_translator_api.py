"""The library's Translator checks what the command line checks, and keeps n-best groups whole."""

import pytest
import torch

from onmt_lite.models.builder import build_model
from onmt_lite.translate.search import SearchOptions
from onmt_lite.translate.translator import Translator
from onmt_lite.utils.errors import UserError
from tests.model_helpers import VOCABS, model_options


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return build_model(model_options(), VOCABS).eval()


@pytest.mark.parametrize("n_best", [1, 3])
def test_an_empty_line_gives_n_best_empty_outputs_so_groups_stay_aligned(model, n_best):
    translator = Translator(
        [model], VOCABS, search=SearchOptions(beam_size=3, n_best=n_best, max_length=6)
    )
    results = translator.translate(["s1 s2", "", "  ", "s3"])
    assert [len(r.hypotheses) for r in results] == [n_best] * 4
    assert results[1].hypotheses == [""] * n_best and results[2].scores == [0.0] * n_best
    assert len(results[1].tokens) == len(results[1].attention) == len(results[1].p_copy) == n_best


@pytest.mark.parametrize(
    "options,match",
    [
        ({"beam_size": 0}, "beam_size must be a whole number of at least 1"),
        ({"n_best": 0}, "n_best must be"),
        ({"beam_size": 2, "n_best": 3}, "n_best 3 is larger than beam_size 2"),
        ({"max_length": 0}, "max_length must be"),
        ({"max_length_ratio": -1.0}, "max_length_ratio must be at least 0"),
        ({"max_length_ratio": float("nan")}, "max_length_ratio must be a number"),
        ({"ratio": -0.5}, "ratio must be at least 0"),
        ({"ratio": float("nan")}, "ratio must be a number"),
        ({"beta": float("inf")}, "alpha and beta must be finite"),
        ({"length_penalty": "bogus"}, "length_penalty must be one of none, wu, avg"),
        ({"sampling_temp": 0.0}, "sampling_temp must be above 0"),
        ({"beam_size": 2.5}, "beam_size must be a whole number"),
        # the early stop bounds a live beam's final score by its log-probability: no penalty raises
        # it
        (
            {"coverage_penalty": "wu", "beta": -0.2},
            "beta must be at least 0 with a coverage penalty",
        ),
    ],
)
def test_search_options_are_checked_as_on_the_command_line(options, match):
    with pytest.raises(UserError, match=match):
        SearchOptions(**options)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"batch_size": 0}, "batch_size must be a whole number of at least 1"),
        ({"batch_size": -3}, "batch_size must"),
        ({"batch_type": "words"}, "batch_type must be sents or tokens"),
    ],
)
def test_batch_settings_are_checked(model, kwargs, match):
    with pytest.raises(UserError, match=match):
        Translator([model], VOCABS, **kwargs)


def test_a_string_is_not_a_list_of_lines(model):
    translator = Translator([model], VOCABS, search=SearchOptions(beam_size=1, max_length=4))
    with pytest.raises(TypeError, match="sources must be a list of strings"):
        translator.translate("s1 s2 s3")
    with pytest.raises(TypeError, match="targets must be a list of strings"):
        translator.translate(["s1"], "s1")
    assert len(translator.translate(["s1 s2 s3"])) == 1
