"""Source noise for denoising training (OpenNMT-py 1.x's -src_noise, after BART, Lewis et al. 2020).

Two noises, applied in the order given to each source sentence of a noised corpus, on the CPU batch
before it moves to the device:

- ``sen_shuffling``: the sentence is cut after each end-of-sentence token (``.``, ``?``, ``!``, also
  with the subword prefix); ``ceil(n * prob)`` of its ``n`` sentences swap places among themselves.
- ``infilling``: spans of whole words, their lengths drawn from a Poisson distribution of mean 3,
  start at random words until about ``prob`` of the words are covered; each span becomes one
  ``<unk>`` (the mask word; 1.x's too), and a span of length 0 inserts one.

Words are found with the subword prefix: a token starts a word if it begins with the prefix (a
sentencepiece ``▁``), or, with ``subword_prefix_is_joiner``, if it does not begin with it (a joiner
``￭`` glues a token to the one before). Special tokens (``<unk>``, ...) start words. The noise of a
batch is drawn from a generator seeded by the batch's place in its corpus (see ``BatchIterator``),
so a resumed run, and every process of a distributed one, draws what the uninterrupted run draws.
Copy attention's fields (``src_map``, ...) describe the source before noise: training refuses the
two together.
"""

import math

import torch

from onmt_lite.data.vocab import PAD_ID, SPECIALS, UNK_ID

NOISES = ("sen_shuffling", "infilling")
SENTENCE_ENDS = (".", "?", "!")
POISSON_MEAN = 3.0


def word_start_flags(itos, subword_prefix, prefix_is_joiner):
    """``[V]`` bool: whether each vocabulary word starts a word of text (see the module)."""
    return torch.tensor(
        [
            w in SPECIALS or not subword_prefix or w.startswith(subword_prefix) != prefix_is_joiner
            for w in itos
        ]
    )


def sentence_end_flags(itos, subword_prefix):
    """``[V]`` bool: whether each vocabulary word ends a sentence."""
    ends = set(SENTENCE_ENDS) | {subword_prefix + p for p in SENTENCE_ENDS}
    return torch.tensor([w in ends for w in itos])


def shuffle_sentences(ids, sentence_end, prob, generator):
    """``ids`` (a ``[len]`` long tensor) with ``ceil(n * prob)`` of its ``n`` sentences swapped."""
    ends = sentence_end[ids]
    # a run of end tokens ("?!") closes one sentence: cut after its last token; text after the last
    # full stop is a sentence too
    cuts = (ends & ~torch.cat([ends[1:], ends.new_zeros(1)])).nonzero().flatten() + 1
    pieces = list(torch.tensor_split(ids, cuts[cuts < len(ids)]))
    chosen = torch.randperm(len(pieces), generator=generator)[: math.ceil(len(pieces) * prob)]
    order = list(range(len(pieces)))
    for place, piece in zip(
        chosen.tolist(), chosen[torch.randperm(len(chosen), generator=generator)].tolist()
    ):
        order[place] = piece
    return torch.cat([pieces[i] for i in order])


def infill(ids, word_start, prob, mask_id, generator):
    """``ids`` with spans of whole words replaced by one ``mask_id`` each (see the module)."""
    starts = word_start[ids].nonzero().flatten().tolist()
    to_cover = math.ceil(len(starts) * prob)
    if to_cover == 0:
        return ids
    lengths = []
    while sum(lengths) < to_cover:
        lengths.append(int(torch.poisson(torch.tensor(POISSON_MEAN), generator=generator)))
    lengths[-1] -= sum(lengths) - to_cover  # the last span ends where the cover is reached
    word_bounds = starts + [len(ids)]
    chosen = torch.randperm(len(starts), generator=generator)[: len(lengths)].tolist()
    removed = torch.zeros(len(ids), dtype=torch.bool)
    insert_at = set()
    for word, length in zip(chosen, lengths):
        if length == 0:
            insert_at.add(word_bounds[word])
        else:
            removed[word_bounds[word] : word_bounds[min(word + length, len(starts))]] = True
    out = []
    removed = removed.tolist()
    for position, token in enumerate(ids.tolist()):
        if removed[position]:
            if position == 0 or not removed[position - 1]:
                # one mask for each run of removed words (overlapping spans merge)
                out.append(mask_id)
        else:
            out.extend([mask_id, token] if position in insert_at else [token])
    return torch.tensor(out, dtype=ids.dtype)


class SourceNoise:
    """The noises of ``-src_noise`` with their ``-src_noise_prob``, for one source vocabulary.

    Args:
        noises, probs: noise names (``NOISES``) and their probabilities, applied in this order.
        itos: the source vocabulary's words.
        subword_prefix, prefix_is_joiner: how words are found (see the module).
    """

    def __init__(self, noises, probs, itos, subword_prefix, prefix_is_joiner):
        self.steps = list(zip(noises, probs))
        self.word_start = word_start_flags(itos, subword_prefix, prefix_is_joiner)
        self.sentence_end = sentence_end_flags(itos, subword_prefix)

    def sentence(self, ids, generator):
        """One source sentence ``[len]`` (no padding) noised."""
        for name, prob in self.steps:
            if name == "sen_shuffling":
                ids = shuffle_sentences(ids, self.sentence_end, prob, generator)
            else:
                ids = infill(ids, self.word_start, prob, UNK_ID, generator)
        return ids

    def batch(self, batch, generator):
        """Noise every source of ``batch`` (a ``Batch``), in place: ``src`` ``[src_len x batch]``
        becomes ``[new_len x batch]``, padded again, and ``src_lengths`` their new lengths; copy
        attention's fields, which describe the old sources, are dropped. Returns the batch."""
        sentences = [
            self.sentence(batch.src[:n, b], generator)
            for b, n in enumerate(batch.src_lengths.tolist())
        ]
        lengths = torch.tensor([len(s) for s in sentences], dtype=batch.src_lengths.dtype)
        src = batch.src.new_full((int(lengths.max()), len(sentences)), PAD_ID)
        for b, s in enumerate(sentences):
            src[: len(s), b] = s
        batch.src = src
        batch.src_lengths = lengths
        batch.src_lengths_cpu = lengths
        batch.src_map = batch.alignment = batch.src_ex_vocab = batch.src_ex_tgt_ids = (
            None  # of the old source
        )
        return batch
