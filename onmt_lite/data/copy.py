"""The dynamic dictionary that copy attention needs (See et al. 2017, OpenNMT's ``-dynamic_dict``).

Each example gets its own source vocabulary: ``<unk> <blank>`` then its distinct source words in
order of first appearance. ``src_map`` gives, for each source position, that word's index in the
example vocabulary; ``alignment`` gives, for each target word, its index there (0 = not in the
source); ``target_ids`` gives each example word's id in the target vocabulary (0 = not in it).
"""

import torch

from onmt_lite.data.vocab import PAD, UNK

EX_UNK_ID = 0
EX_PAD_ID = 1


def source_vocab(src_tokens):
    """The example's source vocabulary: ``[<unk>, <blank>, w1, w2, ...]`` (distinct, in order)."""
    words = [UNK, PAD]
    seen = set(words)
    for token in src_tokens:
        if token not in seen:
            seen.add(token)
            words.append(token)
    return words


def copy_ids(src_tokens, ex_words):
    """``src_map`` ids: each source token's index in the example vocabulary ``ex_words``."""
    index = {w: i for i, w in enumerate(ex_words)}
    return [index[t] for t in src_tokens]


def alignment_ids(tgt_tokens, ex_words):
    """Each target token's index in ``ex_words``; 0 where the word is not in the source."""
    index = {w: i for i, w in enumerate(ex_words)}
    index.pop(PAD, None)
    return [index.get(t, EX_UNK_ID) if t != UNK else EX_UNK_ID for t in tgt_tokens]


def target_ids(ex_words, tgt_vocab):
    """Each example-vocabulary word's id in the target vocabulary (0 for the specials and for words
    the target vocabulary lacks): what ``collapse_copy_scores`` adds copy probability onto."""
    return [0, 0] + [tgt_vocab.lookup(w) for w in ex_words[2:]]


def one_hot_src_map(ids, lengths, n_words):
    """Float one-hot ``[src_len x batch x n_words]`` of padded ``ids`` ``[src_len x batch]``.

    Rows past each example's length are all zero, so padding carries no copy probability.
    """
    src_len, batch = ids.shape
    mask = torch.arange(src_len).unsqueeze(1) < lengths.unsqueeze(0)  # [src_len x batch]
    one_hot = torch.zeros(src_len, batch, n_words)
    one_hot.scatter_(2, ids.unsqueeze(2), mask.unsqueeze(2).float())
    return one_hot
