"""The finished hypotheses a search keeps per example: its n best, in the order a stable sort of
all of them gives, and nothing else."""

import random

import pytest
import torch

from onmt_lite.translate.finished import FinishedHypotheses, _Copies


def settled(finished: FinishedHypotheses, example: int, scores: list[float]) -> None:
    """Hypotheses of ``example`` ending one at a time (tokens: their order), settled."""
    for order, score in enumerate(scores):
        where = [(example, 0, 1, order, 0)]
        seqs = torch.tensor([[2, 10 + order, 3]])  # <s>, a token naming its order, </s>
        finished._copies.append(_Copies(where, seqs, torch.tensor([[score], [score]]), {}, None))
        finished.settle()


@pytest.mark.parametrize("n_best", [1, 2, 5])
@pytest.mark.parametrize("seed", range(4))
def test_an_example_keeps_the_n_best_of_a_stable_sort_of_all_it_finished(n_best, seed):
    rng = random.Random(seed)
    scores = [float(rng.choice([-1, -2, -3, -4])) for _ in range(12)]  # ties on purpose
    finished = FinishedHypotheses(eos=3, n_best=n_best)
    finished.open([7])
    settled(finished, 7, scores)
    assert len(finished.lists[7]) == n_best  # no more held than can be returned
    expected = sorted(range(len(scores)), key=lambda i: -scores[i])[:n_best]  # stable: ties by end
    hyps = finished.pop(7, n_best)
    assert [h.tokens for h in hyps] == [[10 + i] for i in expected]
    assert [h.score for h in hyps] == [scores[i] for i in expected]


def test_nan_scores_leave_a_full_list_with_the_finite_ones_best_first():
    """NaN compares false with every score (a model with NaN weights): a NaN hypothesis is kept
    only where the list has room, and the finite ones still come best first. (Before n-best lists
    were cut as hypotheses ended, a NaN at the head of the list hid every later better one.)"""
    scores = [float("nan"), -1.0, -2.0, float("nan"), 0.5, float("nan")]
    for n_best in (1, 2, 3):
        finished = FinishedHypotheses(eos=3, n_best=n_best)
        finished.open([0])
        settled(finished, 0, scores)
        hyps = finished.pop(0, n_best)
        assert len(hyps) == n_best
        finite = [h.score for h in hyps if h.score == h.score]
        assert finite == sorted(finite, reverse=True)
        assert n_best == 1 or 0.5 in finite
