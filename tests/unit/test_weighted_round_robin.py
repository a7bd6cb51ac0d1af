"""WeightedBatches keeps its round as (corpus, weight) pairs and its place as (corpus, count): the
same batches as the round robin that expanded the weights into one list entry per batch, for any
weights, without a list of their size; positions that list wrote (checkpoints) still resume."""

import itertools
import tracemalloc

import pytest

from onmt_lite.data.iterator import WeightedBatches, describe_round, saved_place, saved_round
from onmt_lite.train.corpora import restore_position


class Corpus:
    """A stand-in for a repeating BatchIterator: batches ``(name, n)`` for n = 0, 1, ...; its
    position is the next n."""

    def __init__(self, name: str):
        self.name = name
        self.next = 0

    def state_dict(self) -> dict:
        return {"next": self.next}

    def load_state_dict(self, state: dict) -> None:
        self.next = state["next"]

    def __iter__(self):
        while True:
            self.next += 1
            yield self.name, self.next - 1


class ExpandedWeightedBatches:
    """The round robin as it was before (the reference): the weights expanded into ``turns``, one
    corpus id per batch of a round, and the index ``turn`` into it."""

    def __init__(self, corpora, weights):
        self.corpora = dict(corpora)
        self.turns = [
            corpus_id for corpus_id, weight in zip(self.corpora, weights) for _ in range(weight)
        ]
        self.turn = 0

    def state_dict(self):
        corpora = {corpus_id: batches.state_dict() for corpus_id, batches in self.corpora.items()}
        return {"corpora": corpora, "turns": list(self.turns), "turn": self.turn}

    def load_state_dict(self, state):
        for corpus_id, batches in self.corpora.items():
            if corpus_id in state["corpora"]:
                batches.load_state_dict(state["corpora"][corpus_id])
        self.turn = state["turn"] if state["turns"] == self.turns else 0

    def __iter__(self):
        streams = {corpus_id: iter(batches) for corpus_id, batches in self.corpora.items()}
        while True:
            batch = next(streams[self.turns[self.turn]])
            self.turn = (self.turn + 1) % len(self.turns)
            yield batch


WEIGHTS = [[1], [1, 1], [3, 1], [1, 7], [2, 5, 1], [4, 1, 3, 2], [1, 1, 1, 1, 6], [9, 9]]


def make(kind, weights):
    return kind({name: Corpus(name) for name in "abcdefgh"[: len(weights)]}, weights)


def take(batches, n: int) -> list:
    return list(itertools.islice(iter(batches), n))


@pytest.mark.parametrize("weights", WEIGHTS)
def test_the_batches_are_those_of_the_expanded_round_robin(weights):
    n = 3 * sum(weights) + 7
    expected = take(make(ExpandedWeightedBatches, weights), n)
    assert take(make(WeightedBatches, weights), n) == expected


@pytest.mark.parametrize("weights", WEIGHTS)
def test_a_position_saved_by_either_resumes_both_at_the_same_batch(weights):
    """At every place of two rounds: the new position resumes the new round robin, and a position
    the expanded one wrote (a checkpoint from before) resumes the new one, as it resumed the old."""
    for taken in range(2 * sum(weights) + 1):
        old = make(ExpandedWeightedBatches, weights)
        new = make(WeightedBatches, weights)
        take(old, taken)
        take(new, taken)
        expected = take(old, 20)
        for state in (new.state_dict(), make_state_at(ExpandedWeightedBatches, weights, taken)):
            resumed = make(WeightedBatches, weights)
            resumed.load_state_dict(state)
            assert take(resumed, 20) == expected, (taken, state)


def make_state_at(kind, weights, taken: int) -> dict:
    batches = make(kind, weights)
    take(batches, taken)
    return batches.state_dict()


@pytest.mark.parametrize("before,after", [([3, 1], [1, 2]), ([1, 7], [1, 6]), ([2, 2], [2, 2, 1])])
def test_other_weights_start_the_turns_again_as_before(before, after):
    for taken in range(sum(before) + 2):
        old_state = make_state_at(ExpandedWeightedBatches, before, taken)
        for state in (old_state, make_state_at(WeightedBatches, before, taken)):
            resumed = make(WeightedBatches, after)
            resumed.load_state_dict(state)
            assert (resumed.corpus, resumed.count) == (0, 0)
            assert take(resumed, 15) == take(make_resumed(after, old_state), 15)


def make_resumed(weights, state):
    batches = make(ExpandedWeightedBatches, weights)
    batches.load_state_dict(state)
    return batches


def test_the_position_holds_the_round_and_the_place_and_reads_old_ones():
    batches = make(WeightedBatches, [3, 1])
    take(batches, 6)  # a a a b a a
    assert batches.state_dict() == {
        "corpora": {"a": {"next": 5}, "b": {"next": 1}},
        "round": [["a", 3], ["b", 1]],
        "corpus": 0,
        "count": 2,
    }
    old = {"corpora": {}, "turns": ["a", "a", "a", "b"], "turn": 3}
    assert saved_round(old) == [["a", 3], ["b", 1]] and saved_place(old) == (1, 0)
    assert describe_round(saved_round(old)) == "a x3 b x1"


def test_weights_of_10_to_the_18_take_no_memory():
    tracemalloc.start()
    try:
        batches = make(WeightedBatches, [10**18, 1])
        first = take(batches, 5)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert first == [("a", n) for n in range(5)]
    assert (batches.corpus, batches.count) == (0, 5)
    assert batches.state_dict()["round"] == [["a", 10**18], ["b", 1]]
    assert peak < 100_000, peak


def test_training_resumes_a_checkpoint_position_written_before_rounds():
    """``restore_position`` (onmt_lite_train -train_from) with an old checkpoint's position: the
    same weights continue at its place, other weights start the turns again (and say so)."""
    saved = make_state_at(ExpandedWeightedBatches, [3, 1], 6)
    same = make(WeightedBatches, [3, 1])
    restore_position(same, saved)
    assert (same.corpus, same.count) == (0, 2)
    other = make(WeightedBatches, [1, 2])
    restore_position(other, saved)
    assert (other.corpus, other.count) == (0, 0)
    assert other.corpora["a"].next == 5 and other.corpora["b"].next == 1
