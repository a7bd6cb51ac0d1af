"""-ratio, OpenNMT-py 1.x's early stop of a beam search, against a step-by-step reference of 1.x's
rule on the small Markov model of ``test_search``."""

import math

import pytest
import torch

from onmt_lite.translate.penalties import length_penalty
from onmt_lite.translate.search import Search, SearchOptions
from tests.unit.test_search import BOS, EOS, MarkovStepper, markov_table

STEPS = 10
# a stop decision nearer its threshold than this could go either way in float32: not compared
MARGIN = 1e-4


class Reference:
    """1.x's beam search with -ratio for one example (3.x's too), in Python floats: each step keeps
    the K best continuations of the live beams; one that takes </s>, or reaches the maximum
    length, is finished. At a step where some continuation finishes, the example stops once
    ``n_best`` have finished and the step's best continuation's final score over ``ratio`` x the
    source length is at most the best finished score per token (its tokens + 2: 1.x divides by its
    sequence's length + 1, the sequence holding <s>); it stops too when no beam is live.
    ``nbest``: the ``n_best`` best finished ``(score, tokens)``; ``closest``: the nearest a stop
    decision came to its threshold; ``steps``: the steps taken."""

    def __init__(self, table, example, src_length, opts: SearchOptions):
        beams = [(0.0, [])]  # the live beams' (log-probability, tokens)
        finished = []
        best_average = -math.inf
        self.closest = math.inf
        for step in range(opts.max_length):
            candidates = []
            for log_prob, tokens in beams:
                last = tokens[-1] if tokens else BOS
                for token, p in enumerate(table[example, last, step].tolist()):
                    if p != -math.inf:
                        candidates.append((log_prob + p, tokens + [token]))
            top = sorted(candidates, key=lambda c: -c[0])[: opts.beam_size]
            penalty = length_penalty(opts.length_penalty, float(step + 1), opts.alpha)
            beams = []
            ending = False
            for log_prob, tokens in top:
                if tokens[-1] == EOS or step + 1 == opts.max_length:
                    words = tokens[:-1] if tokens[-1] == EOS else tokens
                    finished.append((log_prob / penalty, words))
                    ending = True
                    best_average = max(best_average, log_prob / penalty / (step + 3))
                else:
                    beams.append((log_prob, tokens))
            spread = top[0][0] / penalty / (src_length * opts.ratio)
            if ending and len(finished) >= opts.n_best:
                if spread != best_average:  # equal: the same score over the same length, exact
                    self.closest = min(self.closest, abs(spread - best_average))
                if spread <= best_average:
                    break
            if not beams:
                break
        self.steps = step + 1
        self.nbest = sorted(finished, key=lambda f: -f[0])[: opts.n_best]


def search(table, opts, src_lengths):
    """``Search.run`` on both examples of ``table``: their n-best lists and the steps taken."""
    stepper = MarkovStepper(table, 2)
    nbest = Search(opts, BOS, EOS).run(stepper, 2, torch.tensor(src_lengths))
    return nbest, stepper.step_no


@pytest.mark.parametrize("penalty,alpha", [("none", 0.0), ("avg", 0.0), ("wu", 0.9), ("wu", -1.0)])
@pytest.mark.parametrize("ratio", [0.4, 1.0, 2.5])
def test_the_ratio_stop_gives_1x_n_best_lists(penalty, alpha, ratio):
    """Each example's n-best list is the reference's, scores included, whatever the other example
    in the batch; and the rule acts: it stops some searches before the exact early stop, with
    other n-best lists than a search without it."""
    compared = 0
    stopped_sooner = 0
    changed = 0
    for seed in range(20):
        table = markov_table(seed, STEPS, scale=3.0)
        for beam_size, n_best in ((2, 1), (3, 2), (3, 3)):
            options = dict(beam_size=beam_size, n_best=n_best, max_length=STEPS)
            options.update(length_penalty=penalty, alpha=alpha)
            opts = SearchOptions(ratio=ratio, **options)
            src_lengths = [2, 7]
            references = [Reference(table, b, src_lengths[b], opts) for b in range(2)]
            if min(r.closest for r in references) < MARGIN:
                continue
            nbest, steps = search(table, opts, src_lengths)
            for hyps, reference in zip(nbest, references):
                assert [h.tokens for h in hyps] == [tokens for _, tokens in reference.nbest]
                for hyp, (score, _) in zip(hyps, reference.nbest):
                    assert hyp.score == pytest.approx(score, rel=1e-5, abs=1e-5)
            exact, exact_steps = search(table, SearchOptions(**options), src_lengths)
            stopped_sooner += steps < exact_steps
            changed += [h.tokens for hs in nbest for h in hs] != [
                h.tokens for hs in exact for h in hs
            ]
            compared += 1
    assert compared >= 40
    assert stopped_sooner > 0
    if ratio < 1.0:  # a small ratio stops soon: some n-best lists are not the exact search's
        assert changed > 0
