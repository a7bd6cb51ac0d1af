"""Sparsemax (Martins and Astudillo 2016): the Euclidean projection of scores onto the probability
simplex, ``argmin_p ||p - z||^2`` over ``p >= 0, sum p = 1``. Unlike softmax it gives exactly 0 to
scores far enough below the largest.

The projection is ``p_j = max(z_j - tau, 0)``, with the threshold ``tau`` chosen so that ``p`` sums
to 1: with ``z`` sorted in decreasing order, the support is the first ``k`` entries for the largest
``k`` with ``1 + k z_(k) > sum_{i <= k} z_(i)``, and ``tau = (sum_{i <= k} z_(i) - 1) / k``. Scores
of ``-inf`` (masked positions) get exactly 0. Shapes: ``[... x n]``, normalised along ``dim``.
"""

import torch


def sparsemax_threshold(scores, dim=-1):
    """``(tau, support size)`` of ``scores`` along ``dim`` (that dimension kept, of size 1)."""
    ordered = scores.sort(dim=dim, descending=True).values
    ranks = torch.arange(1, scores.size(dim) + 1, device=scores.device, dtype=scores.dtype)
    ranks = ranks.view([-1 if d == dim % scores.dim() else 1 for d in range(scores.dim())])
    cumulative = ordered.cumsum(dim)
    # -inf entries: k * -inf is -inf, never above the (finite or -inf) sum, so never in the support
    in_support = 1 + ranks * ordered > cumulative
    size = in_support.sum(dim, keepdim=True)  # at least 1: the largest entry is always in it
    tau = (cumulative.gather(dim, size - 1) - 1) / size.to(scores.dtype)
    return tau, size


class Sparsemax(torch.autograd.Function):
    """``sparsemax(scores)``; its backward is the projection's Jacobian written out:
    ``grad_z = s * (grad_p - sum(s * grad_p) / |s|)``, ``s`` the support's indicator."""

    @staticmethod
    def forward(ctx, scores, dim):
        tau, _ = sparsemax_threshold(scores, dim)
        probs = (scores - tau).clamp_min(0)
        ctx.dim = dim
        ctx.save_for_backward(probs)
        return probs

    @staticmethod
    def backward(ctx, grad_probs):
        (probs,) = ctx.saved_tensors
        support = probs > 0
        grad = grad_probs.masked_fill(~support, 0)
        mean = grad.sum(ctx.dim, keepdim=True) / support.sum(ctx.dim, keepdim=True).to(grad.dtype)
        return (grad - mean).masked_fill_(~support, 0), None


def sparsemax(scores, dim=-1):
    """Sparsemax of ``scores`` along ``dim``: non-negative, sums to 1, 0 outside the support.
    Computed in float32 at least (in bfloat16 the sorted cumulative sums would miss the support),
    returned in the dtype of ``scores``."""
    wide = torch.promote_types(scores.dtype, torch.float32)
    return Sparsemax.apply(scores.to(wide), dim).to(scores.dtype)


def log_sparsemax(scores, dim=-1):
    """``log(sparsemax(scores))``: ``-inf`` for the words outside the support (1.x's
    LogSparsemax)."""
    return torch.log(sparsemax(scores, dim))


class SparsemaxLossFunction(torch.autograd.Function):
    """The sparsemax loss (Martins and Astudillo 2016, eq. 18) of scores ``[N x V]`` against gold
    ids ``[N]``: ``-z_y + 1/2 sum_{j in S} (z_j^2 - tau^2) + 1/2`` per row ``[N]``, ``S`` the
    support of ``sparsemax(z)``. It is non-negative, 0 when ``z_y`` beats every other score by 1 or
    more, and its gradient is ``sparsemax(z) - onehot(y)``."""

    @staticmethod
    def forward(ctx, scores, gold):
        tau, _ = sparsemax_threshold(scores, 1)
        probs = (scores - tau).clamp_min(0)
        support = probs > 0
        squares = (scores * scores - tau * tau).masked_fill(~support, 0).sum(1)
        loss = -scores.gather(1, gold.unsqueeze(1)).squeeze(1) + squares / 2 + 0.5
        ctx.save_for_backward(probs, gold)
        return loss

    @staticmethod
    def backward(ctx, grad_loss):
        probs, gold = ctx.saved_tensors
        grad = probs.clone()
        grad.scatter_add_(1, gold.unsqueeze(1), grad.new_full((grad.size(0), 1), -1.0))
        return grad * grad_loss.unsqueeze(1), None


def sparsemax_loss(scores, gold):
    """Per-row sparsemax loss ``[N]`` of ``scores`` ``[N x V]`` against ``gold`` ``[N]``."""
    return SparsemaxLossFunction.apply(scores, gold)
