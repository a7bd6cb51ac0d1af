"""data/vocab_building.py: the vocabularies preprocessing builds from files or the data's counts,
1.x's rules for -share_vocab and vocabulary files, and a warning for each option they leave idle."""

from collections import Counter

import pytest
import torch

from onmt_lite.data.shards import VOCAB_FORMAT
from onmt_lite.data.vocab import Vocab
from onmt_lite.data.vocab_building import build_vocabs, idle_vocabulary_options
from onmt_lite.opts import build_parser, parse, preprocess_opts
from onmt_lite.utils.errors import UserError

SRC = Counter({"a": 5, "b": 3, "c": 1})
TGT = Counter({"x": 4, "b": 2, "y": 1})
FEATS = [Counter({"N": 6, "V": 2, "A": 1})]


def options(*args):
    required = ["-train_src", "s.txt", "-train_tgt", "t.txt", "-save_data", "out"]
    return parse(build_parser("test", [preprocess_opts]), [*required, *map(str, args)])


def counts():
    return SRC, TGT, FEATS


def words(vocab):
    return vocab.itos[4:]


def warnings(logged):
    return [message for message in logged if "has no effect" in message or "kept" in message]


def test_a_vocabulary_shared_from_the_data_takes_the_sources_limits_as_1x(logged):
    """1.x merged both sides' counts under -src_vocab_size and -src_words_min_frequency; the
    target's were idle (onmt_lite took the larger minimum frequency: here 'x' and 'b' were lost)."""
    opt = options("-share_vocab", "-src_words_min_frequency", 4, "-tgt_words_min_frequency", 6)
    src, tgt, _ = build_vocabs(opt, counts)
    assert src is tgt and words(src) == ["a", "b", "x"]  # b: 3 + 2
    assert warnings(logged) == [
        "-tgt_words_min_frequency 6 has no effect: with -share_vocab the shared vocabulary takes "
        "the source's -src_vocab_size and -src_words_min_frequency"
    ]


def test_a_shared_vocabulary_is_cut_at_the_sources_size(logged):
    opt = options("-share_vocab", "-src_vocab_size", 2, "-tgt_vocab_size", 9)
    src, _, _ = build_vocabs(opt, counts)
    assert words(src) == ["a", "b"]
    assert warnings(logged) == [
        "-tgt_vocab_size 9 has no effect: with -share_vocab the shared vocabulary takes the "
        "source's -src_vocab_size and -src_words_min_frequency"
    ]


def test_a_vocabulary_file_is_taken_as_it_is_but_cut_at_its_size_with_a_warning(tmp_path, logged):
    path = tmp_path / "src.vocab"
    path.write_text("w1 10\nw2 1\nw3\nw2\nw4\n", encoding="utf-8")
    src, tgt, _ = build_vocabs(options("-src_vocab", path, "-src_words_min_frequency", 5), counts)
    assert words(src) == ["w1", "w2", "w3", "w4"]  # the counts beside words are not read
    assert words(tgt) == ["x", "b", "y"]  # the target from the data
    assert warnings(logged) == [
        f"-src_words_min_frequency 5 has no effect: the words of the file {path} are taken as "
        "they are"
    ]
    logged.clear()
    src, _, _ = build_vocabs(options("-src_vocab", path, "-src_vocab_size", 3), counts)
    assert words(src) == ["w1", "w2", "w3"]  # three words, not three lines
    assert warnings(logged) == [
        f"{path}: 4 words, the first 3 kept (-src_vocab_size 3; -src_vocab_size 0 keeps them all)"
    ]
    logged.clear()
    src, _, _ = build_vocabs(options("-src_vocab", path, "-src_vocab_size", 0), counts)
    assert words(src) == ["w1", "w2", "w3", "w4"] and warnings(logged) == []


def test_two_files_need_no_counts_and_a_shared_file_vocabulary_reads_no_minimum(tmp_path, logged):
    src_path = tmp_path / "src.vocab"
    tgt_path = tmp_path / "tgt.vocab"
    src_path.write_text("a\nb\n", encoding="utf-8")
    tgt_path.write_text("b\nz\n", encoding="utf-8")

    def no_counts():
        raise AssertionError("the data was counted")

    src, tgt, _ = build_vocabs(options("-src_vocab", src_path, "-tgt_vocab", tgt_path), no_counts)
    assert (words(src), words(tgt)) == (["a", "b"], ["b", "z"])
    args = ["-share_vocab", "-src_vocab", src_path, "-tgt_vocab", tgt_path]
    src, tgt, _ = build_vocabs(options(*args, "-tgt_words_min_frequency", 2), no_counts)
    assert src is tgt and words(src) == ["a", "b", "z"]
    src, tgt, _ = build_vocabs(
        options("-share_vocab", "-src_vocab", src_path, "-tgt_words_min_frequency", 3), no_counts
    )
    assert src is tgt and words(src) == ["a", "b"]  # the target's words are the source file's
    assert warnings(logged) == [
        f"-tgt_words_min_frequency {n} has no effect: the words of the file {path} are taken as "
        "they are"
        for n, path in ((2, tgt_path), (3, src_path))
    ]


