#!/usr/bin/env python
"""Count the words of text files and write a vocabulary file for ``onmt_lite_preprocess -src_vocab``.

    python tools/create_vocabulary.py -file src-train.txt -out_file src.vocab -size 50000

Words are the whitespace-separated tokens of the UTF-8 input files. The output has one ``word count``
a line, most frequent first, ties in alphabetical order (by code point); the special tokens
``<unk> <blank> <s> </s>`` are left out (preprocessing adds them itself).
"""
from __future__ import annotations

import collections

from onmt_lite.data.corpus import read_lines
from onmt_lite.data.vocab import SPECIALS
from onmt_lite.opts import OptionParser, add, int_at_least, parse
from onmt_lite.utils.errors import UserError, run_command
from onmt_lite.utils.files import require_file_path, write_text

PROG = "create_vocabulary.py"


def build_parser():
    """The option parser of create_vocabulary.py."""
    parser = OptionParser(PROG, "Write the most frequent words of text files as a vocabulary file.")
    group = parser.add_argument_group("Vocabulary")
    add(group, "file", required=True, nargs="+", help="UTF-8 text files, tokens separated by whitespace")
    add(group, "out_file", required=True, help="The vocabulary file to write (word count, one a line)")
    add(group, "size", type=int_at_least(0), default=0, help="Keep at most this many words; 0 keeps all")
    add(group, "min_frequency", type=int_at_least(1), default=1,
        help="Keep only words seen at least this many times")
    return parser


def count_files(paths):
    """A Counter of the whitespace tokens of the files ``paths``."""
    counter = collections.Counter()
    for path in paths:
        for _, text in read_lines(path):
            counter.update(text.split())
    return counter


def ranked_words(counter, size=0, min_frequency=1):
    """``[(word, count)]``: most frequent first, ties alphabetical, specials left out."""
    ranked = sorted((-n, w) for w, n in counter.items() if n >= min_frequency and w not in SPECIALS)
    if size:
        ranked = ranked[:size]
    return [(w, -n) for n, w in ranked]


@run_command(PROG)
def main(argv: list[str] | None = None) -> None:
    """Run create_vocabulary.py with ``argv`` (default: the command line)."""
    opt = parse(build_parser(), argv)
    require_file_path(opt.out_file, "-out_file")
    counter = count_files(opt.file)
    words = ranked_words(counter, opt.size, opt.min_frequency)
    if not words:
        raise UserError(f"no word is seen at least {opt.min_frequency} times in {', '.join(opt.file)}")
    write_text(opt.out_file, "".join(f"{w} {n}\n" for w, n in words))
    print(f"wrote {len(words)} of {len(counter)} distinct words to {opt.out_file}")


if __name__ == "__main__":
    main()
