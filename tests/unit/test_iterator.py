import random

import pytest

from onmt_lite.data.iterator import (
    BatchIterator,
    WeightedBatches,
    cut_batches,
    padded_size,
    pooled_batches,
)
from onmt_lite.data.shards import make_shard
from onmt_lite.utils.files import load_tensors, save_tensors

rng = random.Random(0)
SRC_LENGTHS = [rng.randint(1, 30) for _ in range(500)]
TGT_LENGTHS = [rng.randint(1, 30) for _ in range(500)]


def test_token_batches_respect_the_padded_size_and_cover_every_example_once():
    batches = pooled_batches(SRC_LENGTHS, TGT_LENGTHS, 200, "tokens", 10, random.Random(1))
    assert sorted(i for b in batches for i in b) == list(range(500))
    for b in batches:
        size = padded_size(
            len(b), max(SRC_LENGTHS[i] for i in b), max(TGT_LENGTHS[i] for i in b), "tokens"
        )
        assert size <= 200 or len(b) == 1


def test_sentence_batches_are_sorted_by_length_inside_a_pool():
    batches = pooled_batches(SRC_LENGTHS, TGT_LENGTHS, 16, "sents", 500)  # one pool, no shuffling
    flat = [i for b in batches for i in b]
    keys = [(SRC_LENGTHS[i], TGT_LENGTHS[i]) for i in flat]
    assert keys == sorted(keys)
    assert [len(b) for b in batches] == [16] * 31 + [4]


def test_an_example_larger_than_the_batch_stands_alone():
    assert cut_batches([0, 1, 2], [5, 50, 5], [5, 5, 5], 20, "tokens") == [[0], [1], [2]]


@pytest.fixture
def shard_files(tmp_path):
    paths = []
    for n in range(2):
        examples = [
            {"index": i, "src": [4] * SRC_LENGTHS[i], "tgt": [5] * TGT_LENGTHS[i]}
            for i in range(n * 250, (n + 1) * 250)
        ]
        paths.append(str(tmp_path / f"d.train.{n}.pt"))
        save_tensors(make_shard(examples), paths[-1])
    return paths


def test_shuffling_depends_on_seed_only(shard_files):
    def indices(seed):
        return [b.indices.tolist() for b in BatchIterator(shard_files, 32, shuffle=True, seed=seed)]

    assert indices(3) == indices(3)
    assert indices(3) != indices(4)
    assert sorted(i for b in indices(3) for i in b) == list(range(500))


def test_resuming_from_a_saved_position_continues_exactly(shard_files):
    full = BatchIterator(shard_files, 32, shuffle=True, seed=7, repeat=True)
    stream = iter(full)
    expected = [next(stream).indices.tolist() for _ in range(30)]  # crosses a shard and an epoch

    first = BatchIterator(shard_files, 32, shuffle=True, seed=7, repeat=True)
    stream = iter(first)
    head = [next(stream).indices.tolist() for _ in range(11)]
    resumed = BatchIterator(shard_files, 32, shuffle=True, seed=7, repeat=True)
    resumed.load_state_dict(first.state_dict())
    stream = iter(resumed)
    tail = [next(stream).indices.tolist() for _ in range(19)]
    assert head + tail == expected


def batch_iter_1x(order, src_lengths, tgt_lengths, batch_size, batch_type, multiple):
    """OpenNMT-py 1.x's ``batch_iter`` (onmt/inputters/inputter.py) written out, with this toolkit's
    padded size; where 1.x would drop a batch that cannot hold ``multiple`` examples, it is kept."""

    def size(batch):
        return padded_size(
            len(batch),
            max(src_lengths[j] for j in batch),
            max(tgt_lengths[j] for j in batch),
            batch_type,
        )

    batches = []
    minibatch = []
    for i in order:
        minibatch.append(i)
        if size(minibatch) < batch_size:
            continue
        overflowed = 1 if size(minibatch) > batch_size else 0
        if multiple > 1:
            overflowed += (len(minibatch) - overflowed) % multiple
        if overflowed == 0:
            batches.append(minibatch)
            minibatch = []
        elif overflowed < len(minibatch):
            batches.append(minibatch[:-overflowed])
            minibatch = minibatch[-overflowed:]
    if minibatch:
        batches.append(minibatch)
    return batches


@pytest.mark.parametrize(
    "batch_type,batch_size,multiple",
    [("sents", 10, 4), ("tokens", 200, 8), ("tokens", 64, 3), ("sents", 12, 1), ("tokens", 100, 1)],
)
def test_batch_size_multiple_cuts_as_opennmt_py_1x(batch_type, batch_size, multiple):
    rng = random.Random(batch_size + multiple)
    src = [rng.randint(1, 12) for _ in range(500)]
    tgt = [rng.randint(1, 12) for _ in range(500)]
    order = sorted(range(500), key=lambda i: (src[i], tgt[i]))
    ours = cut_batches(order, src, tgt, batch_size, batch_type, multiple)
    assert ours == batch_iter_1x(order, src, tgt, batch_size, batch_type, multiple)
    assert [i for b in ours for i in b] == order
    assert sum(len(b) % multiple != 0 for b in ours[:-1]) == 0


