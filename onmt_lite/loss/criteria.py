"""Criteria: per-token losses of a generator's log-probabilities against the target words.

``NMTCriterion`` scores a plain generator's ``[N x V]`` output, ``CopyGeneratorLoss`` a copy
generator's ``[N x V + n]``; both optionally label-smoothed over the fixed vocabulary, and both return
``(loss, nll)``, ``[N]`` each, 0 on padding: ``loss`` is what is optimised, ``nll`` what is reported.
"""
import torch
import torch.nn as nn

from onmt_lite.data.vocab import PAD_ID, UNK_ID


class UniformNLL(torch.autograd.Function):
    """``[N x V]`` log-probabilities -> ``[N]``: the mean of ``-log p`` over the vocabulary but the
    padding word (whose log-probability may be -inf). Written out because autograd's version (mask,
    sum, and their backward) passes over the ``[N x V]`` values five times more: a large share of
    a label-smoothed step with a big vocabulary."""

    @staticmethod
    def forward(ctx, log_probs, pad_idx):
        ctx.shape, ctx.pad_idx = log_probs.shape, pad_idx
        total = log_probs[:, :pad_idx].sum(1) + log_probs[:, pad_idx + 1:].sum(1)
        return -total / (log_probs.size(1) - 1)

    @staticmethod
    def backward(ctx, grad):
        rows, vocab_size = ctx.shape
        grad_log_probs = (grad / -(vocab_size - 1)).unsqueeze(1).expand(rows, vocab_size).contiguous()
        grad_log_probs[:, ctx.pad_idx] = 0
        return grad_log_probs, None


def smoothed(nll, fixed_log_probs, label_smoothing, pad_idx=PAD_ID):
    """``(1 - eps) * nll + eps * (mean of -log p over the fixed vocabulary, padding excluded)``."""
    if label_smoothing == 0:
        return nll
    return (1 - label_smoothing) * nll + label_smoothing * UniformNLL.apply(fixed_log_probs, pad_idx)


def smoothed_nll(log_probs, target, label_smoothing, pad_idx=PAD_ID):
    """(loss, nll), ``[N]`` each, of ``log_probs`` ``[N x V]`` against ``target`` ``[N]``, 0 on padding."""
    pad = target == pad_idx
    nll = -log_probs.gather(1, target.masked_fill(pad, UNK_ID).unsqueeze(1)).squeeze(1).masked_fill(pad, 0)
    return smoothed(nll, log_probs, label_smoothing, pad_idx).masked_fill(pad, 0), nll


class LogSoftmaxNLL(torch.autograd.Function):
    """``NMTCriterion`` of ``log_softmax(scores)`` holding one ``[N x V]`` buffer instead of four.

    Autograd's chain keeps the log-probabilities, then makes a gradient for the gold gather, one for
    the uniform term, their sum and the log-softmax's input gradient, each ``[N x V]``: with a big
    vocabulary they were most of a training step's memory. Here the log-probabilities are written
    over ``scores`` (a float32 copy of 16-bit ones) and the backward turns that buffer into the
    gradient in place: ``g * (softmax - (1 - eps) * onehot(gold) - eps * uniform)``, uniform over the
    vocabulary but padding. The returned log-probabilities are therefore valid until ``backward``
    only, and the graph can be backpropagated once.
    """

    @staticmethod
    def forward(ctx, scores, gold, label_smoothing, pad_idx):
        in_place = scores.dtype.itemsize >= 4  # 16-bit scores get a float32 copy
        log_probs = torch.log_softmax(scores if in_place else scores.float(), -1,
                                      out=scores if in_place else None)
        if in_place:
            ctx.mark_dirty(scores)
        ctx.mark_non_differentiable(log_probs)
        loss, nll = smoothed_nll(log_probs, gold, label_smoothing, pad_idx)
        ctx.save_for_backward(log_probs, gold)
        ctx.label_smoothing, ctx.pad_idx = label_smoothing, pad_idx
        return loss, nll, log_probs

    @staticmethod
    def backward(ctx, grad_loss, grad_nll, _):
        log_probs, gold = ctx.saved_tensors
        pad = gold == ctx.pad_idx
        eps, vocab_size = ctx.label_smoothing, log_probs.size(1)
        # d(-log p_k)/d scores = softmax - onehot(k): `gold_weight` for the gold word, `uniform_weight`
        # spread over the vocabulary but padding
        gold_weight = ((1 - eps) * grad_loss + grad_nll).masked_fill(pad, 0)
        uniform_weight = (eps * grad_loss).masked_fill(pad, 0)
        grad = log_probs.exp_().mul_((gold_weight + uniform_weight).unsqueeze(1))  # in the same buffer
        if eps:
            share = (uniform_weight / (vocab_size - 1)).unsqueeze(1)
            grad.sub_(share)
            grad[:, ctx.pad_idx] += share.squeeze(1)
        grad.scatter_add_(1, gold.masked_fill(pad, UNK_ID).unsqueeze(1), -gold_weight.unsqueeze(1))
        return grad, None, None, None


