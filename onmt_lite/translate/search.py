"""One decode loop for beam search, greedy search (beam 1) and random sampling.

The loop works on ``B x K`` rows (B examples still searching, K beams each). Each step asks a
``stepper`` for log-probabilities ``[B*K x V']`` and attention ``{name: [B*K x S]}``, picks the K best
continuations per example (or samples one), and tells the stepper how to reorder its state. A
hypothesis that emits ``</s>`` (or reaches the maximum length) is finished and kept; an example stops
when it has ``n_best`` finished hypotheses and no live one can still beat the worst of them, so the
first of an n-best list is the 1-best. Examples that stop leave the batch.
"""
import dataclasses

import torch

from onmt_lite.translate.penalties import coverage_penalty, length_penalty
from onmt_lite.translate.topk import top_k

NEG_INF = float("-inf")


@dataclasses.dataclass
class SearchOptions:
    beam_size: int = 5
    n_best: int = 1
    min_length: int = 0
    max_length: int = 100
    ratio: float = 0.0
    length_penalty: str = "none"
    alpha: float = 0.0
    coverage_penalty: str = "none"
    beta: float = 0.0
    stepwise_penalty: bool = False
    block_ngram_repeat: int = 0
    ignore_when_blocking: tuple = ()
    sampling_topk: int = 0
    sampling_temp: float = 1.0
    sampling: bool = False


@dataclasses.dataclass
class Hypothesis:
    """A finished output: token ids (no ``<s>``, no ``</s>``), its score and log-probability, and each
    tracked attention ``[len x S]`` (one row per output token and ``</s>``)."""
    tokens: list
    score: float
    log_prob: float
    attention: dict


def block_ngrams(log_probs, seqs, n, ignore):
    """Forbid tokens that would repeat an n-gram already in each row of ``seqs`` ``[R x t]``.

    n-grams containing a token of ``ignore`` do not count. Vectorised over rows and positions.
    """
    if seqs.size(1) < n:
        return log_probs
    grams = seqs.unfold(1, n, 1)  # [R x (t - n + 1) x n]
    current = seqs[:, seqs.size(1) - n + 1:]  # the last n - 1 tokens: [R x n - 1]
    if n > 1:
        repeated = (grams[:, :, :-1] == current.unsqueeze(1)).all(2)
    else:
        repeated = torch.ones_like(grams[:, :, 0], dtype=torch.bool)
    if ignore:
        ignored = torch.tensor(sorted(ignore), device=seqs.device)
        repeated &= ~torch.isin(grams, ignored).any(2)
    # several n-grams can end in the same token: count the hits (a plain scatter_ would let any one win)
    hits = torch.zeros(log_probs.shape, dtype=torch.long, device=log_probs.device)
    hits.scatter_add_(1, grams[:, :, -1], repeated.long())
    return log_probs.masked_fill(hits > 0, NEG_INF)


def sample(log_probs, topk, temperature):
    """One token per row from ``softmax(log_probs / temperature)`` restricted to the top ``topk``."""
    logits = log_probs / max(temperature, 1e-10)
    if 0 < topk < logits.size(1):
        kth = logits.topk(topk, dim=1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, NEG_INF)
    return torch.multinomial(torch.softmax(logits, dim=1), 1)


class BeamState:
    """The rows of the search: sequences, cumulative scores, attention history, coverage."""

    def __init__(self, batch_size, beam_size, bos, src_lengths, max_lengths):
        device = src_lengths.device
        self.K = beam_size
        self.example = torch.arange(batch_size, device=device)  # original index of each example
        self.seqs = torch.full((batch_size * beam_size, 1), bos, dtype=torch.long, device=device)
        scores = torch.full((batch_size, beam_size), NEG_INF, device=device)
        scores[:, 0] = 0.0
        self.scores = scores
        self.attn = {}
        self.coverage = None
        self.src_mask = None
        self.max_lengths = max_lengths
        self.src_lengths = src_lengths
        self.penalty = torch.zeros(batch_size, beam_size, device=device)  # coverage penalty in the scores
        self.n_finished = torch.zeros(batch_size, dtype=torch.long, device=device)
        self.nth_best = torch.full((batch_size,), NEG_INF, device=device)  # score of the n-th best finished

    def advance(self, select, tokens, scores, attn):
        """Keep rows ``select`` ``[B*K]``, append ``tokens`` ``[B x K]``, record attention."""
        self.seqs = torch.cat([self.seqs[select], tokens.view(-1, 1)], 1)
        self.scores = scores
        self.penalty = self.penalty.view(-1)[select].view_as(scores)
        for name, value in attn.items():
            step = value[select].unsqueeze(0)
            self.attn[name] = step if name not in self.attn else torch.cat([self.attn[name][:, select], step])
        std = attn["std"][select]
        self.coverage = std if self.coverage is None else self.coverage[select] + std

    def keep(self, examples):
        """Keep only the examples ``examples`` (positions among the current ones); returns row indices."""
        rows = (examples.unsqueeze(1) * self.K + torch.arange(self.K, device=examples.device)).view(-1)
        self.seqs, self.scores, self.example = self.seqs[rows], self.scores[examples], self.example[examples]
        self.penalty = self.penalty[examples]
        self.attn = {name: value[:, rows] for name, value in self.attn.items()}
        self.coverage = self.coverage[rows]
        self.max_lengths, self.src_lengths = self.max_lengths[examples], self.src_lengths[examples]
        self.n_finished, self.nth_best = self.n_finished[examples], self.nth_best[examples]
        return rows


