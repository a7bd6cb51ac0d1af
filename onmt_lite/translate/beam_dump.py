"""-dump_beam: the hypotheses a search kept at each step, per input line, written as one JSON file.

The search tells a ``BeamRecorder`` every step's kept hypotheses (``Search(..., recorder=...)``);
``line_entry`` turns one example's steps into the JSON object of its line (docs/usage.md describes
the format). A candidate that is no live hypothesis (its cumulative score -inf: the beam had fewer
live hypotheses than places, as inside a target prefix, or one that already ended) is ``null``.
"""

import json
import math

from onmt_lite.utils.files import write_text

KEYS = ("predicted_ids", "predicted_tokens", "beam_parent_ids", "scores", "log_probs")


class BeamRecorder:
    """Per example id, one ``(token ids, parents, cumulative scores, log-probabilities)`` tuple of
    lists (one entry per beam place) per search step."""

    def __init__(self):
        self.steps = {}

    def record(self, examples, tokens, parents, scores, log_probs):
        """One step of the examples ``examples`` (their ids, a list of B): their kept
        hypotheses' tokens, the places
        of their parents at the step before, their cumulative scores and the log-probabilities of
        their tokens, each ``[B x K]``."""
        columns = [tensor.tolist() for tensor in (tokens, parents, scores, log_probs)]
        for b, example in enumerate(examples):
            self.steps.setdefault(example, []).append(tuple(column[b] for column in columns))

    def pop(self, example):
        """The steps of ``example`` (a list; empty if it took none), forgotten here."""
        return self.steps.pop(example, [])


def line_entry(steps, nbest, word):
    """The dump of one line: its ``steps`` (``BeamRecorder.pop``), where each of its n-best
    hypotheses ``nbest`` ended, and ``word(id)``, a token id's string."""
    entry = {key: [] for key in KEYS}
    for ids, parents, scores, log_probs in steps:
        live = [math.isfinite(score) for score in scores]
        entry["predicted_ids"].append([i if ok else None for i, ok in zip(ids, live)])
        entry["predicted_tokens"].append([word(i) if ok else None for i, ok in zip(ids, live)])
        entry["beam_parent_ids"].append([p if ok else None for p, ok in zip(parents, live)])
        entry["scores"].append([s if ok else None for s, ok in zip(scores, live)])
        entry["log_probs"].append(
            [lp if ok and math.isfinite(lp) else None for lp, ok in zip(log_probs, live)]
        )
    # a hypothesis that never ended (search.completed's filler of an n-best list) has no place
    entry["n_best"] = [
        {
            "step": h.end[0] if h.end else None,
            "beam": h.end[1] if h.end else None,
            "score": h.score if math.isfinite(h.score) else None,
        }
        for h in nbest
    ]
    return entry


def empty_entry():
    """The dump of a line that is not decoded (an empty source line): no steps, no hypotheses."""
    return {**{key: [] for key in KEYS}, "n_best": []}


def dump_text(entries: list[dict]) -> str:
    """The dump file's text: a JSON list of the lines' entries, each with its line number (from 1)
    first."""
    lines = [{"line": number, **entry} for number, entry in enumerate(entries, 1)]
    return json.dumps(lines, ensure_ascii=False, allow_nan=False) + "\n"


def write_dump(path: str, entries: list[dict]) -> None:
    """Write the dump file (``dump_text``) to ``path`` on its own."""
    write_text(path, dump_text(entries))
