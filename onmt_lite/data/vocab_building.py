"""The vocabularies preprocessing writes, as its options choose them: each side's from a file
(-src_vocab, -tgt_vocab) or from the training data's counts (-src_vocab_size,
-src_words_min_frequency and the target's), one for both with -share_vocab, and one per source word
feature (from PREFIX.source_feature_i.dict files of -features_vocabs_prefix, else from the data).

As in OpenNMT-py 1.x, a vocabulary shared from the data takes the source's size and minimum
frequency, and the words of a file are taken as they are (no minimum frequency; 1.x counted them so
that none fell below it). Unlike 1.x, a file longer than its -src_vocab_size is cut to that size
(1.x kept it whole), and a warning says so. As in 1.x, -src_vocab may name the PREFIX.vocab.pt of
an earlier run instead, onmt_lite's or 1.x's: its vocabularies, every one, are taken as they are
(``earlier_vocabularies``). An option those rules leave idle is named in a warning.
"""

import argparse
from collections import Counter
from typing import Callable

from onmt_lite.data.peer_vocab import peer_vocabularies
from onmt_lite.data.shards import VOCAB_FORMAT
from onmt_lite.data.vocab import SPECIALS, Vocab, vocabs_from_plain
from onmt_lite.opts import option_defaults, preprocess_opts
from onmt_lite.utils.errors import UserError
from onmt_lite.utils.logging import logger
from onmt_lite.utils.safe_pickle import load_foreign

# the counts of the training data: (source words, target words, one Counter per feature)
Counts = Callable[[], tuple[Counter, Counter, list[Counter]]]


def build_vocabs(
    opt: argparse.Namespace, counts: Counts, n_feats: int = 0
) -> tuple[Vocab, Vocab, list[Vocab]]:
    """The source and target Vocab (one object with -share_vocab) and one Vocab per source word
    feature, each padded to a multiple of -vocab_size_multiple; ``counts`` is called only where a
    vocabulary comes from the data."""
    for note in idle_vocabulary_options(opt, n_feats):
        logger.warning(note)
    earlier = earlier_vocabularies(opt.src_vocab, n_feats)
    if earlier is not None:
        src, tgt, feats = earlier
    else:
        src, tgt = _word_vocabs(opt, counts)
        feats = _feature_vocabs(opt, counts, n_feats)
    padded = [vocab.padded_to_multiple(opt.vocab_size_multiple) for vocab in [src, tgt] + feats]
    return padded[0], padded[0] if tgt is src else padded[1], padded[2:]


def idle_vocabulary_options(opt: argparse.Namespace, n_feats: int = 0) -> list[str]:
    """A line for each vocabulary option of ``opt`` given a value (other than its default) that the
    others leave unread."""
    notes = []
    defaults = option_defaults([preprocess_opts])
    if is_torch_file(opt.src_vocab):  # an earlier run's vocabularies: the others are not read
        return [
            f"-{name} {getattr(opt, name)} has no effect: -src_vocab {opt.src_vocab} is an "
            "earlier run's vocabulary file, whose vocabularies are taken as they are (as 1.x)"
            for name in EARLIER_RUN_IDLE
            if getattr(opt, name) != defaults[name]
        ]
    from_files = opt.src_vocab or opt.tgt_vocab
    if opt.share_vocab and not from_files:
        for name in ("tgt_vocab_size", "tgt_words_min_frequency"):
            if getattr(opt, name) != defaults[name]:
                notes.append(
                    f"-{name} {getattr(opt, name)} has no effect: with -share_vocab the shared "
                    "vocabulary takes the source's -src_vocab_size and -src_words_min_frequency"
                )
    # the source's minimum frequency also counts the features' values, where they come from data
    feature_counts = n_feats and not opt.features_vocabs_prefix
    # with -share_vocab a side without a file takes the other's words
    shared_file = {"src": opt.tgt_vocab, "tgt": opt.src_vocab} if opt.share_vocab else {}
    for side in ("src", "tgt"):
        path = getattr(opt, f"{side}_vocab") or shared_file.get(side)
        value = getattr(opt, f"{side}_words_min_frequency")
        if path and value != 0 and not (side == "src" and feature_counts):
            notes.append(
                f"-{side}_words_min_frequency {value} has no effect: the words of the file "
                f"{path} are taken as they are"
            )
    return notes


# what a vocabulary file of an earlier run leaves unread (-vocab_size_multiple still pads)
EARLIER_RUN_IDLE = (
    "tgt_vocab",
    "src_vocab_size",
    "tgt_vocab_size",
    "src_words_min_frequency",
    "tgt_words_min_frequency",
    "share_vocab",
    "features_vocabs_prefix",
)


def is_torch_file(path: str) -> bool:
    """Whether ``path`` is a file ``torch.save`` wrote (a zip archive, or a pickle of torch's older
    format) rather than a word list."""
    try:
        with open(path, "rb") as f:
            start = f.read(4)
    except OSError:  # missing: the word list reader names it
        return False
    return start == b"PK\x03\x04" or start[:1] == b"\x80"


