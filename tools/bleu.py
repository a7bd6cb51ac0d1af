#!/usr/bin/env python
"""Score a translation file against one or more reference files with sacrebleu.

Prints one line per metric: the metric, its sacrebleu signature and the corpus score::

    python tools/bleu.py -hyp pred.txt -ref ref.txt -metrics BLEU chrF TER

Every file is read as UTF-8, one sentence a line; each reference file must have as many lines as
the hypothesis file. BLEU's ``-tokenize 13a`` (the default) is what sacrebleu reports for
detokenized text; use ``-tokenize none`` for text that is already tokenized (such as the output of a
model trained on tokenized data), so that the score is on those tokens. TER uses sacrebleu's
defaults (its own tokenization, case-insensitive) whatever ``-tokenize`` and ``-lowercase`` say.
"""

from __future__ import annotations

from onmt_lite.data.corpus import read_lines
from onmt_lite.opts import OptionParser, add, choice, parse
from onmt_lite.utils.errors import UserError, run_command
from onmt_lite.utils.metrics import METRICS, corpus_scores

PROG = "bleu.py"
TOKENIZERS = ("13a", "none", "intl", "char")


def build_parser():
    """The option parser of bleu.py."""
    parser = OptionParser(PROG, "Corpus BLEU, chrF and TER of a hypothesis file (sacrebleu).")
    group = parser.add_argument_group("Scoring")
    add(group, "hyp", required=True, help="The hypotheses: a UTF-8 file, one sentence a line")
    add(
        group,
        "ref",
        required=True,
        nargs="+",
        help="One or more reference files, each line-aligned with -hyp",
    )
    add(
        group,
        "metrics",
        nargs="+",
        default=["BLEU"],
        type=choice("metrics", METRICS),
        help=f"Metrics to compute, from {', '.join(METRICS)}",
    )
    add(
        group,
        "tokenize",
        default="13a",
        type=choice("tokenize", TOKENIZERS),
        help="BLEU tokenization: 13a is what sacrebleu reports for detokenized text; none for text "
        "that is already tokenized; intl (Unicode punctuation); char (character level)",
    )
    add(
        group,
        "lowercase",
        action="store_true",
        help="Lowercase hypotheses and references (BLEU, chrF)",
    )
    return parser


def read_sentences(path):
    """The lines of a UTF-8 file without their line endings."""
    return [text.rstrip("\r\n") for _, text in read_lines(path)]


def read_inputs(hyp_path, ref_paths):
    """``(hypotheses, [references per file])``; every file must have the hypotheses' line count."""
    hyps = read_sentences(hyp_path)
    if not hyps:
        raise UserError(f"{hyp_path}: the hypothesis file is empty; there is nothing to score")
    refs = []
    for path in ref_paths:
        lines = read_sentences(path)
        if len(lines) != len(hyps):
            raise UserError(
                f"{hyp_path} has {len(hyps)} lines but {path} has {len(lines)}; "
                "each reference file needs one line per hypothesis"
            )
        refs.append(lines)
    return hyps, refs


def score_lines(hyps, refs, metrics, tokenize="13a", lowercase=False):
    """One ``signature = score`` line per metric, as sacrebleu prints them."""
    return [
        score.sacrebleu_line() for score in corpus_scores(metrics, hyps, refs, tokenize, lowercase)
    ]


@run_command(PROG)
def main(argv: list[str] | None = None) -> None:
    """Run bleu.py with ``argv`` (default: the command line)."""
    opt = parse(build_parser(), argv)
    hyps, refs = read_inputs(opt.hyp, opt.ref)
    for line in score_lines(hyps, refs, opt.metrics, opt.tokenize, opt.lowercase):
        print(line)


if __name__ == "__main__":
    main()
