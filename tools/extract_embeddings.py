#!/usr/bin/env python
"""Write a checkpoint's word embeddings as GloVe text files.

    python tools/extract_embeddings.py -model run_step_10000.pt [-output_dir emb/]

Writes ``src_embeddings.txt`` and ``tgt_embeddings.txt`` (OpenNMT-py 1.x's names) into
``-output_dir`` (default: the current directory, as in 1.x; created if missing): one line per
vocabulary word in id order, special tokens included, ``word v1 v2 ...``. Values are written with
9 significant digits, which reproduces float32 (and float16) weights exactly. The two files appear
together or not at all. ``-gpu`` is accepted for 1.x command lines; the extraction runs on the CPU.
"""

from __future__ import annotations

import os

from onmt_lite.opts import OptionParser, add, parse
from onmt_lite.utils.errors import UserError, run_command
from onmt_lite.utils.files import StagedOutputs

PROG = "extract_embeddings.py"
TABLES = {"src": "encoder.embeddings.lut.weight", "tgt": "decoder.embeddings.lut.weight"}


def build_parser():
    """The option parser of extract_embeddings.py."""
    parser = OptionParser(PROG, "Write a checkpoint's word embeddings as GloVe text files.")
    group = parser.add_argument_group("Extraction")
    add(group, "model", required=True, help="The checkpoint")
    add(
        group,
        "output_dir",
        default=".",
        help="Directory for src_embeddings.txt and tgt_embeddings.txt (created if missing)",
    )
    add(
        group,
        "gpu",
        type=int,
        default=-1,
        help="Accepted for OpenNMT-py 1.x command lines; the extraction runs on the CPU",
    )
    return parser


def glove_text(words, weight):
    """GloVe text for ``words`` and the ``[len(words) x dim]`` tensor ``weight``."""
    rows = weight.float().tolist()
    return "".join(
        f"{word} {' '.join(f'{v:.9g}' for v in row)}\n" for word, row in zip(words, rows)
    )


def table(checkpoint, side, path):
    """The embedding tensor of ``side``, checked against the vocabulary."""
    name = TABLES[side]
    if name not in checkpoint["model"]:
        raise UserError(f"{path}: the model has no {name}")
    weight = checkpoint["model"][name]
    words = checkpoint["vocab"][side]
    if weight.dim() != 2 or weight.shape[0] != len(words):
        raise UserError(
            f"{path}: {name} has shape {tuple(weight.shape)} but the {side} vocabulary "
            f"has {len(words)} words"
        )
    return words, weight


def output_paths(output_dir):
    """``{side: path}`` of the files to write; a UserError, before anything is read, if
    ``output_dir`` or one of the files cannot be what it must be."""
    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
        raise UserError(f"-output_dir {output_dir}: not a directory")
    paths = {side: os.path.join(output_dir, f"{side}_embeddings.txt") for side in TABLES}
    for path in paths.values():
        if os.path.isdir(path):
            raise UserError(f"-output_dir {output_dir}: {path} is a directory")
    return paths


@run_command(PROG)
def main(argv: list[str] | None = None) -> None:
    """Run extract_embeddings.py with ``argv`` (default: the command line)."""
    opt = parse(build_parser(), argv)
    # imported after parsing, so that -h does not load torch
    from onmt_lite.models.checkpoint import load_checkpoint

    paths = output_paths(opt.output_dir)
    checkpoint = load_checkpoint(opt.model)
    tables = {side: table(checkpoint, side, opt.model) for side in TABLES}
    try:
        os.makedirs(opt.output_dir, exist_ok=True)
    except OSError as err:
        raise UserError(f"-output_dir {opt.output_dir}: cannot create ({err.strerror})") from None
    with StagedOutputs() as staged:  # both files or neither
        for side, (words, weight) in tables.items():
            staged.write_text(glove_text(words, weight), paths[side])
        staged.commit()
    for side, (words, weight) in tables.items():
        print(f"wrote {len(words)} {side} embeddings of size {weight.shape[1]} to {paths[side]}")


if __name__ == "__main__":
    main()
