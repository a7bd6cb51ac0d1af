"""Batch: padded, time-major tensors of a group of examples (shapes as in docs/architecture.md).

A ``ShardView`` holds one loaded shard and cuts batches out of its flat id tensors with index
arithmetic (no Python loop over the examples of a batch).
"""

import torch

from onmt_lite.data.alignment import batch_links
from onmt_lite.data.copy import EX_UNK_ID, one_hot_src_map
from onmt_lite.data.vocab import BOS_ID, EOS_ID, PAD_ID


class Batch:
    """A batch of examples.

    Attributes:
        src: ``[src_len x batch]`` long, padded with ``<blank>``.
        src_lengths: ``[batch]`` long.
        src_feats: with source word features, ``[src_len x batch x n_feats]`` long feature ids
            (padded with ``<blank>``); None without.
        tgt: ``[tgt_len x batch]`` long, ``<s> w1 .. wn </s>`` then padding; None without targets.
        indices: ``[batch]`` long, each example's line number in its corpus.
        src_map: copy only, ``[src_len x batch x n_src_words]`` float one-hot of each source
            position onto its example's vocabulary (rows of padding are zero).
        alignment: copy only, ``[tgt_len x batch]`` long, each target word's index in its example's
            vocabulary (0 where it is not in the source, and at ``<s>``, ``</s>`` and padding).
        src_ex_vocab: copy only, the per-example source vocabularies (lists of words).
        src_ex_tgt_ids: copy only, ``[batch x n_src_words]`` long, the target-vocabulary id of each
            word of each example's source vocabulary (0 = not in the target vocabulary, or padding).
        align: with alignment data (``-train_align``), ``[n_links x 3]`` long rows ``(example,
            target token, source token)``, token indices from 0 in the sentence (see
            data/alignment.py).
        src_lengths_cpu, indices_cpu, tgt_cpu: ``src_lengths``, ``indices`` and ``tgt`` as built,
            on the CPU wherever the batch moves: what the host reads of them needs no wait for a
            device.
    """

    def __init__(
        self,
        src,
        src_lengths,
        tgt=None,
        indices=None,
        src_map=None,
        alignment=None,
        src_ex_vocab=None,
        src_ex_tgt_ids=None,
    ):
        self.src = src
        self.src_lengths = src_lengths
        self.tgt = tgt
        self.indices = indices
        self.src_map = src_map
        self.alignment = alignment
        self.src_ex_vocab = src_ex_vocab
        self.src_ex_tgt_ids = src_ex_tgt_ids
        self.tgt_tokens = None  # validation batches: the reference words
        self.src_feats = None
        self.align = None
        self.src_lengths_cpu = src_lengths
        self.indices_cpu = indices
        self.tgt_cpu = tgt

    @property
    def batch_size(self):
        return self.src.size(1)

    def to(self, device):
        """Move the tensors to ``device`` (in place); returns the batch. To a CUDA device they go
        through pinned memory, without waiting for the copies (the device's stream orders them
        before any use); elsewhere a plain ``.to``."""
        device = torch.device(device)
        pinned = device.type == "cuda" and torch.cuda.is_available()
        if pinned:
            self.pin_memory()  # a copy from pageable memory would block the host
        for name in TENSOR_FIELDS:
            value = getattr(self, name)
            if value is not None:
                setattr(self, name, value.to(device, non_blocking=pinned))
        return self

    def pin_memory(self):
        """Put the tensors still in pageable CPU memory in page-locked memory (in place; needs
        CUDA); returns the batch. ``data/prefetch.py`` does it ahead, in its thread."""
        for name in TENSOR_FIELDS:
            value = getattr(self, name)
            if value is not None and value.device.type == "cpu" and not value.is_pinned():
                setattr(self, name, value.pin_memory())
        return self


# the tensors ``Batch.to`` moves (the ``*_cpu`` copies stay where they were built)
TENSOR_FIELDS = (
    "src",
    "src_lengths",
    "tgt",
    "indices",
    "src_map",
    "alignment",
    "src_ex_tgt_ids",
    "align",
    "src_feats",
)


