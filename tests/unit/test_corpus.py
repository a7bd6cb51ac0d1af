import os

import pytest

from onmt_lite.data.corpus import (
    CorpusStats,
    LengthLimits,
    Tokenizer,
    line_passes,
    read_lines,
    read_once,
    read_parallel,
    require_rereadable,
    tokenized_pairs,
)
from onmt_lite.utils.errors import UserError
from tests.helpers import write_lines


def test_whitespace_runs_and_tabs_never_make_empty_tokens():
    assert Tokenizer()("v r h  l e d e n o g\t\tb r i j e g a \r\n") == list("vrhledenog") + list(
        "brijega"
    )


def test_lower():
    assert Tokenizer(lower=True)("Hello WORLD") == ["hello", "world"]


def test_invalid_utf8_names_file_line_and_byte(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"fine\nab\xffc\n")
    with pytest.raises(UserError, match=r"bad.txt:2: not valid UTF-8 \(byte 0xff at column 3\)"):
        list(read_lines(str(path)))


def test_nul_byte_is_refused_with_line(tmp_path):
    path = tmp_path / "nul.txt"
    path.write_bytes(b"a\nb\x00c\n")
    with pytest.raises(UserError, match=r"nul.txt:2: contains a NUL byte"):
        list(read_lines(str(path)))


def test_missing_file(tmp_path):
    with pytest.raises(UserError, match=r"missing.txt: cannot open"):
        list(read_lines(str(tmp_path / "missing.txt")))


@pytest.mark.parametrize("n_src,n_tgt", [(3, 5), (5, 3)])
def test_parallel_files_of_different_lengths_name_both_counts(tmp_path, n_src, n_tgt):
    src = write_lines(tmp_path / "s.txt", ["a"] * n_src)
    tgt = write_lines(tmp_path / "t.txt", ["b"] * n_tgt)
    with pytest.raises(UserError) as err:
        list(read_parallel(src, tgt))
    assert f"s.txt has {n_src} lines" in str(err.value) and f"t.txt has {n_tgt}" in str(err.value)


def test_empty_lines_are_skipped_and_counted_and_lengths_filtered_or_truncated(tmp_path):
    src = write_lines(tmp_path / "s.txt", ["a b", "", "a b c d", "a", "  "])
    tgt = write_lines(tmp_path / "t.txt", ["x", "y", "x", "x y z w v", "x"])
    stats = CorpusStats()
    kept = list(
        tokenized_pairs(
            src, tgt, Tokenizer(), Tokenizer(), LengthLimits(src_max=3, tgt_max=3), stats
        )
    )
    assert [n for n, _, _ in kept] == [1]
    assert (stats.read, stats.kept, stats.empty, stats.too_long) == (5, 1, 2, 2)
    stats = CorpusStats()
    kept = list(
        tokenized_pairs(src, tgt, Tokenizer(), Tokenizer(), LengthLimits(3, 3, 3, 3), stats)
    )
    assert [(n, s, t) for n, s, t in kept][1:] == [
        (3, ["a", "b", "c"], ["x"]),
        (4, ["a"], ["x", "y", "z"]),
    ]
    assert (stats.kept, stats.truncated, stats.too_long) == (3, 2, 0)


def test_sentencepiece_tokenizer(tmp_path):
    sentencepiece = pytest.importorskip("sentencepiece")
    text = write_lines(
        tmp_path / "train.txt", ["the house is small", "the cat is in the house"] * 50
    )
    sentencepiece.SentencePieceTrainer.train(
        input=text,
        model_prefix=str(tmp_path / "m"),
        vocab_size=18,
        hard_vocab_limit=False,
        minloglevel=2,
    )
    tokenizer = Tokenizer(str(tmp_path / "m.model"))
    pieces = tokenizer("the house")
    assert "".join(pieces).replace("\u2581", " ").strip() == "the house"
    with pytest.raises(UserError, match="not found"):
        Tokenizer(str(tmp_path / "none.model"))


def test_a_byte_order_mark_is_not_part_of_the_first_word(tmp_path):
    path = tmp_path / "bom.txt"
    path.write_bytes("\ufeffh e l l o\nw o r l d\n\ufeffx\n".encode("utf-8"))
    lines = [text for _, text in read_lines(path)]
    assert lines == ["h e l l o\n", "w o r l d\n", "\ufeffx\n"]  # only the file's start is a BOM
    assert Tokenizer()(lines[0])[0] == "h"


def test_pipes_and_standard_input_are_read_once_and_their_lines_kept_for_a_second_pass(tmp_path):
    path = write_lines(tmp_path / "a.txt", ["x y", "z"])
    os.mkfifo(tmp_path / "fifo")
    os.symlink(tmp_path / "fifo", tmp_path / "link")
    once = ["-", str(tmp_path / "fifo"), str(tmp_path / "link")]
    again = [path, os.devnull, str(tmp_path), str(tmp_path / "missing")]
    assert [read_once(p) for p in once + again] == [True] * 3 + [False] * 4
    with pytest.raises(UserError, match=r"^-x .*fifo: can be read only once .*, and why; give"):
        require_rereadable(str(tmp_path / "fifo"), "-x", "why")
    require_rereadable(path, "-x", "why")  # a regular file: no error
    read_end, write_end = os.pipe()
    os.write(write_end, b"x y\nz\n")
    os.close(write_end)
    passes = line_passes(f"/dev/fd/{read_end}")  # a pipe: read at the first pass, then kept
    assert list(passes()) == list(passes()) == [(1, "x y\n"), (2, "z\n")]
    os.close(read_end)
    file_passes = line_passes(path)
    assert list(file_passes()) == list(file_passes()) == [(1, "x y\n"), (2, "z\n")]
