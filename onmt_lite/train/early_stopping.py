"""Early stopping on validation scores (perplexity: lower is better; accuracy, BLEU, chrF:
higher)."""

HIGHER_IS_BETTER = {"ppl": False, "accuracy": True, "BLEU": True, "chrF": True}


class EarlyStopping:
    """Counts validations without improvement of any criterion; ``patience`` 0 never stops.

    ``update(scores)`` takes ``{criterion: value}`` and returns whether the first criterion improved
    (that picks the best checkpoint).
    """

    def __init__(self, patience, criteria):
        self.patience, self.criteria = patience, list(criteria or ["ppl"])
        self.best = {c: None for c in self.criteria}
        self.stalled = 0

    def _better(self, criterion, value):
        best = self.best[criterion]
        if best is None:
            return True
        return value > best if HIGHER_IS_BETTER[criterion] else value < best

    def update(self, scores):
        improved = {}
        for criterion in self.criteria:
            value = scores[criterion]
            improved[criterion] = self._better(criterion, value)
            if improved[criterion]:
                self.best[criterion] = value
        self.stalled = 0 if any(improved.values()) else self.stalled + 1
        return improved[self.criteria[0]]

    def should_stop(self):
        return self.patience > 0 and self.stalled >= self.patience

    def state_dict(self):
        return {"best": dict(self.best), "stalled": self.stalled}

    def load_state_dict(self, state):
        self.best.update({c: v for c, v in state["best"].items() if c in self.best})
        self.stalled = state["stalled"]
