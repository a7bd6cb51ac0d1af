"""``BeamState``'s slots (``-cuda_graphs``' fixed-row steppers): an example that is done stays,
idle, until one joining takes its place; the columns no example searching uses are dropped."""

import torch

from onmt_lite.translate.beam_state import BeamState, Joining

BOS = 2
K = 2


def started(examples: int) -> BeamState:
    """A state of ``examples`` examples (ids 0, 1, ...; the first and third with target
    prefixes), whole beams of K, after one step."""
    state = BeamState(K, 1, BOS, "cpu", with_attention=False, with_coverage=False)
    prefixes = [[7], [], [8, 9]][:examples]
    lengths = list(range(3, 3 + examples))
    joining = Joining(list(range(examples)), lengths, prefixes)
    state.add(joining, [6] * examples, whole_beams=True)
    tokens = torch.arange(examples * K).view(examples, K) + 4
    state.advance(None, tokens, -tokens.float(), {})
    return state


def example(state: BeamState, b: int) -> dict:
    """Everything ``state`` holds of its example at position ``b``."""
    rows = slice(b * K, b * K + K)
    return {
        "seqs": state.seqs[rows].tolist(),
        "scores": state.scores[b].tolist(),
        "bounds": state.bounds[b].tolist(),
        "best_finished": state.best_finished[b].tolist(),
        "prefix": state.prefix[b].tolist(),
        "host": [
            state.ids[b],
            state.cols[b],
            state.host_src_lengths[b],
            state.prefix_lengths[b],
            state.idle[b],
        ],
    }


def test_an_example_joining_an_idle_examples_place_starts_as_one_appended_would():
    new = Joining([9], [5], [[6, 6, 6]])  # a longer prefix than any held: the prefixes widen

    def join(state, slots):
        state.add(new, [4], whole_beams=True, slots=slots)

    appended = started(3)
    join(appended, ())
    placed = started(3)
    assert placed.make_idle([1]) == 0  # examples 0 and 2 still use every column
    assert placed.idle_slots() == [1] and placed.n_live == 2
    assert placed.live_src_lengths() == [3, 5]
    join(placed, [1])
    assert placed.n_examples == 3 and not any(placed.idle)
    assert example(placed, 1) == example(appended, 3)
    for b in (0, 2):  # the others untouched
        assert example(placed, b) == example(appended, b)


def test_the_columns_before_every_searching_examples_first_are_dropped_when_one_goes_idle():
    state = started(2)
    later = Joining([5], [4])
    state.add(later, [6], whole_beams=True)  # at column 1
    state.advance(None, torch.full((3, K), 4), torch.zeros(3, K), {})
    assert state.seqs.size(1) == 3 and state.cols == [0, 0, 1]
    assert state.make_idle([1]) == 0  # example 0 still uses them
    assert state.make_idle([0]) == 1  # none searching does now
    assert state.seqs.size(1) == 2 and state.cols == [-1, -1, 0]
    assert state.col.tolist() == [-1, -1, 0] and state.last_col.tolist() == [5, 5, 6]
    assert state.seqs[4:].tolist() == [[BOS, 4], [BOS, 4]]  # the example searching: as it was
    assert state.host_lengths()[2] == 1
