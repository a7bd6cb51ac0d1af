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


class NMTCriterion(nn.Module):
    """Per-token negative log-likelihood (optionally label-smoothed), 0 on padding."""

    def __init__(self, label_smoothing=0.0, pad_idx=PAD_ID):
        super().__init__()
        self.label_smoothing, self.pad_idx = label_smoothing, pad_idx

    def forward(self, log_probs, target):
        """``log_probs`` ``[N x V]``, ``target`` ``[N]`` -> (loss ``[N]``, nll ``[N]``)."""
        pad = target == self.pad_idx
        nll = -log_probs.gather(1, target.masked_fill(pad, UNK_ID).unsqueeze(1)).squeeze(1)
        nll = nll.masked_fill(pad, 0)
        loss = smoothed(nll, log_probs, self.label_smoothing, self.pad_idx).masked_fill(pad, 0)
        return loss, nll


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
