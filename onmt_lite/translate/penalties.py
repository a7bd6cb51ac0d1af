"""Length and coverage penalties of beam search (Wu et al. 2016), as in OpenNMT-py 1.x.

A finished hypothesis scores ``log_prob / length_penalty(length) - coverage_penalty(coverage)``.
"""

import torch

from onmt_lite.utils.errors import UserError


def length_penalty(kind, length, alpha):
    """``none``: 1; ``wu``: ((5 + length) / 6) ** alpha; ``avg``: length. ``length`` may be a
    tensor."""
    if kind == "wu":
        return ((5.0 + length) / 6.0) ** alpha
    if kind == "avg":
        return length * 1.0
    return torch.ones_like(length, dtype=torch.float) if torch.is_tensor(length) else 1.0


def coverage_penalty(kind, coverage, beta, mask):
    """Penalty of summed attention ``coverage`` ``[... x S]`` over the real positions ``mask``.

    ``wu``: beta * -sum log(min(cov, 1)); ``summary``: beta * sum(max(cov, 1) - 1); ``none``: 0.
    Padded source positions count for nothing (1.x summed them too: an infinite penalty).
    """
    if kind == "wu":
        return beta * -(coverage.clamp(min=1e-20, max=1.0).log() * mask).sum(-1)
    if kind == "summary":
        return beta * ((coverage.clamp(min=1.0) - 1.0) * mask).sum(-1)
    return torch.zeros(coverage.shape[:-1], dtype=coverage.dtype, device=coverage.device)


def check_penalties(coverage_kind: str, beta: float) -> None:
    """A UserError for penalties the early stop cannot bound: it takes a live row's log-probability,
    divided by the largest length penalty it can still meet, as the best final score the row can
    reach, which holds for any ``alpha`` (the length penalty is positive) but only while the
    coverage penalty never raises a score: ``beta`` at least 0."""
    if coverage_kind != "none" and beta < 0:
        raise UserError(
            f"beta must be at least 0 with a coverage penalty (got {beta}): a "
            "negative one would raise scores, and no search could stop early"
        )


class Penalties:
    """The search's scores as penalties shape them (``SearchOptions``' length and coverage
    penalties), on the rows of a ``BeamState``; each method returns ``[B x K]`` or ``[B]``."""

    def __init__(self, opts):
        check_penalties(opts.coverage_penalty, opts.beta)
        self.opts = opts

    def coverage(self, state) -> torch.Tensor:
        """The coverage penalty of every row ``[B x K]`` (padded source positions excluded)."""
        o = self.opts
        if o.coverage_penalty == "none":
            return torch.zeros_like(state.scores)
        positions = torch.arange(state.coverage.size(1), device=state.coverage.device)
        mask = positions.unsqueeze(0) < state.src_lengths.repeat_interleave(state.K).unsqueeze(1)
        penalty = coverage_penalty(o.coverage_penalty, state.coverage, o.beta, mask)
        return penalty.view_as(state.scores)

    def final_scores(self, state) -> torch.Tensor:
        """What each row would score if it ended now ``[B x K]``: score / length penalty - coverage
        penalty (with -stepwise_penalty the coverage penalty is in the score already)."""
        o = self.opts
        scaled = state.scores
        if o.length_penalty != "none":
            lengths = state.lengths().unsqueeze(1).float()
            scaled = scaled / length_penalty(o.length_penalty, lengths, o.alpha)
        if o.stepwise_penalty or o.coverage_penalty == "none":
            return scaled
        return scaled - self.coverage(state)

    def done(self, state, final: torch.Tensor, ended: torch.Tensor) -> torch.Tensor:
        """The examples that cannot improve ``[B]``: ``n_best`` finished hypotheses and no live row
        able to beat the n-th of them (see ``check_penalties``), or no live row at all; with
        -ratio, also those that 1.x's heuristic stops (``ratio_stop``). ``final``: the step's
        candidates' final scores ``[B x K]``, best candidate first; ``ended``: those that ended
        ``[B x K]``."""
        o = self.opts
        if state.K == 1:  # one row (greedy, sampling): done once it ended or died, nothing to bound
            return state.scores.view(-1) == float("-inf")
        # the scores without the coverage penalty that -stepwise_penalty put in (it may shrink)
        best_alive = state.log_probs().max(1).values
        bound = best_alive
        if o.length_penalty != "none":
            # a live row ends at a length from its own + 1 to its example's maximum; its score is
            # not positive, so the largest length penalty there (at either end: it is monotonic)
            # bounds it
            shortest = length_penalty(o.length_penalty, (state.lengths() + 1).float(), o.alpha)
            longest = length_penalty(o.length_penalty, state.max_lengths().float(), o.alpha)
            bound = best_alive / torch.maximum(shortest, longest)
        # fewer than n_best finished: the n-th best is -inf, which only a bound of -inf reaches
        enough = bound <= state.nth_best()
        if o.ratio > 0:
            enough |= self.ratio_stop(state, final, ended)
        return enough | (best_alive == float("-inf"))

    def ratio_stop(self, state, final: torch.Tensor, ended: torch.Tensor) -> torch.Tensor:
        """1.x's -ratio ``[B]``, checked at a step where some of the example's candidates end:
        ``n_best`` finished hypotheses, and the step's best candidate's final score spread over
        ratio x its source's length at most the best finished one's per token
        (``BeamState.best_average``). A heuristic: a longer hypothesis might still have won.
        (OpenNMT-py checks it where a beam ends, 1.x any beam of the batch, 3.x the example's own,
        as here; both read another example's source length for all but each batch's first: their
        lengths were repeated per beam and indexed by example.)"""
        expected_length = state.src_lengths.to(final.dtype) * self.opts.ratio  # [B]
        hopeless = final[:, 0] / expected_length <= state.best_average
        return hopeless & ended.any(1) & (state.nth_best() != float("-inf"))
