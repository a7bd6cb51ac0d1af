#!/usr/bin/env python
"""Write a vocabulary file for ``onmt_lite_preprocess -src_vocab``, from text or from a preprocessed
vocabulary.

    python tools/create_vocabulary.py -file src-train.txt -out_file src.vocab -size 50000
    python tools/create_vocabulary.py -file_type field -file data/demo.vocab.pt -side src \
        -out_file src.vocab

``-file_type text`` (the default): words are the whitespace-separated tokens of the UTF-8 input
files. The output has one ``word count`` a line, most frequent first, ties in alphabetical order (by
code point). ``-file_type field`` (as in OpenNMT-py 1.x): ``-file`` is one ``PREFIX.vocab.pt`` of
onmt_lite_preprocess and the output is the ``-side`` (src or tgt) vocabulary, one word a line in id
order (the file holds no counts; ``-size`` keeps the first words). Either way the special tokens
``<unk> <blank> <s> </s>`` are left out (preprocessing adds them itself), so that preprocessing with
the output as ``-src_vocab``/``-tgt_vocab`` gives the same vocabulary.
"""

from __future__ import annotations

import collections

from onmt_lite.data.corpus import read_lines
from onmt_lite.data.vocab import SPECIALS
from onmt_lite.opts import OptionParser, add, choice, int_at_least, parse
from onmt_lite.utils.errors import UserError, run_command
from onmt_lite.utils.files import write_text
from onmt_lite.utils.output_paths import require_file_path, require_outputs_not_inputs

PROG = "create_vocabulary.py"
FILE_TYPES = ("text", "field")
SIDES = ("src", "tgt")


def build_parser():
    """The option parser of create_vocabulary.py."""
    parser = OptionParser(PROG, "Write the most frequent words of text files as a vocabulary file.")
    group = parser.add_argument_group("Vocabulary")
    add(
        group,
        "file_type",
        default="text",
        type=choice("file_type", FILE_TYPES),
        help="text: count the words of text files; field: the -side vocabulary of one "
        "PREFIX.vocab.pt file of onmt_lite_preprocess",
    )
    add(
        group,
        "file",
        required=True,
        nargs="+",
        help="UTF-8 text files, tokens separated by whitespace (-file_type text), or one "
        "PREFIX.vocab.pt (-file_type field)",
    )
    add(
        group,
        "side",
        type=choice("side", SIDES),
        help="With -file_type field: the vocabulary to write, src or tgt",
    )
    add(
        group,
        "out_file",
        required=True,
        help="The vocabulary file to write (word count, one a line)",
    )
    add(
        group,
        "size",
        type=int_at_least(0),
        default=0,
        help="Keep at most this many words; 0 keeps all",
    )
    add(
        group,
        "min_frequency",
        type=int_at_least(1),
        default=1,
        help="Keep only words seen at least this many times",
    )
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


def field_words(opt):
    """``[word]`` of the ``-side`` vocabulary of the vocabulary file ``-file`` (specials left
    out)."""
    if len(opt.file) != 1:
        raise UserError(
            f"-file_type field reads one vocabulary file; got {len(opt.file)}: {' '.join(opt.file)}"
        )
    if opt.side is None:
        raise UserError("-file_type field needs -side src or -side tgt")
    if opt.min_frequency != 1:
        raise UserError("-min_frequency needs word counts, which -file_type field does not have")
    # imported here, so that -file_type text does not load torch
    from onmt_lite.data.shards import VOCAB_FORMAT, load_plain

    path = opt.file[0]
    itos = load_plain(path, VOCAB_FORMAT, "vocabulary file (from onmt_lite_preprocess)").get(
        opt.side
    )
    if not isinstance(itos, list) or list(itos[: len(SPECIALS)]) != list(SPECIALS):
        raise UserError(f"{path}: no {opt.side} vocabulary starting with {' '.join(SPECIALS)}")
    words = [w for w in itos[len(SPECIALS) :] if w not in SPECIALS]
    return words[: opt.size] if opt.size else words


@run_command(PROG)
def main(argv: list[str] | None = None) -> None:
    """Run create_vocabulary.py with ``argv`` (default: the command line)."""
    opt = parse(build_parser(), argv)
    require_file_path(opt.out_file, "-out_file")
    read = [("-file", path) for path in opt.file]
    require_outputs_not_inputs([("-out_file", opt.out_file)], read)  # a corpus is never replaced
    if opt.file_type == "field":
        words = field_words(opt)
        if not words:
            raise UserError(f"{opt.file[0]}: the {opt.side} vocabulary has only the special tokens")
        write_text(opt.out_file, "".join(f"{w}\n" for w in words))
        print(f"wrote the {len(words)} {opt.side} words of {opt.file[0]} to {opt.out_file}")
        return
    counter = count_files(opt.file)
    words = ranked_words(counter, opt.size, opt.min_frequency)
    if not words:
        raise UserError(
            f"no word is seen at least {opt.min_frequency} times in {', '.join(opt.file)}"
        )
    write_text(opt.out_file, "".join(f"{w} {n}\n" for w, n in words))
    print(f"wrote {len(words)} of {len(counter)} distinct words to {opt.out_file}")


if __name__ == "__main__":
    main()
