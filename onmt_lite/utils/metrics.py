"""Corpus BLEU, chrF and TER with sacrebleu: the one place that builds the metrics and words their
scores.

Translation (``-tgt``), validation (``-valid_metrics``) and ``tools/bleu.py`` score through here, so
a score always comes with sacrebleu's signature and reads the same in every log.
"""

import dataclasses

METRICS = ("BLEU", "chrF", "TER")


def make_metric(name: str, tokenize: str = "13a", lowercase: bool = False):
    """A sacrebleu metric object for ``name`` (one of ``METRICS``). TER keeps sacrebleu's
    defaults."""
    from sacrebleu.metrics import BLEU, CHRF, TER  # imported when scoring: it takes a while

    if name == "BLEU":
        return BLEU(tokenize=tokenize, lowercase=lowercase)
    if name == "chrF":
        return CHRF(lowercase=lowercase)
    if name == "TER":
        return TER()
    raise ValueError(f"unknown metric {name!r}; choose from {', '.join(METRICS)}")


@dataclasses.dataclass
class CorpusScore:
    """One metric's corpus score: ``score`` (e.g. BLEU 0-100), sacrebleu's result and signature."""

    name: str
    score: float
    result: object
    signature: str

    def __str__(self) -> str:
        """The log's wording: ``BLEU = 12.34 45.6/... (signature nrefs:1|case:mixed|...)``."""
        return f"{self.result} (signature {self.signature})"

    def sacrebleu_line(self) -> str:
        """sacrebleu's own wording: ``BLEU|nrefs:1|...|version:2.6.0 = 12.34 ...``."""
        return self.result.format(signature=self.signature)


def corpus_scores(
    names, hypotheses: list, references: list, tokenize: str = "13a", lowercase: bool = False
) -> list:
    """A ``CorpusScore`` per metric name, of ``hypotheses`` (strings) against ``references``: a list
    of reference sets, each a list of strings line-aligned with the hypotheses."""
    scores = []
    for name in names:
        metric = make_metric(name, tokenize, lowercase)
        result = metric.corpus_score(hypotheses, references)
        scores.append(CorpusScore(name, result.score, result, str(metric.get_signature())))
    return scores
