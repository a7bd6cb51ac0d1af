"""The on-disk format of preprocessed data: vocab files and shards of numericalised examples.

A shard is a dict of plain data, opened with ``torch.load(path, weights_only=True)``:
    ``src``, ``tgt``: 1-D long tensors, every example's ids one after another (no ``<s>``/``</s>``);
    ``src_lengths``, ``tgt_lengths``: ``[n_examples]`` long; ``indices``: ``[n_examples]`` long, the
    example's line number in its corpus (from 1);
    with ``-dynamic_dict``: ``src_map``/``alignment`` laid out like ``src``/``tgt`` (see
    data/copy.py), ``src_ex_vocab``, a list of word lists, and ``src_ex_tgt_ids``, those words'
    target-vocabulary ids laid out one example after another (0 where the target vocabulary lacks
    the word);
    with ``-train_align``/``-valid_align``: ``align``, every example's alignment links one after
    another, each as its source then its target token index, and ``align_lengths``
    ``[n_examples]``, the number of links of each example (see data/alignment.py);
    with source word features: ``src_feats``, ``[n_feats x n_src_tokens]`` long, each feature's ids
    laid out like ``src``;
    validation shards also hold ``tgt_tokens``, the reference words (for BLEU during training);
    ``vocab_id``: the ``vocab_id`` of the vocabularies whose ids they hold (as the vocab file's).
"""

import glob
import hashlib
import json
import os
import re
import sys

import torch

from onmt_lite.data.alignment import flat_links
from onmt_lite.utils.errors import UserError
from onmt_lite.utils.files import load_tensors

SHARD_FORMAT = "onmt_lite.shard.v1"
VOCAB_FORMAT = "onmt_lite.vocab.v1"


def vocab_path(prefix):
    return f"{prefix}.vocab.pt"


def shard_path(prefix: str, corpus_type: str, number: int | str) -> str:
    """``PREFIX.{corpus_type}.N.pt``: preprocessing numbers a corpus's shards from 0, as OpenNMT-py
    1.x does (``PREFIX.train.0.pt``, ``PREFIX.valid.0.pt``)."""
    return f"{prefix}.{corpus_type}.{number}.pt"


def train_kind(corpus_id):
    """The ``corpus_type`` of a training corpus's shards: ``train`` for the one unnamed corpus (no
    -train_ids), ``train_ID`` for the corpus named ID (``PREFIX.train_ID.N.pt``, as 1.x named
    them)."""
    return "train" if corpus_id is None else f"train_{corpus_id}"


# names a file part: no dots, slashes or glob characters
CORPUS_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*$")


def shard_paths(prefix, corpus_type):
    """The shard files ``PREFIX.{corpus_type}.N.pt`` in the order of N, whatever N starts from: data
    that an earlier onmt_lite numbered from 1 still trains."""
    pattern = re.compile(
        re.escape(os.path.basename(prefix)) + rf"\.{re.escape(corpus_type)}\.(\d+)\.pt$"
    )
    found = []
    for path in glob.glob(glob.escape(prefix) + f".{glob.escape(corpus_type)}.*.pt"):
        match = pattern.match(os.path.basename(path))
        if match:
            found.append((int(match.group(1)), path))
    return [path for _, path in sorted(found)]


def all_shard_paths(prefix):
    """Every shard file of ``prefix``: validation and training shards, those of named corpora
    included."""
    kinds = {"train", "valid"}
    pattern = re.compile(
        re.escape(os.path.basename(prefix)) + r"\.(train_[A-Za-z0-9][A-Za-z0-9_-]*)\.\d+\.pt$"
    )
    for path in glob.glob(glob.escape(prefix) + ".train_*.pt"):
        match = pattern.match(os.path.basename(path))
        if match:
            kinds.add(match.group(1))
    return [path for kind in sorted(kinds) for path in shard_paths(prefix, kind)]


