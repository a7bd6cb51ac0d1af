"""The decode loop against brute force on a small Markov model: beam, greedy, sampling,
constraints."""

import itertools
import math

import pytest
import torch

from onmt_lite.translate.penalties import Penalties, length_penalty
from onmt_lite.translate.search import Search, SearchOptions, block_ngrams
from onmt_lite.utils.host_syncs import HostSyncCounter

# tokens 4..6 are words; <unk>/<blank> (0, 1) get no probability
BOS = 2
EOS = 3
V = 7
MAX = 4


def markov_table(seed, steps=MAX, scale=2.0):
    """log p(next | example, last token, step) for 2 examples: [2 x V x steps x V]."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(2, V, steps, V, generator=g) * scale
    logits[..., :3] = float("-inf")  # never <unk>, <blank>, <s>
    return torch.log_softmax(logits, -1)


class MarkovStepper:
    """A stepper whose rows remember their example and step; reorder follows the search. It starts
    with one row per example, as a model's stepper does."""

    def __init__(self, table, batch_size):
        self.table = table
        self.step_no = 0
        self.example = torch.arange(batch_size)

    def step(self, tokens):
        log_probs = self.table[self.example, tokens, self.step_no].clone()
        self.step_no += 1
        return log_probs, {"std": torch.full((tokens.numel(), 3), 1 / 3)}

    def reorder(self, rows, memory_rows=None, unused_columns=0):
        self.example = self.example[rows]


def brute_force(table, example, penalty="none", alpha=0.0, min_length=0, max_length=MAX):
    """Every sequence ending in </s> within ``max_length`` steps, best first: [(score, tokens)]."""
    found = []
    for length in range(1, max_length + 1):
        for words in itertools.product(range(4, V), repeat=length - 1):
            sequence = list(words) + [EOS]
            last = BOS
            total = 0.0
            for step, token in enumerate(sequence):
                total += table[example, last, step, token].item()
                last = token
            if length - 1 >= min_length:
                found.append((total / length_penalty(penalty, float(length), alpha), list(words)))
    # sequences forced to end at the maximum length without </s>
    for words in itertools.product(range(4, V), repeat=max_length):
        last = BOS
        total = 0.0
        for step, token in enumerate(words):
            total += table[example, last, step, token].item()
            last = token
        found.append((total / length_penalty(penalty, float(max_length), alpha), list(words)))
    return sorted(found, key=lambda x: -x[0])


def run(table, **options):
    opts = SearchOptions(max_length=MAX, **options)
    return Search(opts, BOS, EOS).run(MarkovStepper(table, 2), 2, torch.tensor([3, 3]))


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("penalty,alpha", [("none", 0.0), ("wu", 0.9), ("avg", 0.0)])
def test_a_wide_beam_returns_the_exact_n_best_list(seed, penalty, alpha):
    table = markov_table(seed)
    nbest = run(table, beam_size=V**MAX, n_best=5, length_penalty=penalty, alpha=alpha)
    for example in range(2):
        expected = brute_force(table, example, penalty, alpha)[:5]
        assert [h.tokens for h in nbest[example]] == [tokens for _, tokens in expected]
        for hyp, (score, _) in zip(nbest[example], expected):
            assert hyp.score == pytest.approx(score, abs=1e-5)


@pytest.mark.parametrize("penalty,alpha", [("wu", 0.9), ("avg", 0.0)])
def test_a_wide_beam_with_a_ratio_returns_the_exact_n_best_list_within_each_examples_maximum(
    penalty, alpha
):
    table = markov_table(6)
    opts = SearchOptions(
        beam_size=V**MAX,
        n_best=4,
        max_length=MAX,
        max_length_ratio=1.0,
        length_penalty=penalty,
        alpha=alpha,
    )
    # at most 2 and 3 tokens
    nbest = Search(opts, BOS, EOS).run(MarkovStepper(table, 2), 2, torch.tensor([2, 3]))
    for example, max_length in enumerate([2, 3]):
        expected = brute_force(table, example, penalty, alpha, max_length=max_length)[:4]
        assert [h.tokens for h in nbest[example]] == [tokens for _, tokens in expected]
        for hyp, (score, _) in zip(nbest[example], expected):
            assert hyp.score == pytest.approx(score, abs=1e-5)


class NoEarlyStop(Penalties):
    """An example is done only when none of its beams is alive."""

    def done(self, state, final, ended):
        return state.log_probs().max(1).values == float("-inf")


