"""Length and coverage penalties of beam search (Wu et al. 2016), as in OpenNMT-py 1.x.

A finished hypothesis scores ``log_prob / length_penalty(length) - coverage_penalty(coverage)``.
"""
import torch


def length_penalty(kind, length, alpha):
    """``none``: 1; ``wu``: ((5 + length) / 6) ** alpha; ``avg``: length. ``length`` may be a tensor."""
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