def _flat(seqs):
    flat = [i for seq in seqs for i in seq]
    return torch.tensor(flat, dtype=torch.long), torch.tensor(
        [len(s) for s in seqs], dtype=torch.long
    )


def vocab_id(src_words, tgt_words, feat_words=()):
    """A digest of both word lists (and of the feature vocabularies' ``feat_words``): the shards of
    one preprocessing run carry their vocab file's, so that shards of a run with other vocabularies
    are refused instead of read as other words."""
    lists = [list(src_words), list(tgt_words)] + (
        [[list(words) for words in feat_words]] if feat_words else []
    )
    return hashlib.sha256(json.dumps(lists).encode("utf-8")).hexdigest()[:16]


def make_shard(examples, vocab=None):
    """Pack a list of example dicts (``src``, ``tgt``, ``index`` id lists; copy fields optional);
    ``vocab``, a ``vocab_id``, ties the shard to its vocabularies."""
    shard = {"format": SHARD_FORMAT}
    if vocab is not None:
        shard["vocab_id"] = vocab
    shard["src"], shard["src_lengths"] = _flat([ex["src"] for ex in examples])
    shard["tgt"], shard["tgt_lengths"] = _flat([ex["tgt"] for ex in examples])
    shard["indices"] = torch.tensor([ex["index"] for ex in examples], dtype=torch.long)
    if examples and "src_feats" in examples[0]:
        n_feats = len(examples[0]["src_feats"])
        shard["src_feats"] = torch.stack(
            [_flat([ex["src_feats"][i] for ex in examples])[0] for i in range(n_feats)]
        )
    if examples and "src_map" in examples[0]:
        shard["src_map"], _ = _flat([ex["src_map"] for ex in examples])
        shard["alignment"], _ = _flat([ex["alignment"] for ex in examples])
        shard["src_ex_vocab"] = _one_object_per_word([ex["src_ex_vocab"] for ex in examples])
        shard["src_ex_tgt_ids"], _ = _flat([ex["src_ex_tgt_ids"] for ex in examples])
    if examples and "align" in examples[0]:
        shard["align"], shard["align_lengths"] = flat_links([ex["align"] for ex in examples])
    if examples and "tgt_tokens" in examples[0]:
        shard["tgt_tokens"] = _one_object_per_word([ex["tgt_tokens"] for ex in examples])
    return shard


def _one_object_per_word(sentences):
    # pickle writes a string object once, then refers to it: with one object per distinct word the
    # file's bytes depend on the words alone, not on where the strings were made (-num_threads)
    return [[sys.intern(word) for word in words] for words in sentences]


def load_plain(path, expected_format, what):
    """``torch.load(weights_only=True)`` of an onmt_lite file whose ``format`` is
    ``expected_format``."""
    obj = load_tensors(path, what)
    if not isinstance(obj, dict) or obj.get("format") != expected_format:
        raise UserError(f"{path}: not an onmt_lite {what}")
    return obj


REQUIRED_KEYS = ("src", "src_lengths", "tgt", "tgt_lengths", "indices")
COPY_KEYS = ("src_map", "alignment", "src_ex_vocab", "src_ex_tgt_ids")
ALIGN_KEYS = ("align", "align_lengths")


def load_shard(path, vocab=None):
    """A shard, checked for the keys batching needs and, given the vocab file's ``vocab_id``
    (``vocab``), for holding ids of those vocabularies."""
    shard = load_plain(path, SHARD_FORMAT, "data shard")
    if vocab is not None and shard.get("vocab_id") != vocab:
        raise UserError(
            f"{path}: its ids index other vocabularies than the vocab file's (a shard of another "
            f"preprocessing run); preprocess the data again into one -save_data"
        )
    needed = (
        REQUIRED_KEYS
        + (COPY_KEYS if "src_map" in shard else ())
        + (ALIGN_KEYS if "align" in shard else ())
    )
    missing = [key for key in needed if key not in shard]
    if missing:
        raise UserError(
            f"{path}: data shard lacks {', '.join(missing)} (preprocess the data again)"
        )
    return shard