class SearchToTheEnd(Search):
    """A search whose examples stop only when none of their beams is alive: no early stop."""

    def __init__(self, opts, bos, eos):
        super().__init__(opts, bos, eos)
        self.penalties = NoEarlyStop(opts)


@pytest.mark.parametrize(
    "penalty,alpha,ratio",
    [
        ("none", 0.0, 0.0),
        ("avg", 0.0, 0.0),
        ("avg", 0.0, 1.0),
        ("wu", 0.9, 1.0),
        ("wu", 2.0, 0.0),
        ("wu", -1.0, 1.0),
    ],
)
def test_an_example_stops_early_only_when_no_live_beam_can_change_its_n_best(penalty, alpha, ratio):
    """The early stop bounds what a live beam can still score with its example's maximum length
    (-max_length_ratio) and the length penalty at either end of the lengths left: the results are
    those of a search that runs every beam to its end."""
    steps = 10
    stopped_early = 0
    for seed in range(30):
        table = markov_table(seed, steps, scale=3.0)
        for beam_size, n_best in ((2, 1), (3, 2)):
            opts = SearchOptions(
                beam_size=beam_size,
                n_best=n_best,
                max_length=steps,
                max_length_ratio=ratio,
                length_penalty=penalty,
                alpha=alpha,
            )
            lengths = torch.tensor([6, 9])
            early_stepper = MarkovStepper(table, 2)
            full_stepper = MarkovStepper(table, 2)
            early = Search(opts, BOS, EOS).run(early_stepper, 2, lengths)
            full = SearchToTheEnd(opts, BOS, EOS).run(full_stepper, 2, lengths)
            for a, b in zip(early, full):
                assert [(h.tokens, h.score) for h in a] == [(h.tokens, h.score) for h in b]
            stopped_early += early_stepper.step_no < full_stepper.step_no
    assert stopped_early > 0  # the early stop was put to the test


@pytest.mark.parametrize("seed", range(5))
def test_the_first_of_an_n_best_list_is_the_1_best(seed):
    table = markov_table(seed)
    one = run(table, beam_size=5, n_best=1)
    five = run(table, beam_size=5, n_best=5)
    for example in range(2):
        assert one[example][0].tokens == five[example][0].tokens
        scores = [h.score for h in five[example]]
        assert scores == sorted(scores, reverse=True) and len(scores) == 5


@pytest.mark.parametrize("beam_size", [1, 3])
def test_a_search_without_attention_finds_the_same_hypotheses_and_keeps_no_attention(beam_size):
    table = markov_table(4)
    with_attention = run(table, beam_size=beam_size, n_best=beam_size)
    without = run(table, beam_size=beam_size, n_best=beam_size, attention=False)
    for a, b in zip(with_attention, without):
        assert [(h.tokens, h.score, h.log_prob) for h in a] == [
            (h.tokens, h.score, h.log_prob) for h in b
        ]
        # a row per token and </s> (none when cut at the maximum length), a column per source
        # position
        assert all(h.attention["std"].shape in ((len(h.tokens) + 1, 3), (MAX, 3)) for h in a)
        assert all(h.attention == {} for h in b)


def test_greedy_follows_the_argmax_chain():
    table = markov_table(3)
    result = run(table, beam_size=1)
    for example in range(2):
        last = BOS
        tokens = []
        for step in range(MAX):
            token = int(table[example, last, step].argmax())
            if token == EOS:
                break
            tokens.append(token)
            last = token
        assert result[example][0].tokens == tokens


def test_sampling_at_a_tiny_temperature_is_greedy_and_otherwise_draws_from_the_distribution():
    table = markov_table(4)
    greedy = run(table, beam_size=1)
    sampled = run(table, beam_size=1, sampling=True, sampling_topk=0, sampling_temp=1e-4)
    assert [h[0].tokens for h in sampled] == [h[0].tokens for h in greedy]
    torch.manual_seed(0)
    draws = {
        tuple(run(table, beam_size=1, sampling=True, sampling_topk=0)[0][0].tokens)
        for _ in range(40)
    }
    assert len(draws) > 1