# every source word of corpus a is id 4, of corpus b id 5: a batch tells its corpus
CORPUS_WORD = {
    "a": 4,
    "b": 5,
}


@pytest.fixture
def two_corpora(tmp_path):
    """Corpus a: 2 shards of 20 examples (lengths varied); corpus b: 1 shard of 10 examples."""
    paths = {"a": [], "b": []}
    for corpus_id, sizes in (("a", (20, 20)), ("b", (10,))):
        line = 1
        for number, size in enumerate(sizes, 1):
            examples = []
            for _ in range(size):
                examples.append(
                    {
                        "index": line,
                        "src": [CORPUS_WORD[corpus_id]] * (1 + line % 5),
                        "tgt": [6] * 3,
                    }
                )
                line += 1
            paths[corpus_id].append(str(tmp_path / f"d.train_{corpus_id}.{number}.pt"))
            save_tensors(make_shard(examples), paths[corpus_id][-1])
    return paths


def weighted(paths, weights=(3, 1), batch_size=4):
    return WeightedBatches(
        {
            corpus_id: BatchIterator(
                paths[corpus_id], batch_size, shuffle=True, seed=5, repeat=True, pool_factor=2
            )
            for corpus_id in paths
        },
        weights,
    )


def corpus_of(batch):
    (word,) = set(batch.src[0].tolist())  # the first position is never padding
    return {v: k for k, v in CORPUS_WORD.items()}[word]


def test_weights_3_1_take_3_batches_of_a_then_1_of_b_and_each_corpus_has_its_own_epochs(
    two_corpora,
):
    """Corpus a has 10 batches an epoch, b 3: 60 batches are 45 of a (4.5 epochs) and 15 of b (5
    epochs).
    Brute force: within each corpus, every run of (its size) consecutive examples holds each example
    once."""
    stream = iter(weighted(two_corpora))
    batches = [next(stream) for _ in range(60)]
    assert [corpus_of(b) for b in batches] == ["a", "a", "a", "b"] * 15
    for corpus_id, size in (("a", 40), ("b", 10)):
        seen = [i for b in batches if corpus_of(b) == corpus_id for i in b.indices.tolist()]
        epochs = [seen[n : n + size] for n in range(0, len(seen), size)]
        assert len(epochs) >= 4
        assert all(sorted(epoch) == list(range(1, size + 1)) for epoch in epochs[:-1])
        assert len(set(epochs[-1])) == len(epochs[-1])
    a_batches = [b.indices.tolist() for b in batches if corpus_of(b) == "a"]
    # shuffled and bucketed as on its own
    assert a_batches == alone(two_corpora, "a", len(a_batches))


@pytest.mark.parametrize("taken", [1, 3, 7, 14, 29])
def test_a_weighted_stream_resumes_exactly_from_its_saved_position(two_corpora, tmp_path, taken):
    stream = iter(weighted(two_corpora))
    expected = [next(stream).indices.tolist() for _ in range(40)]
    first = weighted(two_corpora)
    stream = iter(first)
    head = [next(stream).indices.tolist() for _ in range(taken)]
    # plain data, as in a checkpoint
    save_tensors(first.state_dict(), str(tmp_path / "position.pt"))
    resumed = weighted(two_corpora)
    resumed.load_state_dict(load_tensors(str(tmp_path / "position.pt"), "position"))
    stream = iter(resumed)
    assert head + [next(stream).indices.tolist() for _ in range(40 - taken)] == expected


def alone(paths, corpus_id, n):
    """The first ``n`` batches (their line numbers) of one corpus read on its own."""
    stream = iter(
        BatchIterator(paths[corpus_id], 4, shuffle=True, seed=5, repeat=True, pool_factor=2)
    )
    return [next(stream).indices.tolist() for _ in range(n)]


def test_other_weights_keep_each_corpus_position_and_start_the_turns_again(two_corpora):
    first = weighted(two_corpora)
    stream = iter(first)
    for _ in range(5):  # a a a b a: 4 batches of a, 1 of b
        next(stream)
    resumed = weighted(two_corpora, weights=(1, 2))
    resumed.load_state_dict(first.state_dict())
    stream = iter(resumed)
    batches = [next(stream) for _ in range(6)]
    assert [corpus_of(b) for b in batches] == ["a", "b", "b", "a", "b", "b"]
    assert [b.indices.tolist() for b in batches if corpus_of(b) == "a"] == alone(
        two_corpora, "a", 6
    )[4:]
    assert [b.indices.tolist() for b in batches if corpus_of(b) == "b"] == alone(
        two_corpora, "b", 5
    )[1:]
