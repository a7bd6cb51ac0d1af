"""Source word features in preprocessing: the feature vocabularies against a hand count, the shards'
feature ids against a hand mapping, batches, and the refusals (feature counts, target features,
spm)."""

import collections
import os

import pytest
import torch

from onmt_lite.data.batch import ShardView
from onmt_lite.data.shards import load_plain, load_shard
from onmt_lite.opts import build_parser, config_opts, parse, preprocess_opts
from onmt_lite.preprocess import preprocess
from onmt_lite.utils.errors import UserError
from tests.helpers import write_lines

S = "\uffe8"
SRC = [
    f"the{S}DET{S}a cat{S}NOUN{S}b sat{S}VERB{S}a",
    f"a{S}DET{S}b dog{S}NOUN{S}b",
    f"cat{S}NOUN{S}c",
]
TGT = ["le chat", "un chien", "chat"]


def run_preprocess(tmp_path, src=SRC, tgt=TGT, *extra):
    paths = [write_lines(tmp_path / "src.txt", src), write_lines(tmp_path / "tgt.txt", tgt)]
    prefix = str(tmp_path / "data")
    opt = parse(
        build_parser("p", [config_opts, preprocess_opts]),
        [
            "-train_src",
            paths[0],
            "-train_tgt",
            paths[1],
            "-valid_src",
            paths[0],
            "-valid_tgt",
            paths[1],
            "-save_data",
            prefix,
            "-overwrite",
            "-shuffle",
            "0",
            *extra,
        ],
    )
    preprocess(opt)
    return prefix


def hand_vocab(column_values):
    """Specials, then the values by decreasing count, ties alphabetically (written out here)."""
    counts = collections.Counter(column_values)
    return ["<unk>", "<blank>", "<s>", "</s>"] + sorted(counts, key=lambda v: (-counts[v], v))


def test_feature_vocabularies_are_counted_per_feature_and_words_lose_their_features(tmp_path):
    record = load_plain(run_preprocess(tmp_path) + ".vocab.pt", "onmt_lite.vocab.v1", "vocab file")
    assert record["src_feats"][0] == hand_vocab(["DET", "NOUN", "VERB", "DET", "NOUN", "NOUN"])
    assert record["src_feats"][1] == hand_vocab(["a", "b", "a", "b", "b", "c"])
    assert record["src"][4:] == ["cat", "a", "dog", "sat", "the"]


def test_shards_hold_each_tokens_feature_ids_by_a_hand_mapping(tmp_path):
    prefix = run_preprocess(tmp_path)
    shard = load_shard(prefix + ".train.0.pt")
    pos = {v: i for i, v in enumerate(hand_vocab(["DET", "NOUN", "VERB", "DET", "NOUN", "NOUN"]))}
    letter = {v: i for i, v in enumerate(hand_vocab(["a", "b", "a", "b", "b", "c"]))}
    tokens = [token.split(S) for line in SRC for token in line.split()]
    assert shard["src_feats"].tolist() == [
        [pos[t[1]] for t in tokens],
        [letter[t[2]] for t in tokens],
    ]
    batch = ShardView(shard).batch([0, 2])
    assert batch.src_feats.shape == (3, 2, 2)
    assert batch.src_feats[:, 1, 0].tolist() == [pos["NOUN"], 1, 1]  # padded with <blank>
    assert batch.src_feats[:, 0, 1].tolist() == [letter["a"], letter["b"], letter["a"]]


def test_a_corpus_without_features_has_no_feature_data(tmp_path):
    prefix = run_preprocess(tmp_path, ["a b", "c"], ["x y", "z"])
    assert load_plain(prefix + ".vocab.pt", "onmt_lite.vocab.v1", "vocab file")["src_feats"] == []
    shard = load_shard(prefix + ".train.0.pt")
    assert "src_feats" not in shard and ShardView(shard).batch([0]).src_feats is None


@pytest.mark.parametrize(
    "bad_line, message",
    [
        (
            f"dog{S}NOUN{S}b sat{S}VERB",
            r"src\.txt:2: token 2 .* has 1 word feature\(s\) where the corpus's tokens have 2",
        ),
        (f"dog{S}NOUN{S}b{S}x", r"src\.txt:2: token 1 .* has 3 word feature"),
        ("dog", r"src\.txt:2: token 1 .* has 0 word feature"),
    ],
)
def test_a_line_with_another_number_of_features_is_refused_naming_its_line(
    tmp_path, bad_line, message
):
    with pytest.raises(UserError, match=message):
        run_preprocess(tmp_path, [SRC[0], bad_line, SRC[2]])


def test_features_after_a_first_line_without_them_are_refused(tmp_path):
    with pytest.raises(
        UserError, match=r"src\.txt:2: token 1 .* has 1 word feature\(s\) where .* have 0"
    ):
        run_preprocess(tmp_path, ["a b", f"c{S}X"], ["x", "y"])


def test_target_features_are_refused_naming_the_target_line(tmp_path):
    with pytest.raises(
        UserError, match=r"tgt\.txt:3: target token 1 .* only the source side may have features"
    ):
        run_preprocess(tmp_path, SRC, ["le chat", "un chien", f"chat{S}N"])


def test_sentencepiece_with_features_is_refused(tmp_path):
    with pytest.raises(UserError, match=r"-src_spm with word features"):
        run_preprocess(tmp_path, SRC, TGT, "-src_spm", os.devnull)