def test_min_and_max_length_and_ratio_are_respected():
    table = markov_table(5)
    wide = run(table, beam_size=V**MAX, n_best=3, min_length=2)
    for example, hyps in enumerate(wide):
        assert [h.tokens for h in hyps] == [
            t for _, t in brute_force(table, example, min_length=2)[:3]
        ]
        assert all(len(h.tokens) >= 2 for h in hyps)
    short = Search(SearchOptions(beam_size=3, max_length=MAX, max_length_ratio=0.5), BOS, EOS).run(
        MarkovStepper(table, 2), 2, torch.tensor([2, 4])
    )
    assert all(len(h.tokens) <= 1 for h in short[0]) and all(len(h.tokens) <= 2 for h in short[1])


def test_block_ngram_repeat_forbids_completing_a_seen_ngram():
    seqs = torch.tensor([[4, 5, 4], [4, 6, 5]])
    blocked = block_ngrams(torch.zeros(2, V), seqs, 2, ())
    # "4 5" seen; last is 4
    assert math.isinf(blocked[0, 5]) and torch.isfinite(blocked[0, [4, 6]]).all()
    assert torch.isfinite(blocked[1]).all()
    assert torch.isfinite(
        block_ngrams(torch.zeros(2, V), seqs, 2, (5,))
    ).all()  # n-grams with 5 exempt
    # "4 5" must be blocked after "... 4" although "6 5", which also ends in 5, is not a repeat
    colliding = block_ngrams(torch.zeros(1, V), torch.tensor([[4, 5, 6, 5, 4]]), 2, ())
    assert math.isinf(colliding[0, 5]) and torch.isfinite(colliding[0, [4, 6]]).all()
    # a row whose own tokens start at column 1 (a later joiner): the n-gram "4 5" before them does
    # not count
    late = block_ngrams(torch.zeros(2, V), seqs, 2, (), first=torch.tensor([1, 0]))
    assert torch.isfinite(late[0]).all()
    table = markov_table(6)
    for hyps in run(table, beam_size=4, n_best=2, block_ngram_repeat=1):
        assert all(len(set(h.tokens)) == len(h.tokens) for h in hyps)


@pytest.mark.parametrize("beam_size", [1, 2])
def test_an_example_whose_rows_can_take_no_token_is_done_with_an_impossible_hypothesis(beam_size):
    """Three words, none to repeat, and no </s> before five: each row dies (-inf) at its fourth
    step without ending. Its example is done then (greedy search too, whose done rule is the
    row's own), an n-best list of one empty hypothesis of score -inf, not a search to the end."""
    steps = []

    class Counted(MarkovStepper):
        def step(self, tokens):
            steps.append(tokens.numel())
            return super().step(tokens)

    options = SearchOptions(beam_size=beam_size, max_length=8, min_length=5, block_ngram_repeat=1)
    table = markov_table(0, steps=8)
    nbest = Search(options, BOS, EOS).run(Counted(table, 2), 2, torch.tensor([3, 3]))
    assert [[(h.tokens, h.score) for h in hyps] for hyps in nbest] == [[([], -math.inf)]] * 2
    assert len(steps) == 4  # three words, then no token left


class FocusedStepper(MarkovStepper):
    """Attention that depends on the last token, so coverage penalties differ between hypotheses."""

    def step(self, tokens):
        log_probs, _ = super().step(tokens)
        attn = torch.nn.functional.one_hot(tokens % 3, 3).float() * 0.8 + 0.2 / 3
        return log_probs, {"std": attn}


def brute_force_with_coverage(table, example, beta, stepwise):
    """Scores with a wu coverage penalty of attention rows one_hot(last token % 3) * 0.8 + 0.2 /
    3."""
    found = []
    for length in range(1, MAX + 2):
        for words in itertools.product(range(4, V), repeat=length - 1):
            sequence = list(words) + ([EOS] if length <= MAX else [])
            if len(sequence) > MAX:
                sequence = sequence[:MAX]
            last = BOS
            total = 0.0
            coverage = torch.zeros(3)
            for step, token in enumerate(sequence):
                total += table[example, last, step, token].item()
                coverage += (
                    torch.nn.functional.one_hot(torch.tensor(last % 3), 3).float() * 0.8 + 0.2 / 3
                )
                last = token
            penalty = beta * -coverage.clamp(max=1.0).log().sum().item()
            found.append((total - penalty, [t for t in sequence if t != EOS]))
    unique = {tuple(tokens): score for score, tokens in found}
    return sorted(((s, list(t)) for t, s in unique.items()), key=lambda x: -x[0])


