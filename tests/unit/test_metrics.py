"""utils/metrics.py: the one place that scores with sacrebleu, against sacrebleu's own functions."""

import pytest
import sacrebleu

from onmt_lite.utils.metrics import METRICS, corpus_scores

HYPS = ["the cat sat on the mat .", "a dog barked loudly", "it rains"]
REFS = ["the cat sat on a mat .", "the dog barked loudly", "it is raining"]


def test_scores_equal_sacrebleus_own_and_carry_the_signature():
    bleu, chrf, ter = corpus_scores(METRICS, HYPS, [REFS])
    assert bleu.score == pytest.approx(sacrebleu.corpus_bleu(HYPS, [REFS]).score)
    assert chrf.score == pytest.approx(sacrebleu.corpus_chrf(HYPS, [REFS]).score)
    assert ter.score == pytest.approx(sacrebleu.corpus_ter(HYPS, [REFS]).score)
    assert [s.name for s in (bleu, chrf, ter)] == ["BLEU", "chrF", "TER"]
    assert str(bleu).startswith("BLEU = ") and "(signature nrefs:1|case:mixed|" in str(bleu)
    assert bleu.sacrebleu_line().startswith("BLEU|nrefs:1|")


def test_tokenize_and_lowercase_reach_bleu():
    upper = [h.upper() for h in HYPS]
    plain = corpus_scores(["BLEU"], upper, [REFS])[0]
    lowered = corpus_scores(["BLEU"], upper, [REFS], lowercase=True)[0]
    assert lowered.score == pytest.approx(
        sacrebleu.corpus_bleu(upper, [REFS], lowercase=True).score
    )
    assert lowered.score > plain.score and "case:lc" in lowered.signature
    assert "tok:none" in corpus_scores(["BLEU"], HYPS, [REFS], tokenize="none")[0].signature


def test_an_unknown_metric_is_refused():
    with pytest.raises(ValueError, match="unknown metric 'METEOR'"):
        corpus_scores(["METEOR"], HYPS, [REFS])