class Search:
    """Runs the loop for one batch; ``run(stepper)`` returns n-best Hypothesis lists per example."""

    def __init__(self, opts, bos, eos):
        self.opts, self.bos, self.eos = opts, bos, eos

    def _coverage_penalty(self, state):
        """The coverage penalty of every row ``[B x K]`` (padded source positions excluded)."""
        mask = (torch.arange(state.coverage.size(1), device=state.coverage.device).unsqueeze(0)
                < state.src_lengths.repeat_interleave(state.K).unsqueeze(1))
        return coverage_penalty(self.opts.coverage_penalty, state.coverage, self.opts.beta, mask).view_as(state.scores)

    def _stepwise(self, state):
        """-stepwise_penalty: keep the current coverage penalty inside the running scores."""
        penalty = self._coverage_penalty(state)
        state.scores = state.scores + state.penalty - penalty
        state.penalty = penalty

    def _final_scores(self, state, length):
        """Finishing scores of the rows: score / length penalty - coverage penalty (stepwise: the
        penalty is already in the score)."""
        o = self.opts
        scaled = state.scores / length_penalty(o.length_penalty, float(length), o.alpha)
        return scaled if o.stepwise_penalty else scaled - self._coverage_penalty(state)

    def _select(self, state, log_probs):
        """Pick the continuations: ``(select rows [B*K], tokens [B x K], new cumulative scores [B x K])``."""
        n_rows, width = log_probs.shape
        batch, K = state.scores.shape
        if self.opts.sampling:
            tokens = sample(log_probs, self.opts.sampling_topk, self.opts.sampling_temp)
            scores = state.scores + log_probs.gather(1, tokens)
            return torch.arange(n_rows, device=log_probs.device), tokens.view(batch, 1), scores
        total = log_probs.add_(state.scores.view(-1, 1)).view(batch, K * width)  # log_probs is not used again
        scores, ids = top_k(total, K)
        origin = torch.div(ids, width, rounding_mode="floor")
        select = (origin + torch.arange(batch, device=ids.device).unsqueeze(1) * K).view(-1)
        return select, ids % width, scores

    def _finish(self, state, tokens, finished, step):
        """Move ended rows into ``finished``; returns the mask of ended rows ``[B x K]``."""
        ended = (tokens == self.eos) | (step + 1 >= state.max_lengths).unsqueeze(1)
        ended &= state.scores > NEG_INF
        if not ended.any():
            return ended
        final = self._final_scores(state, step + 1)
        for b, k in ended.nonzero().tolist():
            row, original = b * state.K + k, state.example[b].item()
            seq = state.seqs[row, 1:]
            length = seq.numel() - int(seq[-1].item() == self.eos)
            attention = {name: value[:, row] for name, value in state.attn.items()}
            log_prob = (state.scores[b, k] + state.penalty[b, k]).item()
            finished[original].append(Hypothesis(seq[:length].tolist(), final[b, k].item(), log_prob, attention))
            finished[original].sort(key=lambda h: -h.score)
            state.n_finished[b] += 1
            if len(finished[original]) >= self.opts.n_best:
                state.nth_best[b] = finished[original][self.opts.n_best - 1].score
        return ended

    def _done(self, state):
        """Examples that cannot improve: enough finished hypotheses and no live row able to beat them."""
        # the log-probability alone bounds the final score: penalties are never negative (with
        # -stepwise_penalty the penalty in the running score may still shrink)
        best_alive = (state.scores + state.penalty).max(1).values
        bound = best_alive / length_penalty(self.opts.length_penalty, float(self.opts.max_length), self.opts.alpha)
        return ((state.n_finished >= self.opts.n_best) & (bound <= state.nth_best)) | (best_alive == NEG_INF)

    def run(self, stepper, batch_size, src_lengths):
        o = self.opts
        max_lengths = torch.full_like(src_lengths, o.max_length)
        if o.ratio > 0:
            max_lengths = torch.minimum(max_lengths, (src_lengths.float() * o.ratio).ceil().long().clamp(min=1))
        state = BeamState(batch_size, 1 if o.sampling else o.beam_size, self.bos, src_lengths, max_lengths)
        finished = [[] for _ in range(batch_size)]
        for step in range(o.max_length):
            log_probs, attn = stepper.step(state.seqs[:, -1])
            if step < o.min_length:
                log_probs[:, self.eos] = NEG_INF
            if o.block_ngram_repeat > 0:
                log_probs = block_ngrams(log_probs, state.seqs[:, 1:], o.block_ngram_repeat, o.ignore_when_blocking)
            select, tokens, scores = self._select(state, log_probs)
            state.advance(select, tokens, scores, attn)
            if o.stepwise_penalty:
                self._stepwise(state)
            ended = self._finish(state, tokens, finished, step)
            state.scores = state.scores.masked_fill(ended, NEG_INF)
            done = self._done(state)
            if done.all():
                break
            rows, memory_rows = select, None
            if done.any():
                remaining = (~done).nonzero().view(-1)
                rows = select.view(-1, state.K)[remaining].view(-1)
                memory_rows = state.keep(remaining)
            stepper.reorder(rows, memory_rows)
        return [hyps[: o.n_best] for hyps in finished]
