"""One decode loop for beam search, greedy search (beam 1) and random sampling.

The loop works on ``B x K`` rows (B examples still searching, K beams each). Each step asks a
``stepper`` for log-probabilities ``[rows x V']`` and attention ``{name: [rows x S]}``, picks the K best
continuations per example (or samples one), and tells the stepper how to reorder its state. A
hypothesis that emits ``</s>`` (or reaches the maximum length) is finished and kept; an example stops
when it has ``n_best`` finished hypotheses and no live one can still beat the worst of them, so the
first of an n-best list is the 1-best. Examples that stop leave the batch; with ``stream`` (continuous
batching) waiting examples take their place at once, each example counting its own length.

An example joins with one row in the stepper: its K beams would be alike until its first step, so
the stepper computes that step once, and the reorder after it gives the example its K rows.

An example may join with a target prefix (``-tgt_prefix``): while it has produced fewer tokens than
its prefix, each of its rows can only take the prefix's next token, at the model's log-probability
(every other token is -inf, end-of-sentence too), so its beam holds one live hypothesis until the
prefix ends; the search then goes on freely. The prefix counts in the output, its score and its
length (-min_length, -max_length, -ratio), but an example's maximum is never shorter than its prefix.
A ``recorder`` (``beam_dump.BeamRecorder``) is told each step's kept hypotheses (``-dump_beam``).
"""
import dataclasses
import math

import torch

from onmt_lite.translate.beam_state import NEG_INF, BeamState
from onmt_lite.translate.penalties import coverage_penalty, length_penalty
from onmt_lite.utils.errors import UserError
from onmt_lite.utils.topk import top_k, top_k_with_offsets


