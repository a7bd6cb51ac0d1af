"""Result: what ``Translator.translate`` gives for one input line."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class Result:
    """The translations of one input line: n-best texts, scores and log-probabilities, token lists,
    attention ``[out_len x src_len]`` per hypothesis, and the gold score when a target was given.
    ``beam``: the line's beam dump (``beam_dump.line_entry``) when the Translator records them.
    For copy models also the copy attention ``[out_len x src_len]`` and the probability of copying
    ``[out_len x 1]`` per hypothesis (None otherwise). The attentions are None when the search did
    not keep them (``attention=False``: what ``onmt_lite_translate`` does unless -replace_unk,
    -attn_debug or -attn_plot asks for them). With ``report_align``, ``alignment`` holds each
    hypothesis's alignment ``[n_tokens x src_len]`` (see translate/alignment.py; None for an empty
    line)."""

    source: list
    hypotheses: list = dataclasses.field(default_factory=list)
    scores: list = dataclasses.field(default_factory=list)
    log_probs: list = dataclasses.field(default_factory=list)
    tokens: list = dataclasses.field(default_factory=list)
    attention: list = dataclasses.field(default_factory=list)
    gold_score: float = None
    gold_words: int = 0
    copy_attention: list = dataclasses.field(default_factory=list)
    p_copy: list = dataclasses.field(default_factory=list)
    alignment: list = dataclasses.field(default_factory=list)
    beam: dict = None

    def fill_empty(self, n_best: int) -> None:
        """The Result of an empty source line: ``n_best`` empty outputs of score 0, as for any
        line."""
        self.hypotheses = [""] * n_best
        self.scores = [0.0] * n_best
        self.log_probs = [0.0] * n_best
        self.tokens = [[] for _ in range(n_best)]
        self.attention = [None] * n_best
        self.copy_attention = [None] * n_best
        self.p_copy = [None] * n_best
        self.alignment = [None] * n_best
