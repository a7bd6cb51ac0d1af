"""onmt_lite.data.parallel: the pairs of several worker processes equal one process's, in order."""

import functools

import pytest

from onmt_lite.data import parallel
from onmt_lite.data.corpus import CorpusStats, LengthLimits, Tokenizer
from onmt_lite.data.example import make_example
from onmt_lite.data.vocab import Vocab
from onmt_lite.utils.errors import UserError
from tests.helpers import write_lines


def sentences(n, seed):
    import random

    rng = random.Random(seed)
    return [
        " ".join(rng.choice("abcdefgh") * rng.randint(1, 3) for _ in range(rng.randint(0, 9)))
        for _ in range(n)
    ]


def pairs_and_stats(src, tgt, tokenizers, limits, processes, finish=None):
    stats = CorpusStats()
    return list(
        parallel.corpus_pairs(src, tgt, *tokenizers, limits, stats, processes, finish)
    ), stats


@pytest.fixture
def small_chunks(monkeypatch):
    # 200 lines: 29 chunks, more than the workers hold
    monkeypatch.setattr(parallel, "CHUNK_LINES", 7)


def test_workers_yield_the_pairs_and_counts_of_one_process(tmp_path, small_chunks):
    src = write_lines(tmp_path / "s.txt", sentences(200, 1))
    tgt = write_lines(tmp_path / "t.txt", sentences(200, 2))
    limits = LengthLimits(src_trunc=7, src_max=6, tgt_max=5)
    expected = []
    expected_stats = CorpusStats()
    # the filter written out
    for lineno, (s, t) in enumerate(zip(sentences(200, 1), sentences(200, 2)), 1):
        s = s.split()
        t = t.split()
        expected_stats.read += 1
        if not s or not t:
            expected_stats.empty += 1
            continue
        if len(s) > 7:
            expected_stats.truncated = expected_stats.truncated + 1
            s = s[:7]
        if len(s) > 6 or len(t) > 5:
            expected_stats.too_long += 1
            continue
        expected_stats.kept += 1
        expected.append((lineno, s, t))
    for processes in (1, 3):
        assert pairs_and_stats(src, tgt, (Tokenizer(), Tokenizer()), limits, processes) == (
            expected,
            expected_stats,
        )


def test_workers_finish_examples_with_a_sentencepiece_model(tmp_path, small_chunks):
    sentencepiece = pytest.importorskip("sentencepiece")
    text = sentences(200, 3)
    src = write_lines(tmp_path / "s.txt", text)
    sentencepiece.SentencePieceTrainer.train(
        input=src,
        model_prefix=str(tmp_path / "m"),
        vocab_size=30,
        hard_vocab_limit=False,
        minloglevel=2,
    )
    tokenizer = Tokenizer(str(tmp_path / "m.model"), lower=True)
    vocab = Vocab(sorted({piece for line in text for piece in tokenizer(line)}))
    finish = functools.partial(make_example, src_vocab=vocab, tgt_vocab=vocab, dynamic_dict=True)
    one, stats_one = pairs_and_stats(src, src, (tokenizer, tokenizer), LengthLimits(), 1, finish)
    three, stats_three = pairs_and_stats(
        src, src, (tokenizer, tokenizer), LengthLimits(), 3, finish
    )
    assert (
        three == one
        and stats_three == stats_one
        and len(one) == sum(1 for line in text if line.strip())
    )
    assert [ex["src"] for ex in one] == [
        vocab.numericalize(tokenizer(line)) for line in text if line.strip()
    ]


def test_a_bad_line_read_while_workers_run_names_its_file_and_line(tmp_path, small_chunks):
    src = tmp_path / "s.txt"
    src.write_bytes(b"a b\n" * 150 + b"a \xff b\n" + b"a\n" * 49)
    tgt = write_lines(tmp_path / "t.txt", ["x"] * 200)
    with pytest.raises(UserError, match=r"s.txt:151: not valid UTF-8"):
        pairs_and_stats(str(src), tgt, (Tokenizer(), Tokenizer()), LengthLimits(), 3)