def require_whole(name, value, least):
    """A UserError naming ``name`` unless ``value`` is a whole number (not a bool) of at least ``least``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise UserError(f"{name} must be a whole number of at least {least} (got {value!r})")


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
    attention: bool = True  # keep each hypothesis's attention (else Hypothesis.attention is {})

    def __post_init__(self):
        """The checks the command line makes, for the library too: a UserError naming the field."""
        whole = {"beam_size": 1, "n_best": 1, "min_length": 0, "max_length": 1, "block_ngram_repeat": 0,
                 "sampling_topk": 0}
        for name, least in whole.items():
            require_whole(name, getattr(self, name), least)
        for name in ("ratio", "alpha", "beta", "sampling_temp"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or math.isnan(value):
                raise UserError(f"{name} must be a number (got {value!r})")
        if self.ratio < 0 or self.sampling_temp <= 0:
            raise UserError(f"ratio must be at least 0 and sampling_temp above 0 (got {self.ratio}, "
                            f"{self.sampling_temp})")
        if not all(math.isfinite(getattr(self, name)) for name in ("alpha", "beta")):
            raise UserError(f"alpha and beta must be finite (got {self.alpha}, {self.beta})")
        for name, allowed in (("length_penalty", ("none", "wu", "avg")),
                              ("coverage_penalty", ("none", "wu", "summary"))):
            if getattr(self, name) not in allowed:
                raise UserError(f"{name} must be one of {', '.join(allowed)} (got {getattr(self, name)!r})")
        if not self.sampling and self.n_best > self.beam_size:
            raise UserError(f"n_best {self.n_best} is larger than beam_size {self.beam_size}")

    @property
    def beam_width(self):
        """Rows per example: the beam size, 1 when sampling."""
        return 1 if self.sampling else self.beam_size


@dataclasses.dataclass
class Hypothesis:
    """A finished output: token ids (no ``<s>``, no ``</s>``), its score and log-probability, and each
    tracked attention ``[len x S]`` (one row per output token and ``</s>``)."""
    tokens: list
    score: float
    log_prob: float
    attention: dict
    end: tuple = ()  # (step, beam): where the hypothesis ended, counting its example's steps from 0


def block_ngrams(log_probs, seqs, n, ignore, first=None):
    """Forbid tokens that would repeat an n-gram already in each row of ``seqs`` ``[R x t]``.

    n-grams containing a token of ``ignore`` do not count, nor those starting before ``first`` ``[R]``
    (the first column of each row's own tokens; None: all columns). Vectorised over rows and positions.
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
    if first is not None:
        repeated &= torch.arange(grams.size(1), device=seqs.device).unsqueeze(0) >= first.unsqueeze(1)
    # several n-grams can end in the same token: count the hits (a plain scatter_ would let any one win)
    hits = torch.zeros(log_probs.shape, dtype=torch.long, device=log_probs.device)
    hits.scatter_add_(1, grams[:, :, -1], repeated.long())
    return log_probs.masked_fill(hits > 0, NEG_INF)


def force_tokens(log_probs, model_log_probs, rows, tokens):
    """``log_probs`` ``[R x V]`` with rows ``rows`` ``[F]`` able to take only ``tokens`` ``[F x 1]``, at
    their log-probability in ``model_log_probs`` (before any blocking: a prefix is taken whatever it
    repeats)."""
    kept = model_log_probs[rows].gather(1, tokens)
    only = torch.full((rows.numel(), log_probs.size(1)), NEG_INF, dtype=log_probs.dtype, device=log_probs.device)
    return log_probs.index_copy(0, rows, only.scatter_(1, tokens, kept))


def sample(log_probs, topk, temperature):
    """One token per row from ``softmax(log_probs / temperature)`` restricted to the top ``topk``."""
    logits = log_probs / max(temperature, 1e-10)
    if 0 < topk < logits.size(1):
        kth = logits.topk(topk, dim=1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, NEG_INF)
    return torch.multinomial(torch.softmax(logits, dim=1), 1)


def completed(hyps, n_best):
    """The first ``n_best`` of ``hyps``, completed with empty hypotheses of score ``-inf`` when fewer
    finished: every other continuation had probability 0 (a sparsemax generator, blocked n-grams),
    and an n-best list always has ``n_best`` entries (the output's lines follow from it)."""
    impossible = [Hypothesis([], NEG_INF, NEG_INF, {}) for _ in range(n_best - len(hyps))]
    return hyps[:n_best] + impossible


class Search:
    """Runs the loop for one batch; ``run(stepper)`` returns n-best Hypothesis lists per example."""

    def __init__(self, opts, bos, eos, recorder=None):
        self.opts, self.bos, self.eos, self.recorder = opts, bos, eos, recorder

    def _coverage_penalty(self, state):
        """The coverage penalty of every row ``[B x K]`` (padded source positions excluded)."""
        if self.opts.coverage_penalty == "none":
            return torch.zeros_like(state.scores)
        mask = (torch.arange(state.coverage.size(1), device=state.coverage.device).unsqueeze(0)
                < state.src_lengths.repeat_interleave(state.K).unsqueeze(1))
        return coverage_penalty(self.opts.coverage_penalty, state.coverage, self.opts.beta, mask).view_as(state.scores)

    def _stepwise(self, state):
        """-stepwise_penalty: keep the current coverage penalty inside the running scores."""
        penalty = self._coverage_penalty(state)
        state.scores = state.scores + state.penalty - penalty
        state.penalty = penalty

    def _final_scores(self, state):
        """Finishing scores of the rows: score / length penalty - coverage penalty (stepwise: the
        penalty is already in the score)."""
        o = self.opts
        scaled = state.scores
        if o.length_penalty != "none":
            scaled = scaled / length_penalty(o.length_penalty, state.lengths().unsqueeze(1).float(), o.alpha)
        return scaled if o.stepwise_penalty else scaled - self._coverage_penalty(state)

    def _select(self, state, log_probs):
        """Pick the continuations: ``(select rows [B*K], tokens [B x K], new cumulative scores [B x K])``;
        ``select`` is None when every row stays where it is (one row per example)."""
        width = log_probs.size(1)
        batch, K = state.scores.shape
        if self.opts.sampling:
            tokens = sample(log_probs, self.opts.sampling_topk, self.opts.sampling_temp)
            return None, tokens.view(batch, 1), state.scores + log_probs.gather(1, tokens)
        if K == 1:  # the best token of each row: adding the row's score does not change which
            best, tokens = top_k(log_probs, 1)
            return None, tokens, state.scores + best
        scores, ids = top_k_with_offsets(log_probs, state.scores, K, state.stepped)
        # a dead candidate (-inf: fewer live continuations than beams, as inside a target prefix) follows the
        # example's first row: a row the stepper holds, whose memory is the example's own
        origin = torch.div(ids, width, rounding_mode="floor").masked_fill(scores == NEG_INF, 0)
        select = (origin + torch.arange(batch, device=ids.device).unsqueeze(1) * K).view(-1)
        return select, ids % width, scores

    def _finish(self, state, tokens, finished):
        """Move ended rows into ``finished``; returns the mask of ended rows ``[B x K]``."""
        ended = (tokens == self.eos) | (state.lengths() >= state.max_lengths).unsqueeze(1)
        ended &= state.scores != NEG_INF  # a row already ended is -inf; a NaN score still ends
        if not ended.any():
            return ended
        b, k = ended.nonzero().unbind(1)
        rows = b * state.K + k
        final = self._final_scores(state)[b, k].tolist()
        log_probs = (state.scores[b, k] + state.penalty[b, k]).tolist()
        seqs = state.seqs[rows].tolist()
        examples, cols, src_lengths = state.example[b].tolist(), state.col[b].tolist(), state.src_lengths[b].tolist()
        steps, beams = (state.lengths()[b] - 1).tolist(), k.tolist()
        for i, row in enumerate(rows.tolist()):
            col = cols[i]
            seq = seqs[i][col + 1:]
            if seq[-1] == self.eos:
                seq.pop()
            # a copy on the CPU: a view would keep the whole history alive (and be pickled whole by a
            # stream), and a Result's attention is read on the host (-replace_unk, plots, the API)
            attention = {name: value[col:, row, :src_lengths[i]].to("cpu", copy=True)
                         for name, value in state.attn.items()}
            hyps = finished[examples[i]]
            hyps.append(Hypothesis(seq, final[i], log_probs[i], attention, (steps[i], beams[i])))
            hyps.sort(key=lambda h: -h.score)
        state.n_finished += ended.sum(1)
        for position, example in dict(zip(b.tolist(), examples)).items():
            hyps = finished[example]
            if len(hyps) >= self.opts.n_best:
                state.nth_best[position] = hyps[self.opts.n_best - 1].score
        return ended

    def _done(self, state):
        """Examples that cannot improve: enough finished hypotheses and no live row able to beat them."""
        # the log-probability alone bounds the final score: penalties are never negative (with
        # -stepwise_penalty the penalty in the running score may still shrink)
        best_alive = (state.scores + state.penalty).max(1).values
        o, bound = self.opts, best_alive
        if o.length_penalty != "none":
            # a live row ends at a length from its own + 1 to its example's maximum; its score is not
            # positive, so the largest length penalty there (at either end: it is monotonic) bounds it
            penalty = torch.maximum(length_penalty(o.length_penalty, (state.lengths() + 1).float(), o.alpha),
                                    length_penalty(o.length_penalty, state.max_lengths.float(), o.alpha))
            bound = best_alive / penalty
        return ((state.n_finished >= o.n_best) & (bound <= state.nth_best)) | (best_alive == NEG_INF)

    def _max_lengths(self, src_lengths):
        """The most tokens each example may produce: -max_length, or less with -ratio."""
        max_lengths = torch.full_like(src_lengths, self.opts.max_length)
        if self.opts.ratio > 0:  # bounded as floats: an infinite ratio is no bound, not an overflow
            ratio_lengths = (src_lengths.float() * self.opts.ratio).ceil().clamp(1, self.opts.max_length).long()
            max_lengths = torch.minimum(max_lengths, ratio_lengths)
        return max_lengths

    def _record(self, state, select, tokens, log_probs, rows):
        """Tell the recorder the hypotheses kept at this step: tokens, parents (positions in the
        example's beam), cumulative scores and the tokens' log-probabilities, each ``[B x K]``."""
        batch, K = tokens.shape
        parents = torch.zeros_like(tokens) if select is None else select.view(batch, K) % K
        stepped = log_probs if rows is None else log_probs.index_select(0, rows)
        self.recorder.record(state.example, tokens, parents, state.scores,
                             stepped.gather(1, tokens.view(-1, 1)).view(batch, K))

    def run(self, stepper, batch_size, src_lengths, prefix=None):
        """Decode one batch whose rows ``stepper`` holds (``prefix``: see ``stream``); n-best
        Hypothesis lists in batch order."""
        finished = dict(self.stream(OneBatch(stepper, batch_size, src_lengths, prefix)))
        return [finished[b] for b in range(batch_size)]

    def stream(self, feeder):
        """Decode the examples ``feeder`` lets in, as they come; yields ``(example id, n-best list)``
        as each example is done.

        ``feeder.admit(src_lengths)`` is asked before each step, with the source lengths of the
        examples still searching ``[B]``: it appends the rows of the examples joining now (if any; one
        row each) to ``feeder.stepper`` and returns their ids, source lengths and target prefixes
        (``(tokens [n x P], lengths [n])``, or None without prefixes), or None.
        ``feeder.dropped(example)``, after each step, names the examples to end now, unfinished
        (their callers gave up): a mask ``[B]`` of ``state.example``, or None. They are yielded too.
        """
        o = self.opts
        state = BeamState(o.beam_width, self.bos, feeder.device, o.attention, o.coverage_penalty != "none")
        finished = {}
        while True:
            joining = feeder.admit(state.src_lengths)
            if joining is not None:
                ids, src_lengths, prefix = joining
                max_lengths = self._max_lengths(src_lengths)
                state.add(ids, src_lengths, max_lengths if prefix is None else torch.maximum(max_lengths, prefix[1]),
                          prefix)
                finished.update((i, []) for i in ids.tolist())
            if state.example.numel() == 0:
                return
            log_probs, attn = feeder.stepper.step(state.of_stepped(state.seqs[:, -1]))
            if o.min_length > 0:
                short = state.of_stepped((state.lengths() < o.min_length).repeat_interleave(state.K))
                log_probs[:, self.eos].masked_fill_(short, NEG_INF)
            model_log_probs = log_probs
            if o.block_ngram_repeat > 0:
                log_probs = block_ngrams(log_probs, state.of_stepped(state.seqs[:, 1:]), o.block_ngram_repeat,
                                         o.ignore_when_blocking, state.of_stepped(state.col.repeat_interleave(state.K)))
            forced = state.forced()
            if forced is not None:
                log_probs = force_tokens(log_probs, model_log_probs, *forced)
            joined = state.stepped is not None
            select, tokens, scores = self._select(state, log_probs)
            rows = state.advance(select, tokens, scores, attn)
            if o.stepwise_penalty:
                self._stepwise(state)
            if self.recorder is not None:
                self._record(state, select, tokens, log_probs, rows)
            ended = self._finish(state, tokens, finished)
            state.scores = state.scores.masked_fill(ended, NEG_INF)
            done = self._done(state)
            dropped = feeder.dropped(state.example)
            if dropped is not None:
                done = done | dropped
            leaving = bool(done.any())
            if leaving:
                for original in state.example[done].tolist():
                    yield original, completed(finished.pop(original), o.n_best)
                remaining = (~done).nonzero().view(-1)
                rows = remaining if rows is None else rows.view(-1, state.K)[remaining].view(-1)
                state.keep(remaining)
            # the rows of an example share its memory: rows that stay in their example can name it
            if rows is not None:
                feeder.stepper.reorder(rows, rows if joined or leaving else None)


class OneBatch:
    """The feeder of a single batch whose rows the stepper already holds: all join at once."""

    def __init__(self, stepper, batch_size, src_lengths, prefix=None):
        self.stepper, self.device = stepper, src_lengths.device
        self.waiting = (torch.arange(batch_size, device=self.device), src_lengths, prefix)

    def admit(self, src_lengths):
        joining, self.waiting = self.waiting, None
        return joining

    def dropped(self, example):
        return None