def earlier_vocabularies(path: str, n_feats: int) -> tuple[Vocab, Vocab, list[Vocab]] | None:
    """The source, target and feature vocabularies of the PREFIX.vocab.pt of an earlier
    preprocessing run that ``path`` (-src_vocab) names, for data with ``n_feats`` source word
    features; None for a word list. 1.x took its vocab.pt there and kept every vocabulary of that
    run as it was. onmt_lite's file, or 1.x's (torchtext fields, read as plain data: no torchtext
    code runs); a shared vocabulary stays one object."""
    if not path or not is_torch_file(path):
        return None
    record = load_foreign(path)  # a restricted unpickler: onmt_lite's plain data or 1.x's fields
    if not isinstance(record, dict) or record.get("format", VOCAB_FORMAT) != VOCAB_FORMAT:
        raise UserError(f"{path}: neither an onmt_lite nor a 1.x vocabulary file")
    if "format" in record:
        vocabs = vocabs_from_plain(record)
    else:  # 1.x's fields: word lists with their specials, which Vocab drops
        words = peer_vocabularies(record, path)
        vocabs = {"src": Vocab(words["src"]), "tgt": Vocab(words["tgt"]), "src_feats": []}
    if len(vocabs["src_feats"]) != n_feats:
        raise UserError(
            f"{path}: its run's data had {len(vocabs['src_feats'])} source word feature(s), "
            f"this data {n_feats}"
        )
    src = vocabs["src"]
    tgt = src if src.itos == vocabs["tgt"].itos else vocabs["tgt"]
    logger.info(
        f"-src_vocab {path}: an earlier run's vocabularies, as they are ({len(src)} source, "
        f"{len(tgt)} target words with specials)"
    )
    return src, tgt, vocabs["src_feats"]


def vocab_from_file(path: str, max_size: int, option: str) -> Vocab:
    """The Vocab of the file ``path``'s words, the first ``max_size`` (0: all) of them; a warning
    names a file cut to that size (``option``, such as ``-src_vocab_size``)."""
    vocab = Vocab.from_file(path, 0)
    kept = vocab.truncated(max_size)
    if kept is not vocab:
        words = len(vocab) - len(SPECIALS)
        logger.warning(
            f"{path}: {words} words, the first {max_size} kept ({option} {max_size}; "
            f"{option} 0 keeps them all)"
        )
    return kept


def feature_vocab_paths(prefix: str, n_feats: int) -> list[str]:
    """The files -features_vocabs_prefix names: PREFIX.source_feature_1.dict .. _N.dict (Lua
    OpenNMT's names)."""
    return [f"{prefix}.source_feature_{i}.dict" for i in range(1, n_feats + 1)]


def _feature_vocabs(opt: argparse.Namespace, counts: Counts, n_feats: int) -> list[Vocab]:
    """Feature i's Vocab from PREFIX.source_feature_i.dict (as -src_vocab), else from the training
    data with the source's -src_vocab_size and -src_words_min_frequency (as 1.x)."""
    if opt.features_vocabs_prefix:
        if not n_feats:
            raise UserError(
                f"-features_vocabs_prefix {opt.features_vocabs_prefix}: {opt.train_src[0]} has no "
                f"source word features (word\uffe8feat tokens)"
            )
        return [
            vocab_from_file(path, opt.src_vocab_size, "-src_vocab_size")
            for path in feature_vocab_paths(opt.features_vocabs_prefix, n_feats)
        ]
    return [
        Vocab.from_counter(counter, opt.src_vocab_size, opt.src_words_min_frequency)
        for counter in (counts()[2] if n_feats else ())
    ]


def _word_vocabs(opt: argparse.Namespace, counts: Counts) -> tuple[Vocab, Vocab]:
    """The source and target Vocab: from the files given, else from the data; with -share_vocab
    one Vocab, the given files' words, else the most frequent words of both sides together."""
    src_file = None
    tgt_file = None
    if opt.src_vocab:
        src_file = vocab_from_file(opt.src_vocab, opt.src_vocab_size, "-src_vocab_size")
    if opt.tgt_vocab:
        tgt_file = vocab_from_file(opt.tgt_vocab, opt.tgt_vocab_size, "-tgt_vocab_size")
    if opt.share_vocab and (src_file is not None or tgt_file is not None):
        shared = Vocab([w for v in (src_file, tgt_file) if v is not None for w in v.itos[4:]])
        return shared, shared
    if src_file is not None and tgt_file is not None:
        return src_file, tgt_file
    src_counter, tgt_counter, _ = counts()
    if opt.share_vocab:  # 1.x: the source's size and minimum frequency
        shared = Vocab.from_counter(
            src_counter + tgt_counter, opt.src_vocab_size, opt.src_words_min_frequency
        )
        return shared, shared
    if src_file is None:
        src_file = Vocab.from_counter(src_counter, opt.src_vocab_size, opt.src_words_min_frequency)
    if tgt_file is None:
        tgt_file = Vocab.from_counter(tgt_counter, opt.tgt_vocab_size, opt.tgt_words_min_frequency)
    return src_file, tgt_file