def test_the_sources_minimum_frequency_counts_the_features_of_a_file_vocabulary(tmp_path):
    """With -src_vocab and word features counted from the data, -src_words_min_frequency is not
    idle: the features' vocabularies take it (as 1.x)."""
    path = tmp_path / "src.vocab"
    path.write_text("a\n", encoding="utf-8")
    opt = options("-src_vocab", path, "-src_words_min_frequency", 2)
    _, _, feats = build_vocabs(opt, counts, n_feats=1)
    assert words(feats[0]) == ["N", "V"]
    assert idle_vocabulary_options(opt, n_feats=1) == []
    assert len(idle_vocabulary_options(opt, n_feats=0)) == 1


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["-share_vocab", "-src_vocab_size", 3, "-src_words_min_frequency", 2],
        ["-src_vocab_size", 3, "-tgt_vocab_size", 2, "-tgt_words_min_frequency", 2],
    ],
)
def test_options_that_act_give_no_warning(args, logged):
    build_vocabs(options(*args), counts)
    assert warnings(logged) == []


def no_counts():
    raise AssertionError("the data was counted")


def earlier_run(path, src, tgt, feats=()):
    """A PREFIX.vocab.pt as an earlier preprocessing run wrote it (the fields this reads)."""
    plain = {
        "format": VOCAB_FORMAT,
        "src": Vocab(src).to_plain(),
        "tgt": Vocab(tgt).to_plain(),
        "src_feats": [Vocab(words).to_plain() for words in feats],
    }
    torch.save(plain, path)
    return path


def test_an_earlier_runs_vocabulary_file_gives_every_vocabulary_as_it_is_as_1x(tmp_path, logged):
    """1.x's -src_vocab took the vocab.pt of an earlier run: its vocabularies, source, target and
    features, as they were; the sizes, minimum frequencies and -tgt_vocab are then idle, and
    -vocab_size_multiple still pads."""
    path = earlier_run(tmp_path / "old.vocab.pt", ["p", "q", "r"], ["u", "v"], [["N", "V"]])
    args = ["-src_vocab", path, "-src_vocab_size", 1, "-tgt_vocab", tmp_path / "unread.txt"]
    src, tgt, feats = build_vocabs(options(*args), no_counts, n_feats=1)
    assert (words(src), words(tgt), [words(v) for v in feats]) == (
        ["p", "q", "r"],
        ["u", "v"],
        [["N", "V"]],
    )
    idle = "is an earlier run's vocabulary file, whose vocabularies are taken as they are (as 1.x)"
    assert warnings(logged) == [
        f"-tgt_vocab {tmp_path / 'unread.txt'} has no effect: -src_vocab {path} {idle}",
        f"-src_vocab_size 1 has no effect: -src_vocab {path} {idle}",
    ]
    padded, _, _ = build_vocabs(
        options("-src_vocab", path, "-vocab_size_multiple", 8), no_counts, n_feats=1
    )
    assert len(padded) == 8 and words(padded)[:3] == ["p", "q", "r"]


def test_an_earlier_shared_vocabulary_stays_one_and_other_torch_files_are_refused(tmp_path):
    shared = earlier_run(tmp_path / "shared.vocab.pt", ["a", "b"], ["a", "b"])
    src, tgt, _ = build_vocabs(options("-src_vocab", shared), no_counts)
    assert src is tgt and words(src) == ["a", "b"]
    with pytest.raises(UserError, match="its run's data had 0 source word feature"):
        build_vocabs(options("-src_vocab", shared), no_counts, n_feats=1)
    other = tmp_path / "weights.pt"
    torch.save({"format": "something else"}, other)
    with pytest.raises(UserError, match="neither an onmt_lite nor a 1.x vocabulary file"):
        build_vocabs(options("-src_vocab", other), no_counts)
