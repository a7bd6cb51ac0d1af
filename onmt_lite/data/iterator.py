"""Streaming shards into batches: pools sorted by length, cut by sentences or tokens, shuffled.

The order of the batches depends only on the seed, the epoch and the shard, so a position
(epoch, shard, batch) is enough to resume exactly where a run stopped. ``WeightedBatches`` takes
turns between the batch streams of several corpora; its position is theirs plus its round (each
corpus's weight) and the place in it.
"""

import os
import random

import torch

from onmt_lite.data.batch import ShardView
from onmt_lite.data.shards import load_shard


def padded_size(n_examples, max_src, max_tgt, batch_type):
    """The size of a batch: sentences, or padded tokens of its larger side (target with <s>
    </s>)."""
    if batch_type == "sents":
        return n_examples
    return n_examples * max(max_src, max_tgt + 2)


def cut_batches(order, src_lengths, tgt_lengths, batch_size, batch_type, multiple=1):
    """Cut the example positions ``order`` into consecutive groups of at most ``batch_size``.

    An example larger than ``batch_size`` on its own makes a batch of one. With ``multiple``
    (-batch_size_multiple), a full batch of more than ``multiple`` examples keeps a multiple of them
    and hands the rest to the next batch (1.x's rule, but a batch that cannot hold ``multiple``
    examples stays as it is: 1.x dropped such examples).
    """
    batches = []
    current = []
    max_src = 0
    max_tgt = 0
    for i in order:
        new_src = max(max_src, src_lengths[i])
        new_tgt = max(max_tgt, tgt_lengths[i])
        while current and padded_size(len(current) + 1, new_src, new_tgt, batch_type) > batch_size:
            rest = len(current) % multiple if len(current) > multiple else 0
            batches.append(current[: len(current) - rest])
            current = current[len(current) - rest :]
            max_src = max((src_lengths[j] for j in current), default=0)
            max_tgt = max((tgt_lengths[j] for j in current), default=0)
            new_src = max(max_src, src_lengths[i])
            new_tgt = max(max_tgt, tgt_lengths[i])
        current.append(i)
        max_src = new_src
        max_tgt = new_tgt
    if current:
        batches.append(current)
    return batches


def pooled_batches(
    src_lengths, tgt_lengths, batch_size, batch_type, pool_factor, rng=None, multiple=1
):
    """Batches (lists of positions) of one shard, bucketed by length inside pools.

    Args:
        src_lengths, tgt_lengths: lists of ints, one per example.
        pool_factor: a pool holds this many batches' worth of examples; inside a pool the examples
            are sorted by (source, target) length before cutting, so batches have little padding.
        rng: a ``random.Random`` to shuffle the examples and the batches of each pool (training);
            None keeps the corpus order of the pools (validation, translation).
        multiple: batches hold a multiple of this many examples where they can (``cut_batches``).
    """
    order = list(range(len(src_lengths)))
    if rng is not None:
        rng.shuffle(order)
    batches = []
    for pool in cut_batches(order, src_lengths, tgt_lengths, batch_size * pool_factor, batch_type):
        pool.sort(key=lambda i: (src_lengths[i], tgt_lengths[i]))
        pool_batches = cut_batches(pool, src_lengths, tgt_lengths, batch_size, batch_type, multiple)
        if rng is not None:
            rng.shuffle(pool_batches)
        batches.extend(pool_batches)
    return batches


class BatchIterator:
    """Batches from a list of shard files, loading one shard at a time.

    Args:
        paths: shard files, read in this order.
        batch_size, batch_type ("sents" or "tokens"), pool_factor: as in ``pooled_batches``.
        shuffle: shuffle examples and batches (with ``seed``, per epoch and shard).
        repeat: start a new epoch after the last shard (training) instead of stopping; ``epochs``
            (-epochs), if not 0, stops after the epoch of that number.
        vocab: the vocab file's ``vocab_id``: every shard must hold ids of those vocabularies.
        multiple: -batch_size_multiple (``cut_batches``).
        noise: a ``SourceNoise`` for every batch's sources (-src_noise), or None.
    """

    def __init__(
        self,
        paths,
        batch_size,
        batch_type="sents",
        pool_factor=8192,
        shuffle=False,
        seed=0,
        repeat=False,
        vocab=None,
        multiple=1,
        epochs=0,
        noise=None,
    ):
        self.vocab = vocab
        self.multiple = multiple
        self.epochs = epochs
        self.noise = noise
        self.paths = list(paths)
        self.batch_size = batch_size
        self.batch_type = batch_type
        self.pool_factor = pool_factor
        self.shuffle = shuffle
        self.seed = seed
        self.repeat = repeat
        self.epoch = 0
        self.shard_index = 0
        self.batch_index = 0

    def state_dict(self):
        """The position of the next batch, as plain data."""
        return {"epoch": self.epoch, "shard": self.shard_index, "batch": self.batch_index}

    def load_state_dict(self, state):
        self.epoch = state["epoch"]
        self.shard_index = state["shard"]
        self.batch_index = state["batch"]

    def _shard_batches(self, view):
        rng = (
            random.Random(f"{self.seed}/{self.epoch}/{self.shard_index}") if self.shuffle else None
        )
        return pooled_batches(
            view.src_lengths.tolist(),
            view.tgt_lengths.tolist(),
            self.batch_size,
            self.batch_type,
            self.pool_factor,
            rng,
            self.multiple,
        )

    def _noise_rng(self):
        # seeded by the batch's place, not drawn from the run's generator: a resumed run and every
        # process of a distributed one noise each batch alike; the shard's name tells corpora apart
        shard = os.path.basename(self.paths[self.shard_index])
        place = f"{self.seed}/{self.epoch}/{shard}/{self.batch_index}/noise"
        return torch.Generator().manual_seed(random.Random(place).getrandbits(63))

    def __iter__(self):
        while True:
            while self.shard_index < len(self.paths):
                view = ShardView(load_shard(self.paths[self.shard_index], self.vocab))
                batches = self._shard_batches(view)
                while self.batch_index < len(batches):
                    ids = batches[self.batch_index]
                    self.batch_index += 1
                    batch = view.batch(ids)
                    if self.noise is not None:
                        batch = self.noise.batch(batch, self._noise_rng())
                    yield batch
                self.shard_index = self.shard_index + 1
                self.batch_index = 0
            if not self.repeat or (self.epochs and self.epoch + 1 >= self.epochs):
                self.shard_index = 0
                return
            self.epoch = self.epoch + 1
            self.shard_index = 0