def gather_padded(flat, offsets, lengths, ids, pad):
    """Sequences ``ids`` of a flat tensor, padded: ``[max_len x len(ids)]``."""
    lens = lengths[ids]
    starts = offsets[ids]
    steps = torch.arange(int(lens.max())).unsqueeze(1)
    positions = (starts.unsqueeze(0) + steps).clamp(max=max(flat.numel() - 1, 0))
    return flat[positions].masked_fill(steps >= lens.unsqueeze(0), pad)


def add_bos_eos(body, lengths, bos, eos, pad):
    """``[len x batch]`` -> ``[len + 2 x batch]`` with ``bos`` first and ``eos`` after each
    example."""
    out = torch.full((body.size(0) + 2, body.size(1)), pad, dtype=body.dtype)
    out[0] = bos
    out[1:-1] = body
    out[lengths + 1, torch.arange(body.size(1))] = eos
    return out


def _offsets(lengths):
    return torch.cumsum(lengths, 0) - lengths


class ShardView:
    """One loaded shard (see data/shards.py) with fast access to padded batches."""

    def __init__(self, shard):
        self.shard = shard
        self.src_lengths = shard["src_lengths"]
        self.tgt_lengths = shard["tgt_lengths"]
        self.src_offsets, self.tgt_offsets = _offsets(self.src_lengths), _offsets(self.tgt_lengths)
        self.has_copy = "src_map" in shard
        if self.has_copy:
            self.ex_lengths = torch.tensor(
                [len(v) for v in shard["src_ex_vocab"]], dtype=torch.long
            )
            self.ex_offsets = _offsets(self.ex_lengths)
        if "align" in shard:
            self.align_offsets = _offsets(shard["align_lengths"])

    def __len__(self):
        return self.src_lengths.numel()

    def batch(self, ids):
        """The Batch of the examples ``ids`` (a list of positions in this shard), in that order."""
        ids = torch.as_tensor(ids, dtype=torch.long)
        shard = self.shard
        src_lengths = self.src_lengths[ids]
        tgt_lengths = self.tgt_lengths[ids]
        src = gather_padded(shard["src"], self.src_offsets, self.src_lengths, ids, PAD_ID)
        tgt_body = gather_padded(shard["tgt"], self.tgt_offsets, self.tgt_lengths, ids, PAD_ID)
        tgt = add_bos_eos(tgt_body, tgt_lengths, BOS_ID, EOS_ID, PAD_ID)
        batch = Batch(src, src_lengths, tgt, shard["indices"][ids])
        if "src_feats" in shard:
            batch.src_feats = torch.stack(
                [
                    gather_padded(flat, self.src_offsets, self.src_lengths, ids, PAD_ID)
                    for flat in shard["src_feats"]
                ],
                -1,
            )
        if self.has_copy:
            ex_vocab = [shard["src_ex_vocab"][i] for i in ids.tolist()]
            map_ids = gather_padded(shard["src_map"], self.src_offsets, self.src_lengths, ids, 0)
            ex_tgt_ids = gather_padded(
                shard["src_ex_tgt_ids"], self.ex_offsets, self.ex_lengths, ids, 0
            )
            batch.src_map = one_hot_src_map(map_ids, src_lengths, ex_tgt_ids.size(0))
            align = gather_padded(
                shard["alignment"], self.tgt_offsets, self.tgt_lengths, ids, EX_UNK_ID
            )
            batch.alignment = add_bos_eos(align, tgt_lengths, EX_UNK_ID, EX_UNK_ID, EX_UNK_ID)
            batch.src_ex_vocab = ex_vocab
            batch.src_ex_tgt_ids = ex_tgt_ids.t()
        if "align" in shard:
            batch.align = batch_links(
                shard["align"], shard["align_lengths"], self.align_offsets, ids
            )
        if "tgt_tokens" in shard:
            batch.tgt_tokens = [shard["tgt_tokens"][i] for i in ids.tolist()]
        return batch
