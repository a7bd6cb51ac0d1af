"""Generators (decoder output -> log-probabilities), with and without copying, and the copy scores'
collapse onto the fixed vocabulary. The criteria that score their output are in ``onmt_lite.loss``.

Shapes: N rows (target positions x batch, time-major), H hidden, V target vocabulary,
S source length, B batch, n words in the largest per-example source vocabulary.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

from onmt_lite.data.vocab import PAD_ID
from onmt_lite.models.projection import project
from onmt_lite.models.sparsemax import log_sparsemax
from onmt_lite.utils.stock import stock_forward
from onmt_lite.utils.topk import row_argmax

TINY = 1e-20  # floor of copy probabilities before the log: no log(0), no NaN


def at_least_float32(tensor):
    """``tensor`` in float32 if it is float16 or bfloat16 (autocast's output), else unchanged."""
    if tensor.dtype in (torch.float16, torch.bfloat16):
        return tensor.float()
    return tensor


def log_softmax_(logits):
    """``log_softmax(logits, -1)`` written over ``logits`` (contiguous, no autograd) and returned:
    the same kernel and values without a fresh ``[N x V]`` buffer to fill, which would be out of
    cache."""
    return torch.log_softmax(logits, -1, out=logits)


@stock_forward
class NMTGenerator(nn.Sequential):
    """``[N x H]`` -> ``[N x V]`` log-probabilities (Linear + LogSoftmax). Training with
    ``NMTCriterion`` fuses the two while ``forward`` is the one defined here
    (``utils.stock.is_stock``)."""

    def __init__(self, hidden_size, vocab_size):
        super().__init__(nn.Linear(hidden_size, vocab_size), nn.LogSoftmax(dim=-1))

    def forward(self, hidden):
        scores = project(self[0], hidden)
        if torch.is_grad_enabled():
            return self[1](scores)
        # decoding: log-probabilities in float32 whatever the model's precision (-precision)
        return log_softmax_(at_least_float32(scores).contiguous())


class LogSparsemax(nn.Module):
    """``log(sparsemax(x))`` along ``dim``: ``-inf`` outside the support (1.x's LogSparsemax)."""

    def __init__(self, dim=-1):
        super().__init__()
        self.dim = dim

    def forward(self, scores):
        return log_sparsemax(scores, self.dim)


class SparsemaxGenerator(nn.Sequential):
    """``[N x H]`` -> ``[N x V]`` log-probabilities ``log(sparsemax(W h + b))`` (Linear +
    LogSparsemax; the state dict of ``NMTGenerator``): ``-inf`` for the words outside the support.
    ``scores`` gives ``W h + b`` alone, what the sparsemax loss is trained on."""

    def __init__(self, hidden_size, vocab_size):
        super().__init__(nn.Linear(hidden_size, vocab_size), LogSparsemax(dim=-1))

    def scores(self, hidden):
        """The raw scores ``[N x V]`` of ``hidden`` ``[N x H]``."""
        return project(self[0], hidden)

    def forward(self, hidden):
        return self[1](at_least_float32(self.scores(hidden)))


class CopyGenerator(nn.Module):
    """Pointer-generator (See et al. 2017) over the target vocabulary plus each example's source
    words.

    ``p_copy = sigmoid(w·h)``; the output is
    ``[(1 - p_copy) softmax(W h) ; p_copy * attn @ src_map]``, returned as log-probabilities
    ``[N x V + n]``. The padding word gets probability 0.
    """

    def __init__(self, hidden_size, vocab_size, pad_idx=PAD_ID):
        super().__init__()
        self.linear = nn.Linear(hidden_size, vocab_size)
        self.linear_copy = nn.Linear(hidden_size, 1)
        self.pad_idx = pad_idx

    def forward(self, hidden, attn, src_map, rows=None):
        """``hidden`` ``[N x H]``, ``attn`` ``[N x S]`` (copy attention), ``src_map``
        ``[S x B x n]``; the N rows are time-major (row ``t * B + b``). ``rows``, ``[M]`` row
        indices, asks for those rows alone (``[M x V + n]``): the vocabulary projection, the costly
        part, then skips the rest (the loss leaves out padding positions so)."""
        src_len, batch, n_words = src_map.shape
        # The copy branch in float32 under autocast: in float16, TINY and a rare word's copy
        # probability are 0, and log(0)'s infinite gradient times 0 is NaN in every backward.
        with torch.autocast(hidden.device.type, enabled=False):
            per_example = at_least_float32(attn).view(-1, batch, src_len)  # [T x B x S]
            per_example = per_example.transpose(0, 1)  # [B x T x S]
            words = src_map.to(per_example.dtype).transpose(0, 1)  # [B x S x n]
            copy_prob = torch.bmm(per_example, words)  # [B x T x n]
            copy_prob = copy_prob.transpose(0, 1).reshape(-1, n_words)  # [N x n], row t * B + b
        if rows is not None:
            hidden = hidden[rows]
            copy_prob = copy_prob[rows]
        logits = at_least_float32(project(self.linear, hidden))  # [M x V]
        logits[:, self.pad_idx] = float("-inf")
        gate = at_least_float32(self.linear_copy(hidden))  # [M x 1]
        log_copy = torch.log(copy_prob.clamp_min(TINY))  # [M x n]
        if torch.is_grad_enabled():  # training: a differentiable concatenation
            log_vocab = F.log_softmax(logits, dim=-1)
            return torch.cat(
                [log_vocab + F.logsigmoid(-gate), log_copy + F.logsigmoid(gate)], dim=1
            )
        log_vocab = log_softmax_(logits.contiguous())
        # inference: the same sums written straight into their halves of the output, a pass over
        # [N x V] fewer
        out = logits.new_empty(logits.size(0), logits.size(1) + n_words)
        torch.add(log_vocab, F.logsigmoid(-gate), out=out[:, : logits.size(1)])
        torch.add(log_copy, F.logsigmoid(gate), out=out[:, logits.size(1) :])
        return out


def _copy_entries(scores, src_ex_tgt_ids, vocab_size):
    """The fixed-vocabulary part ``[... x V]`` and the copy part ``[... x n]`` of ``scores``
    (views), the vocabulary id of each copy entry's word and whether the vocabulary has it
    (``[... x n]``)."""
    fixed = scores[..., :vocab_size]
    copy = scores[..., vocab_size:]
    ids = src_ex_tgt_ids.expand_as(copy)
    return fixed, copy, ids, ids != 0


def collapse_copy_scores(probs, src_ex_tgt_ids, vocab_size):
    """Move the copy probability of each source word onto its entry in the fixed vocabulary.

    Args:
        probs: ``[... x V + n]`` probabilities (not log).
        src_ex_tgt_ids: target-vocabulary id of each example word, broadcastable to
            ``probs[..., V:]`` (0 = not in the vocabulary: that copy entry stays where it is).
    Returns:
        probabilities of the same shape and the same total: copy entries of words in the
        vocabulary become 0 and their mass is added to the word's vocabulary entry.
    """
    fixed, copy, ids, in_vocab = _copy_entries(probs, src_ex_tgt_ids, vocab_size)
    fixed = fixed.scatter_add(-1, ids, copy * in_vocab)
    return torch.cat([fixed, copy.masked_fill(in_vocab, 0)], dim=-1)


def collapsed_argmax(log_probs, src_ex_tgt_ids, vocab_size):
    """The argmax of ``collapse_copy_scores(log_probs.exp(), src_ex_tgt_ids, vocab_size)``, ``[N]``,
    without building that ``[N x V + n]`` matrix.

    Collapsing only raises the fixed entries of the example's own words (by their copy probability),
    so the winner is either the best fixed entry or one of the n entries of the example's words:
    those are compared in log space (``logaddexp`` of the fixed and the copy term).
    """
    fixed, copy, ids, in_vocab = _copy_entries(log_probs, src_ex_tgt_ids, vocab_size)
    best_fixed_id = row_argmax(fixed)
    best_fixed = fixed.gather(1, best_fixed_id.unsqueeze(1)).squeeze(1)
    collapsed = torch.where(in_vocab, torch.logaddexp(fixed.gather(1, ids), copy), copy)  # [N x n]
    best_word, j = collapsed.max(1)
    j = j.unsqueeze(1)
    word_id = torch.where(in_vocab.gather(1, j), ids.gather(1, j), j + vocab_size).squeeze(1)
    return torch.where(best_word > best_fixed, word_id, best_fixed_id)


def collapse_copy_log_probs(log_probs, src_ex_tgt_ids, vocab_size):
    """``log(collapse_copy_scores(log_probs.exp(), src_ex_tgt_ids, vocab_size))``, computed in place
    on ``log_probs`` ``[N x V + n]`` and returned: only the entries of each example's own words
    change (the fixed entry of a word the vocabulary has becomes ``logaddexp`` of both terms, its
    copy entry ``-inf``), so no pass over the whole matrix is needed beyond the caller's."""
    fixed, copy, ids, in_vocab = _copy_entries(log_probs, src_ex_tgt_ids, vocab_size)
    current = fixed.gather(1, ids)
    fixed.scatter_(1, ids, torch.where(in_vocab, torch.logaddexp(current, copy), current))
    copy.masked_fill_(in_vocab, float("-inf"))
    return log_probs