def saved_round(state: dict) -> list:
    """The round of a ``WeightedBatches`` position ``state``: ``[[corpus id, weight], ...]``. A
    position saved before rounds were kept holds ``turns`` instead, the round expanded to one corpus
    id per batch (``a a a b``): it is read back into the pairs."""
    if "turns" not in state:
        return [list(pair) for pair in state["round"]]
    pairs = []
    for corpus_id in state["turns"]:
        if pairs and pairs[-1][0] == corpus_id:
            pairs[-1][1] += 1
        else:
            pairs.append([corpus_id, 1])
    return pairs


def saved_place(state: dict) -> tuple:
    """``(corpus, count)`` of a ``WeightedBatches`` position ``state``: the index in its round of
    the corpus of the next batch and the batches that corpus gave in its turn so far (an old
    position's index ``turn`` into ``turns`` is read as the same place)."""
    if "turns" not in state:
        return state["corpus"], state["count"]
    corpus = 0
    count = state["turn"]
    for _, weight in saved_round(state):
        if count < weight:
            break
        corpus += 1
        count -= weight
    return corpus, count


def describe_round(pairs: list) -> str:
    """``a x3 b x1``: a round for the log."""
    return " ".join(f"{corpus_id} x{weight}" for corpus_id, weight in pairs)


class WeightedBatches:
    """The batches of several corpora in a weighted round robin: ``weights[0]`` batches of the first
    corpus, then ``weights[1]`` of the second, ..., then the first's again. Each corpus is a
    ``BatchIterator`` of its own that repeats (``repeat=True``, ``epochs=0``): it shuffles and
    buckets its batches as it would alone and starts its next epoch when it ends, whatever the
    others do.

    The round is kept as ``[corpus id, weight]`` pairs and the place in it as ``(corpus, count)``:
    the index of the corpus whose turn it is and the batches it gave in this turn; never as a list
    of one entry per batch, as a weight may be as large as -data_weights allows.

    Args:
        corpora: ``{corpus id: BatchIterator}``, in the order of the turns.
        weights: whole numbers >= 1, one per corpus.
    """

    def __init__(self, corpora: dict, weights: list):
        self.corpora = dict(corpora)
        self.round = [[corpus_id, int(weight)] for corpus_id, weight in zip(self.corpora, weights)]
        self.corpus = 0  # the index in ``round`` of the corpus of the next batch
        self.count = 0  # the batches that corpus gave in its current turn

    def state_dict(self) -> dict:
        """The position of the next batch, as plain data: every corpus's, the round and the place
        in it."""
        corpora = {corpus_id: batches.state_dict() for corpus_id, batches in self.corpora.items()}
        return {
            "corpora": corpora,
            "round": [list(pair) for pair in self.round],
            "corpus": self.corpus,
            "count": self.count,
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore each corpus's position saved under its id (a corpus the state lacks starts at
        its beginning) and, if the round is the same (same ids and weights), the place in it; else
        the turns start again from the first corpus. A position saved with ``turns`` is read too
        (``saved_round``)."""
        for corpus_id, batches in self.corpora.items():
            if corpus_id in state["corpora"]:
                batches.load_state_dict(state["corpora"][corpus_id])
        same = saved_round(state) == self.round
        self.corpus, self.count = saved_place(state) if same else (0, 0)

    def __iter__(self):
        streams = [iter(batches) for batches in self.corpora.values()]
        while True:
            batch = next(streams[self.corpus])
            self.count += 1
            if self.count >= self.round[self.corpus][1]:  # that corpus's turn is over
                self.corpus = (self.corpus + 1) % len(streams)
                self.count = 0
            yield batch