class NMTCriterion(nn.Module):
    """Per-token negative log-likelihood (optionally label-smoothed), 0 on padding."""

    def __init__(self, label_smoothing=0.0, pad_idx=PAD_ID):
        super().__init__()
        self.label_smoothing, self.pad_idx = label_smoothing, pad_idx

    def from_scores(self, scores, target):
        """``scores`` ``[N x V]`` (before the log-softmax; overwritten), ``target`` ``[N]`` ->
        (loss, nll, log-probabilities): ``forward(log_softmax(scores), target)`` in one ``[N x V]``
        buffer (``LogSoftmaxNLL``), the log-probabilities valid until ``backward``."""
        return LogSoftmaxNLL.apply(scores, target, self.label_smoothing, self.pad_idx)

    def forward(self, log_probs, target):
        """``log_probs`` ``[N x V]``, ``target`` ``[N]`` -> (loss ``[N]``, nll ``[N]``)."""
        return smoothed_nll(log_probs, target, self.label_smoothing, self.pad_idx)


class CopyGeneratorLoss(nn.Module):
    """Per-token copy loss: ``-log(p_vocab(w) + p_copy(w))``, 0 on padding.

    A target word that is in the source (alignment > 0) and in the vocabulary gets both terms; one that
    is in the source but out of the vocabulary (target ``<unk>``) gets the copy term alone; one that is
    not in the source gets the vocabulary term alone. With ``force_copy``, a word in the source always
    gets the copy term alone. Label smoothing spreads its mass over the fixed vocabulary.
    """

    def __init__(self, vocab_size, force_copy=False, label_smoothing=0.0, pad_idx=PAD_ID, unk_idx=UNK_ID):
        super().__init__()
        self.vocab_size, self.force_copy, self.label_smoothing = vocab_size, force_copy, label_smoothing
        self.pad_idx, self.unk_idx = pad_idx, unk_idx

    def forward(self, log_probs, align, target):
        """``log_probs`` ``[N x V + n]``, ``align`` ``[N]``, ``target`` ``[N]`` -> (loss, nll), ``[N]`` each."""
        pad = target == self.pad_idx
        vocab_lp = log_probs.gather(1, target.masked_fill(pad, self.unk_idx).unsqueeze(1)).squeeze(1)
        copy_lp = log_probs.gather(1, (align + self.vocab_size).unsqueeze(1)).squeeze(1)
        copyable = align != self.unk_idx
        use_vocab = ~copyable if self.force_copy else ~copyable | (target != self.unk_idx)
        neg_inf = torch.full_like(vocab_lp, float("-inf"))
        both = torch.stack([torch.where(use_vocab, vocab_lp, neg_inf), torch.where(copyable, copy_lp, neg_inf)])
        nll = -torch.logsumexp(both, dim=0).masked_fill(pad, 0)
        fixed = log_probs[:, : self.vocab_size]
        loss = smoothed(nll, fixed, self.label_smoothing, self.pad_idx).masked_fill(pad, 0)
        return loss, nll
