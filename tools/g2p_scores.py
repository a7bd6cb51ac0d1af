#!/usr/bin/env python
"""Scores of grapheme-to-phoneme output: word accuracy, phone error rate, examples.

    python tools/g2p_scores.py -src src-test.txt -hyp pred.txt -ref tgt-test.txt -examples 10

Word accuracy is the share of words whose phones are all right; the phone error rate is the edit
distance (insertions, deletions, substitutions) between predicted and reference phones, summed over
the words, over the number of reference phones; BLEU is sacrebleu's corpus BLEU over phones.
"""

from __future__ import annotations

from onmt_lite.data.corpus import read_lines
from onmt_lite.opts import OptionParser, add, parse
from onmt_lite.utils.errors import UserError, run_command
from onmt_lite.utils.metrics import corpus_scores

PROG = "g2p_scores.py"


def edit_distance(a, b):
    """Levenshtein distance between two token lists."""
    previous = list(range(len(b) + 1))
    for i, token_a in enumerate(a, 1):
        current = [i]
        for j, token_b in enumerate(b, 1):
            current.append(
                min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (token_a != token_b))
            )
        previous = current
    return previous[-1]


def scores(hypotheses, references):
    """(word accuracy %, phone error rate %) of token lists against token lists."""
    correct = sum(h == r for h, r in zip(hypotheses, references))
    errors = sum(edit_distance(h, r) for h, r in zip(hypotheses, references))
    phones = sum(len(r) for r in references)
    return 100.0 * correct / max(len(references), 1), 100.0 * errors / max(phones, 1)


def phone_bleu(hypotheses, references):
    """Corpus BLEU (sacrebleu) with each phone as a word."""
    join = [" ".join(tokens) for tokens in hypotheses], [" ".join(tokens) for tokens in references]
    return corpus_scores(["BLEU"], join[0], [join[1]], tokenize="none")[0].score


def read_tokens(path):
    return [text.split() for _, text in read_lines(path)]


@run_command(PROG)
def main(argv: list[str] | None = None) -> None:
    parser = OptionParser(PROG, __doc__)
    group = parser.add_argument_group("Files")
    add(group, "hyp", required=True, help="Predicted phones, one word a line")
    add(group, "ref", required=True, help="Reference phones, one word a line")
    add(group, "src", default="", help="The words (letters separated by spaces), for the examples")
    add(group, "examples", type=int, default=10, help="How many examples to print")
    opt = parse(parser, argv)
    hypotheses = read_tokens(opt.hyp)
    references = read_tokens(opt.ref)
    if len(hypotheses) != len(references):
        raise UserError(f"{opt.hyp} has {len(hypotheses)} lines, {opt.ref} has {len(references)}")
    if not references:
        raise UserError(f"{opt.hyp} and {opt.ref} are empty; there is nothing to score")
    accuracy, per = scores(hypotheses, references)
    bleu = phone_bleu(hypotheses, references)
    print(
        f"word accuracy {accuracy:.2f}%, phone error rate {per:.2f}%, BLEU {bleu:.2f} over phones "
        f"({len(references)} words)"
    )
    words = ["".join(w) for w in read_tokens(opt.src)] if opt.src else [""] * len(references)
    for word, hyp, ref in list(zip(words, hypotheses, references))[: opt.examples]:
        mark = "ok " if hyp == ref else "ERR"
        print(f"  {mark} {word:<16} {' '.join(hyp):<28} reference: {' '.join(ref)}")


if __name__ == "__main__":
    main()
