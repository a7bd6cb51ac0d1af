"""Criteria: per-token losses of a generator's log-probabilities against the target words.

``NMTCriterion`` scores a plain generator's ``[N x V]`` output, ``CopyGeneratorLoss`` a copy
generator's ``[N x V + n]``; both optionally label-smoothed over the fixed vocabulary, and both
return ``(loss, nll)``, ``[N]`` each, 0 on padding: ``loss`` is what is optimised, ``nll`` what is
reported.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

from onmt_lite.data.vocab import PAD_ID, UNK_ID
from onmt_lite.models.projection import bucket_below, padded_rows
from onmt_lite.models.sparsemax import sparsemax_loss
from onmt_lite.utils.cpu_paths import cpu_path
from onmt_lite.utils.stock import stock_forward
from onmt_lite.utils.topk import row_argmax


class UniformNLL(torch.autograd.Function):
    """``[N x V]`` log-probabilities -> ``[N]``: the mean of ``-log p`` over the vocabulary but the
    padding word (whose log-probability may be -inf). Written out because autograd's version (mask,
    sum, and their backward) passes over the ``[N x V]`` values five times more: a large share of
    a label-smoothed step with a big vocabulary."""

    @staticmethod
    def forward(ctx, log_probs, pad_idx):
        ctx.shape = log_probs.shape
        ctx.pad_idx = pad_idx
        total = log_probs[:, :pad_idx].sum(1) + log_probs[:, pad_idx + 1 :].sum(1)
        return -total / (log_probs.size(1) - 1)

    @staticmethod
    def backward(ctx, grad):
        rows, vocab_size = ctx.shape
        grad_log_probs = (
            (grad / -(vocab_size - 1)).unsqueeze(1).expand(rows, vocab_size).contiguous()
        )
        grad_log_probs[:, ctx.pad_idx] = 0
        return grad_log_probs, None


def smoothed(nll, fixed_log_probs, label_smoothing, pad_idx=PAD_ID):
    """``(1 - eps) * nll + eps * (mean of -log p over the fixed vocabulary, padding excluded)``."""
    if label_smoothing == 0:
        return nll
    return (1 - label_smoothing) * nll + label_smoothing * UniformNLL.apply(
        fixed_log_probs, pad_idx
    )


def smoothed_nll(log_probs, target, label_smoothing, pad_idx=PAD_ID):
    """(loss, nll), ``[N]`` each, of ``log_probs`` ``[N x V]`` against ``target`` ``[N]``, 0 on
    padding."""
    pad = target == pad_idx
    nll = (
        -log_probs.gather(1, target.masked_fill(pad, UNK_ID).unsqueeze(1))
        .squeeze(1)
        .masked_fill(pad, 0)
    )
    return smoothed(nll, log_probs, label_smoothing, pad_idx).masked_fill(pad, 0), nll


# Scores held at once by the fused loss: on the CPU 64 MB of float32 whatever the batch (832 rows of
# a 20,000-word vocabulary), so its memory no longer grows with the target words of a shard (at 16
# MB, 208 rows a product, the standard RNN trained 10% slower on a 2-core Zen 3); on a GPU 256 MB
# (3,355 rows), where each chunk launches some 30 kernels, each a cost to the host.
CHUNK_SCORES = 1 << 24
GPU_CHUNK_SCORES = 1 << 26


def chunk_scores(device: torch.device) -> int:
    """The scores the fused loss holds at once on ``device``."""
    return CHUNK_SCORES if cpu_path(device) else GPU_CHUNK_SCORES


def _score_gradient_(log_probs, gold, label_smoothing, pad_idx):
    """``d loss / d scores`` of each row, written over its log-probabilities ``[c x V]`` and
    returned: ``softmax - (1 - eps) * onehot(gold) - eps * uniform``, uniform over the vocabulary
    but padding, 0 on padding rows."""
    pad = gold == pad_idx
    grad = log_probs.exp_()
    if label_smoothing:
        share = label_smoothing / (log_probs.size(1) - 1)
        grad.sub_(share)
        grad[:, pad_idx] += share
    grad.scatter_add_(
        1,
        gold.masked_fill(pad, UNK_ID).unsqueeze(1),
        grad.new_full((grad.size(0), 1), label_smoothing - 1),
    )
    return grad.masked_fill_(pad.unsqueeze(1), 0)


class LentBuffer:
    """A zeroed tensor lent to one ``LinearLogSoftmaxNLL`` call at a time and reused by the next:
    its ``[V x H]`` weight gradient. A fresh one per call (per loss shard) left a 20 MB hole in
    glibc's heap, which ``utils/memory.py`` keeps, each time a small tensor was cut from it before
    the next call; the heap then grew by a buffer per shard. A call that finds it lent (a second
    loss before the first one's backward) or a weight that is not a leaf gets a fresh tensor."""

    def __init__(self):
        self.tensor = None
        self.lent = False

    def take(self, like):
        if self.lent or like.grad_fn is not None:
            return torch.zeros_like(like)
        if (
            self.tensor is None
            or self.tensor.shape != like.shape
            or self.tensor.dtype != like.dtype
            or self.tensor.device != like.device
        ):
            self.tensor = torch.zeros_like(like)
        else:
            self.tensor.zero_()
        self.lent = True
        return self.tensor

    def give_back(self, tensor):
        if tensor is self.tensor:
            self.lent = False


class LinearLogSoftmaxNLL(torch.autograd.Function):
    """The summed ``NMTCriterion`` loss of ``log_softmax(hidden @ weight.T + bias)``,
    ``chunk_scores`` scores at a time: never a whole ``[N x V]`` matrix.

    Autograd's chain keeps the ``[N x V]`` log-probabilities and makes up to four more of that size
    in the backward pass: with a big vocabulary, most of a training step's memory. Here each chunk
    of rows is projected, scored, and turned into its score gradient in the same buffer, which is
    multiplied into the gradients of ``hidden``, ``weight`` and ``bias`` at once; the backward only
    scales them by the loss's gradient (the loss is a sum, so that is exact). The products are those
    of autograd's backward (in autocast's dtype under autocast), and the rows are padded as
    ``project`` pads them. Returns the summed loss, and the nll ``[N]`` and the best word ``[N]`` of
    each row (not differentiable), 0 and any word on padding rows. The graph can be backpropagated
    once: the backward scales the gradients in place.
    """

    @staticmethod
    def forward(ctx, hidden, weight, bias, gold, label_smoothing, pad_idx, weight_grad_buffer):
        want_hidden, want_weight, want_bias = ctx.needs_input_grad[:3]
        n_rows = hidden.size(0)
        grad_hidden = torch.empty_like(hidden) if want_hidden else None
        grad_weight = weight_grad_buffer.take(weight) if want_weight else None
        ctx.weight_grad_buffer = weight_grad_buffer
        grad_bias = torch.zeros_like(bias) if want_bias else None
        dtype = torch.promote_types(torch.promote_types(hidden.dtype, weight.dtype), torch.float32)
        loss = hidden.new_zeros((), dtype=dtype)
        nll = hidden.new_empty(n_rows, dtype=dtype)
        best = gold.new_empty(n_rows)
        # whole chunks need no padding
        step = bucket_below(max(1, chunk_scores(hidden.device) // weight.size(0)))
        for start in range(0, n_rows, step):
            end = min(start + step, n_rows)
            rows = padded_rows(hidden[start:end])  # padding rows: gold pad, score gradient 0
            chunk = F.pad(hidden[start:end], (0, 0, 0, rows - (end - start)))
            chunk_gold = F.pad(gold[start:end], (0, rows - (end - start)), value=pad_idx)
            scores = F.linear(chunk, weight, bias)
            log_probs = torch.log_softmax(
                scores.to(dtype), -1, out=scores if scores.dtype == dtype else None
            )
            chunk_loss, chunk_nll = smoothed_nll(log_probs, chunk_gold, label_smoothing, pad_idx)
            loss += chunk_loss.sum()
            nll[start:end], best[start:end] = (
                chunk_nll[: end - start],
                row_argmax(log_probs)[: end - start],
            )
            grad = _score_gradient_(log_probs, chunk_gold, label_smoothing, pad_idx)
            if want_hidden:
                grad_hidden[start:end] = (grad @ weight)[: end - start]
            if want_weight:
                if grad.dtype == chunk.dtype == grad_weight.dtype:
                    grad_weight.addmm_(grad.t(), chunk)  # no [V x H] product to add
                else:  # under autocast: the product in its dtype, as autograd's
                    grad_weight += grad.t() @ chunk
            if want_bias:
                grad_bias += grad.sum(0)
        ctx.save_for_backward(grad_hidden, grad_weight, grad_bias)
        ctx.mark_non_differentiable(nll, best)
        return loss, nll, best

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_loss, _nll, _best):
        if ctx.weight_grad_buffer is None:
            raise RuntimeError(
                "LinearLogSoftmaxNLL's graph can be backpropagated once (retain_graph is not "
                "supported: its gradients are scaled in place)"
            )
        grads = [None if grad is None else grad.mul_(grad_loss) for grad in ctx.saved_tensors]
        # autograd adds it to weight.grad before any next call
        ctx.weight_grad_buffer.give_back(grads[1])
        ctx.weight_grad_buffer = None
        return (*grads, None, None, None, None)


@stock_forward
class NMTCriterion(nn.Module):
    """Per-token negative log-likelihood (optionally label-smoothed), 0 on padding."""

    def __init__(self, label_smoothing=0.0, pad_idx=PAD_ID):
        super().__init__()
        self.label_smoothing = label_smoothing
        self.pad_idx = pad_idx
        self.weight_grad_buffer = LentBuffer()

    def from_hidden(self, hidden, linear, target):
        """``hidden`` ``[N x H]``, ``linear`` the generator's projection, ``target`` ``[N]`` ->
        (summed loss, nll ``[N]``, best word ``[N]``):
        ``forward(log_softmax(linear(hidden)), target)`` a chunk of rows at a time
        (``LinearLogSoftmaxNLL``), for training."""
        return LinearLogSoftmaxNLL.apply(
            hidden,
            linear.weight,
            linear.bias,
            target,
            self.label_smoothing,
            self.pad_idx,
            self.weight_grad_buffer,
        )

    def forward(self, log_probs, target):
        """``log_probs`` ``[N x V]``, ``target`` ``[N]`` -> (loss ``[N]``, nll ``[N]``).

        Training with ``NMTGenerator`` computes this a chunk of rows at a time (``from_hidden``)
        while this method is the one defined here (``utils.stock.is_stock``); edited, patched or
        overridden, it is what trains."""
        return smoothed_nll(log_probs, target, self.label_smoothing, self.pad_idx)


class SparsemaxCriterion(nn.Module):
    """Per-token sparsemax loss (see ``models.sparsemax``) of raw scores, 0 on padding; the loss
    that trains a ``-generator_function sparsemax`` generator. Its value is reported where the NLL
    is (the NLL of a word outside the support is infinite)."""

    def __init__(self, pad_idx=PAD_ID):
        super().__init__()
        self.pad_idx = pad_idx

    def forward(self, scores, target):
        """``scores`` ``[N x V]`` (not normalised), ``target`` ``[N]`` -> (loss ``[N]``, loss
        ``[N]``)."""
        pad = target == self.pad_idx
        # bf16/fp16 scores: in float32
        scores = scores.to(torch.promote_types(scores.dtype, torch.float32))
        loss = sparsemax_loss(scores, target.masked_fill(pad, UNK_ID)).masked_fill(pad, 0)
        return loss, loss.detach()


class CopyGeneratorLoss(nn.Module):
    """Per-token copy loss: ``-log(p_vocab(w) + p_copy(w))``, 0 on padding.

    A target word that is in the source (alignment > 0) and in the vocabulary gets both terms; one
    that is in the source but out of the vocabulary (target ``<unk>``) gets the copy term alone; one
    that is not in the source gets the vocabulary term alone. With ``force_copy``, a word in the
    source always gets the copy term alone. Label smoothing spreads its mass over the fixed
    vocabulary.
    """

    def __init__(
        self, vocab_size, force_copy=False, label_smoothing=0.0, pad_idx=PAD_ID, unk_idx=UNK_ID
    ):
        super().__init__()
        self.vocab_size = vocab_size
        self.force_copy = force_copy
        self.label_smoothing = label_smoothing
        self.pad_idx = pad_idx
        self.unk_idx = unk_idx

    def forward(self, log_probs, align, target):
        """``log_probs`` ``[N x V + n]``, ``align`` ``[N]``, ``target`` ``[N]`` -> (loss, nll),
        ``[N]`` each."""
        pad = target == self.pad_idx
        vocab_lp = log_probs.gather(1, target.masked_fill(pad, self.unk_idx).unsqueeze(1)).squeeze(
            1
        )
        copy_lp = log_probs.gather(1, (align + self.vocab_size).unsqueeze(1)).squeeze(1)
        copyable = align != self.unk_idx
        use_vocab = ~copyable if self.force_copy else ~copyable | (target != self.unk_idx)
        neg_inf = torch.full_like(vocab_lp, float("-inf"))
        both = torch.stack(
            [torch.where(use_vocab, vocab_lp, neg_inf), torch.where(copyable, copy_lp, neg_inf)]
        )
        nll = -torch.logsumexp(both, dim=0).masked_fill(pad, 0)
        fixed = log_probs[:, : self.vocab_size]
        loss = smoothed(nll, fixed, self.label_smoothing, self.pad_idx).masked_fill(pad, 0)
        return loss, nll
