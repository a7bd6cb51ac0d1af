import torch

from onmt_lite.data import copy


def test_source_vocab_lists_distinct_words_after_specials():
    assert copy.source_vocab("the cat saw the dog".split()) == [
        "<unk>",
        "<blank>",
        "the",
        "cat",
        "saw",
        "dog",
    ]


def test_copy_ids_point_each_position_into_the_example_vocab():
    src = "the cat saw the dog".split()
    assert copy.copy_ids(src, copy.source_vocab(src)) == [2, 3, 4, 2, 5]


def test_alignment_gives_source_index_for_copyable_words_and_zero_otherwise():
    src = "Obama visited Zagreb".split()
    words = copy.source_vocab(src)
    # "Zagreb" is out of any vocabulary but in the source: index 4; "besuchte" is not in the source:
    # 0
    assert copy.alignment_ids("Obama besuchte Zagreb".split(), words) == [2, 0, 4]
    assert copy.alignment_ids(["<blank>", "<unk>"], words) == [0, 0]


def test_one_hot_src_map_by_hand():
    ids = torch.tensor([[2, 2], [3, 0], [2, 0]])  # [src_len x batch]; example 1 has length 1
    one_hot = copy.one_hot_src_map(ids, torch.tensor([3, 1]), 4)
    expected = torch.zeros(3, 2, 4)
    expected[0, 0, 2] = expected[1, 0, 3] = expected[2, 0, 2] = 1
    expected[0, 1, 2] = 1
    assert torch.equal(one_hot, expected)


def test_target_ids_map_example_words_into_the_target_vocabulary():
    from onmt_lite.data.vocab import Vocab

    words = copy.source_vocab("the Zed cat".split())
    assert copy.target_ids(words, Vocab(["cat", "the"])) == [0, 0, 5, 0, 4]
