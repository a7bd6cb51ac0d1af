#!/usr/bin/env python
"""Write a checkpoint's word embeddings as GloVe text files.

    python tools/extract_embeddings.py -model run_step_10000.pt -output_dir emb/

Writes ``src_embeddings.txt`` and ``tgt_embeddings.txt`` into ``-output_dir`` (created if missing):
one line per vocabulary word in id order, special tokens included, ``word v1 v2 ...``. Values are
written with 9 significant digits, which reproduces float32 (and float16) weights exactly.
"""
from __future__ import annotations

import os

from onmt_lite.opts import OptionParser, add, parse
from onmt_lite.utils.errors import UserError, run_command
from onmt_lite.utils.files import write_text

PROG = "extract_embeddings.py"
TABLES = {"src": "encoder.embeddings.lut.weight", "tgt": "decoder.embeddings.lut.weight"}


def build_parser():
    """The option parser of extract_embeddings.py."""
    parser = OptionParser(PROG, "Write a checkpoint's word embeddings as GloVe text files.")
    group = parser.add_argument_group("Extraction")
    add(group, "model", required=True, help="The checkpoint")
    add(group, "output_dir", required=True,
        help="Directory for src_embeddings.txt and tgt_embeddings.txt (created if missing)")
    return parser


def glove_text(words, weight):
    """GloVe text for ``words`` and the ``[len(words) x dim]`` tensor ``weight``."""
    rows = weight.float().tolist()
    return "".join(f"{word} {' '.join(f'{v:.9g}' for v in row)}\n" for word, row in zip(words, rows))


def table(checkpoint, side, path):
    """The embedding tensor of ``side``, checked against the vocabulary."""
    name = TABLES[side]
    if name not in checkpoint["model"]:
        raise UserError(f"{path}: the model has no {name}")
    weight, words = checkpoint["model"][name], checkpoint["vocab"][side]
    if weight.dim() != 2 or weight.shape[0] != len(words):
        raise UserError(f"{path}: {name} has shape {tuple(weight.shape)} but the {side} vocabulary "
                        f"has {len(words)} words")
    return words, weight


@run_command(PROG)
def main(argv: list[str] | None = None) -> None:
    """Run extract_embeddings.py with ``argv`` (default: the command line)."""
    opt = parse(build_parser(), argv)
    # imported after parsing, so that -h does not load torch
    from onmt_lite.models.checkpoint import load_checkpoint

    checkpoint = load_checkpoint(opt.model)
    tables = {side: table(checkpoint, side, opt.model) for side in TABLES}
    try:
        os.makedirs(opt.output_dir, exist_ok=True)
    except OSError as err:
        raise UserError(f"-output_dir {opt.output_dir}: cannot create ({err.strerror})") from None
    for side, (words, weight) in tables.items():
        path = os.path.join(opt.output_dir, f"{side}_embeddings.txt")
        write_text(path, glove_text(words, weight))
        print(f"wrote {len(words)} {side} embeddings of size {weight.shape[1]} to {path}")


if __name__ == "__main__":
    main()
