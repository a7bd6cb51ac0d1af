"""-num_workers 1: batches made by a thread are the loop's batches, in order, and the position a
checkpoint records is after the last batch the loop got, however far the thread ran ahead."""

import itertools
import threading
import time

import pytest

from onmt_lite.data.iterator import BatchIterator, WeightedBatches
from onmt_lite.data.prefetch import PrefetchedBatches, prefetched
from onmt_lite.data.shards import make_shard
from onmt_lite.utils.errors import UserError
from onmt_lite.utils.files import save_tensors


def _shards(directory, name, n_shards=2, per_shard=60):
    paths = []
    for n in range(n_shards):
        examples = [
            {"index": i, "src": [4] * (1 + i % 7), "tgt": [5] * (1 + i % 5)}
            for i in range(n * per_shard, (n + 1) * per_shard)
        ]
        paths.append(str(directory / f"{name}.train.{n}.pt"))
        save_tensors(make_shard(examples), paths[-1])
    return paths


def _plain(paths, repeat=False):
    return BatchIterator(paths, 8, shuffle=True, seed=3, repeat=repeat, pool_factor=2)


def _indices(batches):
    return [batch.indices.tolist() for batch in batches]


def _weighted(a, b):
    return WeightedBatches({"a": _plain(a, True), "b": _plain(b, True)}, [3, 1])


def test_the_thread_makes_the_batches_of_the_stream_in_its_order(tmp_path):
    paths = _shards(tmp_path, "d")
    assert _indices(PrefetchedBatches(_plain(paths))) == _indices(_plain(paths))
    assert len(_indices(_plain(paths))) > 10


@pytest.mark.parametrize("taken", [0, 1, 5, 17])
def test_the_position_is_after_the_last_batch_handed_out_and_resumes_there(tmp_path, taken):
    a = _shards(tmp_path, "a")
    b = _shards(tmp_path, "b", per_shard=40)
    alone = _weighted(a, b)
    alone_batches = iter(alone)
    expected = _indices(itertools.islice(alone_batches, taken))
    ahead = PrefetchedBatches(_weighted(a, b), depth=4)
    batches = iter(ahead)
    assert _indices(itertools.islice(batches, taken)) == expected
    if taken:  # the thread runs ahead of the loop: the source's own position gets later
        deadline = time.monotonic() + 10
        while ahead.source.state_dict() == alone.state_dict() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert ahead.source.state_dict() != alone.state_dict()
    saved = ahead.state_dict()
    assert saved == alone.state_dict()
    batches.close()
    resumed = PrefetchedBatches(_weighted(a, b))
    resumed.load_state_dict(saved)
    assert _indices(itertools.islice(resumed, 9)) == _indices(itertools.islice(alone_batches, 9))


def test_what_the_loop_asks_of_the_stream_is_the_sources(tmp_path):
    weighted = _weighted(_shards(tmp_path, "a"), _shards(tmp_path, "b"))
    assert PrefetchedBatches(weighted).round == [["a", 3], ["b", 1]]


def test_an_error_in_the_thread_is_raised_in_the_loop(tmp_path):
    paths = _shards(tmp_path, "d")
    with open(paths[1], "wb") as f:
        f.write(b"not a shard")
    batches = iter(PrefetchedBatches(_plain(paths)))
    with pytest.raises(UserError, match="d.train.1.pt"):
        list(batches)


def test_the_thread_ends_when_the_loop_stops_early(tmp_path):
    ahead = PrefetchedBatches(_plain(_shards(tmp_path, "d"), repeat=True))
    batches = iter(ahead)
    next(batches)
    assert any(t.name == "batches" for t in threading.enumerate())
    batches.close()  # what the end of the training loop does to its generator
    assert ahead._thread is None
    assert not any(t.name == "batches" and t.is_alive() for t in threading.enumerate())


def test_no_workers_is_the_stream_itself(tmp_path):
    stream = _plain(_shards(tmp_path, "d"))
    assert prefetched(stream, 0, pin=False) is stream
    assert isinstance(prefetched(stream, 1, pin=False), PrefetchedBatches)