@pytest.mark.parametrize("stepwise", [False, True])
def test_coverage_penalty_ranking_equals_brute_force(stepwise):
    table = markov_table(7)
    opts = SearchOptions(
        max_length=MAX,
        beam_size=V**MAX,
        n_best=3,
        coverage_penalty="wu",
        beta=0.5,
        stepwise_penalty=stepwise,
    )
    nbest = Search(opts, BOS, EOS).run(FocusedStepper(table, 2), 2, torch.tensor([3, 3]))
    for example in range(2):
        expected = brute_force_with_coverage(table, example, 0.5, stepwise)[:3]
        assert [h.tokens for h in nbest[example]] == [t for _, t in expected]
        for hyp, (score, _) in zip(nbest[example], expected):
            assert hyp.score == pytest.approx(score, abs=1e-4)


@pytest.mark.parametrize("beam", [1, 3])
def test_nan_scores_still_end_at_the_maximum_length(beam):
    """A model whose weights hold NaN gives NaN log-probabilities: every row still ends by
    -max_length (a NaN score is not a finished one, nor -inf), and the search returns."""
    table = torch.full((2, V, 6, V), float("nan"))
    nbest = Search(SearchOptions(beam_size=beam, n_best=1, max_length=5), BOS, EOS).run(
        MarkovStepper(table, 2), 2, torch.tensor([3, 3])
    )
    assert [len(hyps) for hyps in nbest] == [1, 1]
    assert all(len(hyps[0].tokens) <= 5 for hyps in nbest)


@pytest.mark.parametrize("ratio,expected", [(float("inf"), MAX), (1.0, 2), (0.5, 1)])
def test_ratio_bounds_the_length_and_an_infinite_one_is_no_bound(ratio, expected):
    search = Search(SearchOptions(max_length=MAX, max_length_ratio=ratio), BOS, EOS)
    assert search._max_lengths([2, 2]) == [expected, expected]


def test_the_ratio_bound_is_a_float32_product_as_on_the_device():
    """Worked out on the host since 2026-11-29, on the device before: the same float32 product,
    rounded up (Python's doubles would give 30 for 25 x 1.2 and 56 for 50 x 1.1)."""
    search = Search(SearchOptions(max_length_ratio=1.2), BOS, EOS)
    assert search._max_lengths([25, 45, 10]) == [31, 55, 12]
    assert Search(SearchOptions(max_length_ratio=1.1), BOS, EOS)._max_lengths([50]) == [55]


class CountedOutside(MarkovStepper):
    """A ``MarkovStepper`` whose own operations ``counter`` does not count: what is left is the
    search's bookkeeping."""

    def __init__(self, table, batch_size, counter, steps):
        super().__init__(table, batch_size)
        self.counter = counter
        self.steps = steps

    def step(self, tokens):
        self.steps.append(tokens.numel())
        with self.counter.paused():
            return super().step(tokens)

    def reorder(self, rows, memory_rows=None, unused_columns=0):
        with self.counter.paused():
            super().reorder(rows, memory_rows, unused_columns)


# kernels a step of the search's own, seed 2 (6 beam steps, 7 greedy): 40.5 and 26.4 before the
# ends were read against each example's last column, dead candidates were masked only while rows
# joined, the examples' bounds were one tensor, each example's first row was kept and joining rows
# came from templates (2026-11-29); 34.8 and 23.3 since; greedy 17.1 once one row's example was
# done by its row alone, without finished scores kept (later that day)
@pytest.mark.parametrize("beam,ceiling", [(3, 36), (1, 20)])
def test_the_search_launches_few_kernels_a_step_besides_the_model(beam, ceiling):
    """On a GPU each kernel launched costs the host some microseconds, and a small model's step is
    host-bound: the search's bookkeeping (selecting, ending, finishing, leaving) stays under a
    ceiling, counted on the CPU as on any device."""
    counter = HostSyncCounter()
    steps = []
    stepper = CountedOutside(markov_table(2, steps=8), 2, counter, steps)
    with counter:
        nbest = Search(SearchOptions(max_length=8, beam_size=beam), BOS, EOS).run(
            stepper, 2, torch.tensor([3, 3])
        )
    assert [len(hyps) for hyps in nbest] == [1, 1]
    assert len(steps) >= 6  # the average is over several steps
    assert counter.kernels <= ceiling * len(steps), counter.kernels / len(steps)
