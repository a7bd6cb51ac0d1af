import collections

import pytest

from onmt_lite.data.vocab import BOS_ID, EOS_ID, PAD_ID, SPECIALS, UNK_ID, Vocab
from onmt_lite.utils.errors import UserError
from tests.helpers import write_lines


def test_specials_have_fixed_ids():
    vocab = Vocab(["a", "b"])
    assert vocab.itos[:4] == ["<unk>", "<blank>", "<s>", "</s>"]
    assert (vocab.stoi["<unk>"], vocab.stoi["<blank>"], vocab.stoi["<s>"], vocab.stoi["</s>"]) == (
        UNK_ID,
        PAD_ID,
        BOS_ID,
        EOS_ID,
    )
    assert vocab.stoi["a"] == 4 and vocab.stoi["b"] == 5


def test_from_counter_ranks_by_frequency_then_alphabet_and_applies_limits():
    counter = collections.Counter({"c": 5, "a": 2, "b": 2, "d": 1, "<s>": 9})
    assert Vocab.from_counter(counter, 10).itos[4:] == ["c", "a", "b", "d"]
    assert Vocab.from_counter(counter, 2).itos[4:] == ["c", "a"]
    assert Vocab.from_counter(counter, 10, min_frequency=2).itos[4:] == ["c", "a", "b"]


def test_numericalize_maps_unknown_words_to_unk():
    vocab = Vocab(["x"])
    assert vocab.numericalize(["x", "y"]) == [4, UNK_ID]
    assert vocab.to_words([4, 0]) == ["x", "<unk>"]


def test_from_file_takes_first_field_and_caps_size(tmp_path):
    path = write_lines(tmp_path / "v.txt", ["the 100", "house\t7", "", "cat"])
    assert Vocab.from_file(path, 0).itos[4:] == ["the", "house", "cat"]
    assert Vocab.from_file(path, 2).itos[4:] == ["the", "house"]


def test_from_file_caps_distinct_words_not_lines(tmp_path):
    path = write_lines(tmp_path / "v.txt", ["a 3", "a 1", "b", "c"])  # a word twice
    assert Vocab.from_file(path, 2).itos[4:] == ["a", "b"]  # it gave ["a"], the first two lines
    vocab = Vocab.from_file(path, 0)
    assert vocab.truncated(0) is vocab and vocab.truncated(3) is vocab
    assert vocab.truncated(1).itos[4:] == ["a"]


def test_from_file_reports_bad_utf8_with_line(tmp_path):
    path = tmp_path / "v.txt"
    path.write_bytes(b"ok\n\xff\xfe\n")
    with pytest.raises(UserError, match=r"v.txt:2: not valid UTF-8"):
        Vocab.from_file(str(path), 0)


def test_plain_round_trip_and_rejects_foreign_lists():
    vocab = Vocab(["a", "b"])
    assert Vocab.from_plain(vocab.to_plain()) == vocab
    with pytest.raises(UserError):
        Vocab.from_plain(["a", "b"] + list(SPECIALS))


@pytest.mark.parametrize("words,multiple,size", [(5, 8, 16), (4, 8, 8), (0, 3, 6), (7, 1, 11)])
def test_padding_to_a_multiple_appends_1x_filler_words_and_keeps_the_ids(words, multiple, size):
    vocab = Vocab([f"w{i}" for i in range(words)])
    padded = vocab.padded_to_multiple(multiple)
    assert len(padded.itos) == size and len(padded.itos) % multiple == 0
    assert padded.itos[: len(vocab.itos)] == vocab.itos  # every id means what it meant
    assert padded.itos[len(vocab.itos) :] == [
        f"averyunlikelytoken{i}" for i in range(size - len(vocab.itos))
    ]
    assert (padded is vocab) == (size == len(vocab.itos))
