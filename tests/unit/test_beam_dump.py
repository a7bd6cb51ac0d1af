"""-dump_beam: the recorded search steps, checked against the translations they led to."""

import json

import pytest

from onmt_lite.translate.beam_dump import write_dump
from onmt_lite.translate.search import SearchOptions
from onmt_lite.translate.translator import Translator
from tests.model_helpers import TRANSFORMER, VOCABS, make_model

SOURCES = ["s1 s2 s3", "", "s4 s5 s1 s2", "s6", "s3 oov1 s2", "s7 s8 s9 s10 s11"]
PREFIXES = ["t1 t2", "", "", "t3 t4 t5", "t1 oov1", "s2"]
MAX = 7


def translate(args, prefixes=False, **search):
    model = make_model(*args)[0].float().eval()
    options = SearchOptions(max_length=MAX, **search)
    translator = Translator(
        [model], VOCABS, search=options, batch_size=3, dump_beam=True, tgt_prefix=prefixes
    )
    return translator.translate(SOURCES, PREFIXES if prefixes else None)


def backtrack(beam, step, place):
    """The token ids, words and log-probabilities on the path that ends at ``place`` of step
    ``step``, found by following the parent places back to the first step."""
    ids = []
    words = []
    log_probs = []
    while step >= 0:
        ids.append(beam["predicted_ids"][step][place])
        words.append(beam["predicted_tokens"][step][place])
        log_probs.append(beam["log_probs"][step][place])
        place = beam["beam_parent_ids"][step][place]
        step -= 1
    return ids[::-1], words[::-1], log_probs[::-1]


@pytest.mark.parametrize(
    "args,search,prefixes",
    [
        ([], {"beam_size": 4, "n_best": 3}, False),
        (["-copy_attn"], {"beam_size": 3, "n_best": 2}, True),
        (TRANSFORMER, {"beam_size": 4, "n_best": 4}, True),
        ([], {"beam_size": 1}, True),
        (["-copy_attn"], {"beam_size": 1, "sampling": True}, False),
    ],
)
def test_following_the_parents_back_gives_each_n_best_hypothesis_and_its_score(
    args, search, prefixes
):
    for result in translate(args, prefixes, **search):
        beam = result.beam
        if not result.source:
            assert all(
                beam[key] == [] for key in ("predicted_ids", "beam_parent_ids", "scores", "n_best")
            )
            continue
        assert len(beam["n_best"]) == len(result.tokens)
        for words, score, log_prob, end in zip(
            result.tokens, result.scores, result.log_probs, beam["n_best"]
        ):
            ids, path_words, log_probs = backtrack(beam, end["step"], end["beam"])
            # a shorter hypothesis ended with </s>: one step more than its words
            ended = len(words) < MAX
            assert path_words == words + (["</s>"] if ended else [])
            assert (ids[-1] == 3) == ended
            assert sum(log_probs) == pytest.approx(log_prob, abs=1e-4)
            assert (
                beam["scores"][end["step"]][end["beam"]]
                == pytest.approx(score, abs=1e-5)
                == end["score"]
            )
        steps = {
            len(beam[key])
            for key in (
                "predicted_ids",
                "predicted_tokens",
                "beam_parent_ids",
                "scores",
                "log_probs",
            )
        }
        assert len(steps) == 1 and steps.pop() >= beam["n_best"][0]["step"] + 1


def test_greedy_steps_are_the_output_and_its_end_of_sentence():
    for result in translate([], beam_size=1):
        if result.source:
            assert len(result.beam["predicted_ids"]) == len(result.tokens[0]) + (
                len(result.tokens[0]) < MAX
            )
            assert all(parents == [0] for parents in result.beam["beam_parent_ids"])


def test_inside_a_prefix_the_beam_has_one_live_hypothesis_and_the_others_are_null():
    result = translate([], True, beam_size=3)[0]
    for step in range(2):
        assert result.beam["predicted_tokens"][step] == [PREFIXES[0].split()[step], None, None]
        assert result.beam["scores"][step][1:] == [None, None]
    assert None not in result.beam["scores"][2]


def test_the_file_is_json_with_one_entry_per_line_numbered_in_order(tmp_path):
    results = translate([], beam_size=2)
    path = tmp_path / "beam.json"
    write_dump(str(path), [r.beam for r in results])
    entries = json.loads(path.read_text(encoding="utf-8"))
    assert [e["line"] for e in entries] == list(range(1, len(SOURCES) + 1))
    assert [e["predicted_ids"] for e in entries] == [r.beam["predicted_ids"] for r in results]
