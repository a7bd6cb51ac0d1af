"""onmt_lite.data.noise: 1.x's source noise (sentence shuffling, span infilling), checked against
structure written out in the tests."""

import functools
import math

import torch

from onmt_lite.data.batch import Batch
from onmt_lite.data.noise import (
    SourceNoise,
    infill,
    sentence_end_flags,
    shuffle_sentences,
    word_start_flags,
)
from onmt_lite.data.vocab import PAD_ID, SPECIALS, UNK_ID

SPM = list(SPECIALS) + ["▁the", "▁ca", "t", "▁sat", ".", "▁.", "?", "!", "▁a", "▁do", "g"]
JOINER = list(SPECIALS) + ["the", "ca", "￭t", "sat", "￭."]


def test_word_starts_by_prefix_and_by_joiner_and_sentence_ends():
    assert word_start_flags(SPM, "▁", False).tolist() == [True] * 4 + [
        True,
        True,
        False,
        True,
        False,
        True,
        False,
        False,
        True,
        True,
        False,
    ]
    assert word_start_flags(JOINER, "￭", True).tolist() == [True] * 4 + [
        True,
        True,
        False,
        True,
        False,
    ]
    assert word_start_flags(SPM, "", False).all()  # no prefix: every token is a word
    assert sentence_end_flags(SPM, "▁").nonzero().flatten().tolist() == [8, 9, 10, 11]


def units(ids, cuts):
    return [tuple(ids[a:b]) for a, b in zip([0] + cuts, cuts + [len(ids)])]


def test_sentence_shuffling_moves_whole_sentences_and_at_most_ceil_n_prob_of_them():
    ends = torch.tensor([False] * 4 + [False, False, True, True])  # words 4, 5; ends 6, 7
    ids = [4, 5, 6, 4, 6, 7, 5, 5, 4, 6, 5]  # sentences: [4 5 6] [4 6 7] [5 5 4 6] [5]
    sentences = units(ids, [3, 6, 10])
    rng = torch.Generator().manual_seed(0)
    assert shuffle_sentences(torch.tensor(ids), ends, 0.0, rng).tolist() == ids
    seen = set()
    for _ in range(300):
        out = shuffle_sentences(torch.tensor(ids), ends, 0.5, rng).tolist()
        order = []
        while out:  # read the output back as a sequence of the input's sentences
            match = [s for s in sentences if tuple(out[: len(s)]) == s]
            assert match, out
            order.append(sentences.index(match[0]))
            out = out[len(match[0]) :]
        assert sorted(order) == [0, 1, 2, 3]
        assert sum(i != s for i, s in enumerate(order)) <= math.ceil(4 * 0.5)
        seen.add(tuple(order))
    assert len(seen) > 6  # 1 unmoved + 6 swaps of two: all reached


def infilled_from(source, output, starts):
    """Whether ``output`` is ``source`` with runs of whole words replaced by one <unk> each and
    <unk>s
    inserted before words: a search over every way to read it so."""
    bounds = set(starts) | {len(source)}

    @functools.lru_cache(maxsize=None)
    def match(i, j):
        if j == len(output):
            return i == len(source)
        if output[j] == UNK_ID:
            if i in bounds and (match(i, j + 1) or any(match(k, j + 1) for k in bounds if k > i)):
                return True
            return False
        return i < len(source) and source[i] == output[j] and match(i + 1, j + 1)

    return match(0, 0)


def test_infilling_replaces_runs_of_whole_words_covering_about_prob_of_them():
    word_start = word_start_flags(SPM, "▁", False)
    rng = torch.Generator().manual_seed(1)
    covered = 0
    words = 0
    masks = 0
    for _ in range(400):
        # 12 words, 2 of 2 pieces each
        source = torch.tensor([4, 5, 6, 7, 12, 13, 14, 4, 5, 6, 7, 9] * 2)
        starts = word_start[source].nonzero().flatten().tolist()
        out = infill(source, word_start, 0.3, UNK_ID, rng).tolist()
        assert infilled_from(tuple(source.tolist()), tuple(out), tuple(starts))
        kept = [t for t in out if t != UNK_ID]
        covered += sum(word_start[torch.tensor(kept, dtype=torch.long)].tolist()) if kept else 0
        words = words + len(starts)
        masks = masks + out.count(UNK_ID)
    removed = 1 - covered / words
    assert 0.2 < removed <= 0.3 and masks > 0  # overlapping spans cover less than asked
    assert infill(torch.tensor([4, 5, 6]), word_start, 0.0, UNK_ID, rng).tolist() == [4, 5, 6]


def test_a_batch_is_noised_sentence_by_sentence_and_padded_again():
    noise = SourceNoise(["sen_shuffling", "infilling"], [1.0, 0.5], SPM, "▁", False)
    src = torch.tensor(
        [[4, 7, 8], [5, 9, 12], [6, 4, 13], [9, 7, PAD_ID], [12, 8, PAD_ID], [13, PAD_ID, PAD_ID]]
    )
    lengths = torch.tensor([6, 5, 3])
    batch = noise.batch(Batch(src.clone(), lengths.clone()), torch.Generator().manual_seed(5))
    rng = torch.Generator().manual_seed(5)
    expected = [noise.sentence(src[:n, b], rng) for b, n in enumerate(lengths.tolist())]
    assert (
        batch.src_lengths.tolist() == [len(s) for s in expected] == batch.src_lengths_cpu.tolist()
    )
    assert batch.src.size(0) == max(batch.src_lengths.tolist())
    for b, sentence in enumerate(expected):
        assert batch.src[: len(sentence), b].tolist() == sentence.tolist()
        assert (batch.src[len(sentence) :, b] == PAD_ID).all()
