"""The attention variants end to end: each learns the reversal task from the command line and
onmt_lite_translate decodes it (greedy and beam n-best); the translation options that need attention
are refused for a model without it; an ensemble may mix it with others."""
import math
import re

import pytest

from onmt_lite import Translator
from tests.helpers import exact_match, lines, run_cli, trained_reversal_model

SMALL = ["-rnn_size", 64, "-word_vec_size", 32, "-layers", 1, "-batch_size", 32, "-optim", "adam",
         "-learning_rate", 0.01, "-dropout", 0, "-seed", 1]
# each variant in one of three models (training them takes most of this file's time)
VARIANTS = {
    "none_gate_source": ["-global_attention", "none", "-context_gate", "source"],
    "sparsemax_attention_gate_target": ["-global_attention_function", "sparsemax", "-context_gate", "target"],
    "sparsemax_generator_gate_both_std": ["-generator_function", "sparsemax", "-context_gate", "both",
                                          "-input_feed", 0],
}
# exact match on held-out lines, clearly above chance (about 0: 2 to 7 words of 20, reversed); measured
# after 800 steps, greedy and beam 5: 0.275 0.275, 0.35 0.4 and 0.725 0.775 (without attention, the
# model learns slower)
MINIMUM = {"none_gate_source": 0.15, "sparsemax_attention_gate_target": 0.2, "sparsemax_generator_gate_both_std": 0.5}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return {kind: trained_reversal_model(tmp_path_factory, kind, [], [*SMALL, *extra], 800)
            for kind, extra in VARIANTS.items()}


def first_best_scores(log):
    """The PRED SCORE of each line's first hypothesis, from a -verbose log."""
    scores = []
    for block in log.split("SENT ")[1:]:
        scores.append(float(re.search(r"PRED SCORE: (\S+)", block).group(1)))
    return scores


@pytest.mark.parametrize("kind", VARIANTS)
@pytest.mark.parametrize("beam", [1, 5])
def test_each_variant_learns_the_task_and_decodes_greedy_and_n_best(models, tmp_path, kind, beam):
    m = models[kind]
    out = tmp_path / "out.txt"
    result = run_cli("translate", "-model", m["model"], "-src", m["src"], "-output", out, "-beam_size", beam,
                     "-n_best", beam, "-verbose")
    assert result.returncode == 0, result.stderr
    hypotheses, references = lines(out), lines(m["tgt"])
    assert len(hypotheses) == beam * len(references)
    assert exact_match(hypotheses[::beam], references) >= MINIMUM[kind]
    scores = first_best_scores(result.stderr)
    assert len(scores) == len(references) and all(math.isfinite(s) for s in scores)
    assert "nan" not in result.stderr.lower()


@pytest.mark.parametrize("option", [["-replace_unk"], ["-attn_debug"], ["-attn_plot", "plots"],
                                    ["-coverage_penalty", "wu", "-beta", 0.2]])
def test_options_that_read_attention_are_refused_for_a_model_without_it(models, tmp_path, option):
    m = models["none_gate_source"]
    other = models["sparsemax_generator_gate_both_std"]["model"]
    result = run_cli("translate", "-model", other, m["model"], "-src", m["src"],
                     "-output", tmp_path / "out.txt", *option)
    assert result.returncode == 2
    assert option[0] in result.stderr and "-global_attention none" in result.stderr
    assert m["model"] in result.stderr


def test_an_ensemble_with_a_model_without_attention_decodes(models, tmp_path):
    out = tmp_path / "out.txt"
    m = models["none_gate_source"]
    other = models["sparsemax_generator_gate_both_std"]["model"]
    result = run_cli("translate", "-model", other, m["model"], "-src", m["src"],
                     "-output", out, "-beam_size", 3)
    assert result.returncode == 0, result.stderr
    assert len(lines(out)) == len(lines(m["src"]))
    translator = Translator.load([models["sparsemax_attention_gate_target"]["model"], m["model"]], beam_size=2)
    (result,) = translator.translate([lines(m["src"])[0]])
    assert result.attention == [None] and math.isfinite(result.scores[0])  # no attention all models have

