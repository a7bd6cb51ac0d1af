"""``tests/graph_replay.EmulatedGraph``, which the tests of -cuda_graphs record with on the CPU:
the rules of a CUDA graph it must hold, or those tests would pass where a GPU fails."""

import pytest
import torch

from tests.graph_replay import EmulatedGraph, RecordingError


def test_a_replay_sees_the_python_numbers_of_its_recording_and_steps_the_tensors_it_read():
    state = torch.zeros(3)
    steps = torch.zeros((), dtype=torch.long)
    offset = 2
    graph = EmulatedGraph()
    with graph.recording():
        out = state * 2 + offset
        state.add_(1)
        steps.add_(1)
        seen = steps.clone()
    # the recording launched nothing: what it wrote is as before
    assert state.tolist() == [0.0, 0.0, 0.0] and int(steps) == 0
    offset = 10  # a replay does not see it
    graph.replay()
    assert out.tolist() == [2.0, 2.0, 2.0] and state.tolist() == [1.0, 1.0, 1.0]
    graph.replay()
    assert out.tolist() == [4.0, 4.0, 4.0] and int(seen) == 2 and graph.replays == 2
    state.fill_(5)  # written outside the graph, in the memory it reads
    graph.replay()
    assert out.tolist() == [12.0, 12.0, 12.0]
    assert offset == 10


def test_a_tensor_made_anew_outside_the_graph_is_not_what_a_replay_reads():
    table = torch.ones(2)
    holder = {"table": table}
    graph = EmulatedGraph()
    with graph.recording():
        out = holder["table"] * 3
    holder["table"] = torch.full((2,), 7.0)  # a new table: the graph reads the old one's memory
    graph.replay()
    assert out.tolist() == [3.0, 3.0]


def test_views_and_several_outputs_replay_into_the_recordings_tensors():
    scores = torch.tensor([[1.0, 5.0, 3.0], [4.0, 2.0, 6.0]])
    graph = EmulatedGraph()
    with graph.recording():
        best, where = scores.topk(2, dim=1)
        first = best[:, 0]
    scores.copy_(torch.tensor([[9.0, 0.0, 8.0], [0.0, 7.0, 1.0]]))
    graph.replay()
    assert best.tolist() == [[9.0, 8.0], [7.0, 1.0]] and where.tolist() == [[0, 2], [1, 2]]
    assert first.tolist() == [9.0, 7.0]


def test_random_operations_draw_anew_at_each_replay():
    torch.manual_seed(0)
    graph = EmulatedGraph()
    with graph.recording():
        noise = torch.rand(4)
    graph.replay()
    first = noise.clone()
    graph.replay()
    assert not torch.equal(first, noise)


@pytest.mark.parametrize(
    "call,name",
    [
        (lambda t: t.sum().item(), "_local_scalar_dense"),
        (lambda t: bool(t.sum() > 0), "_local_scalar_dense"),
        (lambda t: t.nonzero(), "nonzero"),
        (lambda t: t + torch.tensor([1.0, 2.0, 3.0]), "lift_fresh"),
    ],
)
def test_a_read_of_the_device_or_a_copy_of_host_data_cannot_be_recorded(call, name):
    with pytest.raises(RecordingError, match=name):
        with EmulatedGraph().recording():
            call(torch.ones(3))