def test_features_with_copy_data_copy_the_words(tmp_path):
    prefix = run_preprocess(tmp_path, SRC, ["cat the", "dog", "cat"], "-dynamic_dict")
    shard = load_shard(prefix + ".train.0.pt")
    assert shard["src_ex_vocab"][0] == ["<unk>", "<blank>", "the", "cat", "sat"]
    # "cat the": indices of the words in that vocabulary
    assert shard["alignment"][:2].tolist() == [
        3,
        2,
    ]
    assert torch.equal(shard["src_lengths"], torch.tensor([3, 2, 1]))


def test_features_vocabs_prefix_reads_each_features_vocabulary_from_its_file(tmp_path):
    # Lua OpenNMT's dict files: a word and its id a line, the specials among them
    write_lines(
        tmp_path / "given.source_feature_1.dict",
        ["<blank> 1", "<unk> 2", "VERB 3", "ADJ 4", "NOUN 5"],
    )
    write_lines(tmp_path / "given.source_feature_2.dict", ["c", "a"])
    prefix = run_preprocess(tmp_path, SRC, TGT, "-features_vocabs_prefix", str(tmp_path / "given"))
    record = load_plain(prefix + ".vocab.pt", "onmt_lite.vocab.v1", "vocab file")
    specials = ["<unk>", "<blank>", "<s>", "</s>"]
    assert record["src_feats"] == [specials + ["VERB", "ADJ", "NOUN"], specials + ["c", "a"]]
    # the words still counted from the data
    assert record["src"][4:] == [
        "cat",
        "a",
        "dog",
        "sat",
        "the",
    ]
    tokens = [token.split(S) for line in SRC for token in line.split()]
    ids = load_shard(prefix + ".train.0.pt")["src_feats"].tolist()
    # DET is not in the file: <unk>
    assert ids[0] == [{"VERB": 4, "NOUN": 6}.get(t[1], 0) for t in tokens]
    assert ids[1] == [{"c": 4, "a": 5}.get(t[2], 0) for t in tokens]


def test_features_vocabs_prefix_refuses_a_missing_file_and_data_without_features(tmp_path):
    write_lines(tmp_path / "given.source_feature_1.dict", ["DET"])
    with pytest.raises(
        UserError, match=r"given\.source_feature_2\.dict: cannot read vocabulary file"
    ):
        run_preprocess(tmp_path, SRC, TGT, "-features_vocabs_prefix", str(tmp_path / "given"))
    assert not os.path.exists(tmp_path / "data.vocab.pt")
    with pytest.raises(
        UserError, match=r"-features_vocabs_prefix .*src\.txt has no source word features"
    ):
        run_preprocess(tmp_path, ["a b"], ["x"], "-features_vocabs_prefix", str(tmp_path / "given"))


def test_num_threads_writes_the_same_feature_files_as_one_process(tmp_path, monkeypatch):
    from onmt_lite.data import parallel

    monkeypatch.setattr(parallel, "CHUNK_LINES", 4)  # 30 lines: 8 chunks over 3 workers
    src = (SRC * 10)[:-1] + [f"dog{S}NOUN{S}b sat{S}VERB{S}c"]
    tgt = (TGT * 10)[:-1] + ["chien"]
    files = {}
    for threads in ("1", "3"):
        (tmp_path / threads).mkdir()
        prefix = run_preprocess(tmp_path / threads, src, tgt, "-num_threads", threads)
        suffixes = (".vocab.pt", ".train.0.pt")
        files[threads] = [open(prefix + suffix, "rb").read() for suffix in suffixes]
    assert files["3"] == files["1"]
    n_tokens = sum(len(line.split()) for line in src)
    assert load_shard(str(tmp_path / "3" / "data.train.0.pt"))["src_feats"].shape == (2, n_tokens)
    with pytest.raises(UserError, match=r"src\.txt:25: token 1 .* has 1 word feature"):
        run_preprocess(
            tmp_path, SRC * 8 + [f"dog{S}NOUN"] + SRC, TGT * 9 + TGT[:1], "-num_threads", "3"
        )


@pytest.mark.parametrize(
    "bad_line, message",
    [
        (f"{S}A b{S}B", r"token 1 \('\uffe8A'\) has an empty word"),
        (f"a{S}A b{S}", r"token 2 \('b\uffe8'\) has an empty value of feature 1"),
    ],
)
def test_a_token_with_an_empty_word_or_feature_is_refused(tmp_path, bad_line, message):
    # "￨A" splits into ("", "A"): the empty string would become a vocabulary word
    with pytest.raises(UserError, match=r"src\.txt:2: " + message):
        run_preprocess(tmp_path, [f"a{S}A b{S}B", bad_line], ["x", "y"])
    assert not os.path.exists(tmp_path / "data.vocab.pt")


def test_a_first_token_with_an_empty_word_is_refused(tmp_path):
    with pytest.raises(UserError, match=r"src\.txt:1: token 1 .* has an empty word"):
        run_preprocess(tmp_path, [f"{S}A b{S}B"], ["x"])


@pytest.mark.parametrize("line", [f"{S}A b{S}B", f"a{S}A b{S}"])
def test_translation_input_with_an_empty_word_or_feature_is_refused(line):
    from onmt_lite.data.vocab import Vocab
    from onmt_lite.translate.inputs import TextBatches

    vocabs = {"src": Vocab(["a", "b"]), "tgt": Vocab(["x"]), "src_feats": [Vocab(["A", "B"])]}
    with pytest.raises(UserError, match=r"in\.txt:3: token \d .* has an empty"):
        TextBatches(
            [f"a{S}A", line], None, vocabs, (str.split, str.split), False, where=("in.txt", 2)
        )
