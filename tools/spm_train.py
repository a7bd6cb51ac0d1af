#!/usr/bin/env python
"""Train a sentencepiece model for ``onmt_lite_preprocess -src_spm/-tgt_spm``.

    python tools/spm_train.py -input src-train.txt -model_prefix data/src_spm -vocab_size 8000

Writes ``PREFIX.model`` and ``PREFIX.vocab``. Both are trained under temporary names beside them
and renamed into place only when training succeeded. sentencepiece's own log is not shown; its
errors (such as a ``-vocab_size`` too large for a small corpus) are reported in one line.
"""

from __future__ import annotations

import os

from onmt_lite.data.corpus import read_lines, require_rereadable
from onmt_lite.opts import OptionParser, add, choice, float_in, int_at_least, parse
from onmt_lite.utils.errors import UserError, run_command
from onmt_lite.utils.output_paths import require_directory

PROG = "spm_train.py"
MODEL_TYPES = ("unigram", "bpe", "char", "word")
SUFFIXES = (".model", ".vocab")


def build_parser():
    """The option parser of spm_train.py."""
    parser = OptionParser(PROG, "Train a sentencepiece model (PREFIX.model and PREFIX.vocab).")
    group = parser.add_argument_group("Sentencepiece")
    add(
        group,
        "input",
        required=True,
        nargs="+",
        help="UTF-8 training text files, one sentence a line",
    )
    add(
        group,
        "model_prefix",
        required=True,
        help="Output prefix: writes PREFIX.model and PREFIX.vocab",
    )
    add(group, "vocab_size", required=True, type=int_at_least(1), help="Number of pieces")
    add(
        group,
        "model_type",
        default="unigram",
        type=choice("model_type", MODEL_TYPES),
        help=f"Segmentation model: {', '.join(MODEL_TYPES)}",
    )
    add(
        group,
        "character_coverage",
        default=1.0,
        type=float_in(0.0, 1.0),
        help="Share of characters the model covers (0.9995 suits large character sets)",
    )
    return parser


def sentencepiece_message(err):
    """The readable part of a sentencepiece error (after its ``file(line) [check]`` prefix)."""
    text = " ".join(str(err).split())
    return text.rsplit("] ", 1)[-1] if "] " in text else text


def train(inputs, prefix, vocab_size, model_type="unigram", character_coverage=1.0):
    """Train into a temporary prefix beside ``prefix``, then rename the two files into place."""
    import sentencepiece

    tmp = os.path.join(
        os.path.dirname(os.path.abspath(prefix)), f".{os.path.basename(prefix)}.{os.getpid()}.tmp"
    )
    try:
        sentencepiece.SentencePieceTrainer.train(
            input=list(inputs),
            model_prefix=tmp,
            vocab_size=vocab_size,
            model_type=model_type,
            character_coverage=character_coverage,
            minloglevel=2,
        )
        for suffix in SUFFIXES:
            os.replace(tmp + suffix, prefix + suffix)
    except RuntimeError as err:
        raise UserError(f"sentencepiece: {sentencepiece_message(err)}") from None
    finally:
        for suffix in SUFFIXES:
            if os.path.exists(tmp + suffix):
                os.remove(tmp + suffix)
    return [prefix + suffix for suffix in SUFFIXES]


@run_command(PROG)
def main(argv: list[str] | None = None) -> None:
    """Run spm_train.py with ``argv`` (default: the command line)."""
    opt = parse(build_parser(), argv)
    require_directory(opt.model_prefix, "-model_prefix")
    for suffix in SUFFIXES:
        if os.path.isdir(opt.model_prefix + suffix):
            raise UserError(
                f"-model_prefix {opt.model_prefix}: {opt.model_prefix + suffix} is a directory"
            )
    for path in opt.input:
        require_rereadable(path, "-input", "it is read twice (checked here, then trained on)")
    for path in opt.input:  # sentencepiece's own errors name neither the file nor the line
        n_text_lines = sum(bool(text.strip()) for _, text in read_lines(path))  # checks every line
        if not n_text_lines:
            raise UserError(
                f"{path}: no text to train on (the file is empty or has only empty lines)"
            )
    for path in train(
        opt.input, opt.model_prefix, opt.vocab_size, opt.model_type, opt.character_coverage
    ):
        print(path)


if __name__ == "__main__":
    main()
