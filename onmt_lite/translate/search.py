"""One decode loop for beam search, greedy search (beam 1) and random sampling.

The loop works on ``B x K`` rows (B examples still searching, K beams each). Each step asks a
``stepper`` for log-probabilities ``[rows x V']`` and attention ``{name: [rows x S]}``, picks the K
best continuations per example (or samples one), and tells the stepper how to reorder its state. A
hypothesis that emits ``</s>`` (or reaches the maximum length) is finished and kept; an example
stops when it has ``n_best`` finished hypotheses and no live one can still beat the worst of them,
so the first of an n-best list is the 1-best. Examples that stop leave the batch; with ``stream``
(continuous batching) waiting examples take their place as the feeder lets them in, each example
counting its own length.

An example joins a beam search with one row in the stepper: its K beams would be alike until its
first step, so the stepper computes that step once, and the reorder after it gives the example its
K rows. A stepper whose step costs the same whatever rows it holds (``fixed_rows``: -cuda_graphs)
takes the K rows at once instead, and there an example that is done stays, idle, until one joining
takes its rows (slots): idle rows are still scored, selected and ended at each step, and what they
do is never read (``_read``, ``stream``).

An example may join with a target prefix (``-tgt_prefix``): while it has produced fewer tokens than
its prefix, each of its rows can only take the prefix's next token, at the model's log-probability
(every other token is -inf, end-of-sentence too), so its beam holds one live hypothesis until the
prefix ends; the search then goes on freely. The prefix counts in the output, its score and its
length (-min_length, -max_length, -max_length_ratio), but an example's maximum is never shorter
than its prefix. A ``recorder`` (``beam_dump.BeamRecorder``) is told each step's kept hypotheses
(``-dump_beam``).
"""

import dataclasses
import math

import torch

from onmt_lite.translate.beam_state import NEG_INF, BeamState, Joining
from onmt_lite.translate.finished import FinishedHypotheses, Hypothesis
from onmt_lite.translate.penalties import Penalties, check_penalties
from onmt_lite.utils.errors import UserError
from onmt_lite.utils.host_syncs import declare_host
from onmt_lite.utils.tensors import from_host
from onmt_lite.utils.topk import top_k, top_k_with_offsets


def require_whole(name, value, least):
    """A UserError naming ``name`` unless ``value`` is a whole number (not a bool) of at least
    ``least``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise UserError(f"{name} must be a whole number of at least {least} (got {value!r})")


@dataclasses.dataclass
class SearchOptions:
    beam_size: int = 5
    n_best: int = 1
    min_length: int = 0
    max_length: int = 100
    max_length_ratio: float = 0.0
    ratio: float = 0.0  # 1.x's early stop of a beam by a score heuristic (``Penalties.done``)
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
        whole = {
            "beam_size": 1,
            "n_best": 1,
            "min_length": 0,
            "max_length": 1,
            "block_ngram_repeat": 0,
            "sampling_topk": 0,
        }
        for name, least in whole.items():
            require_whole(name, getattr(self, name), least)
        for name in ("max_length_ratio", "ratio", "alpha", "beta", "sampling_temp"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or math.isnan(value):
                raise UserError(f"{name} must be a number (got {value!r})")
        for name in ("max_length_ratio", "ratio"):
            if getattr(self, name) < 0:
                raise UserError(f"{name} must be at least 0 (got {getattr(self, name)})")
        if self.sampling_temp <= 0:
            raise UserError(f"sampling_temp must be above 0 (got {self.sampling_temp})")
        if not all(math.isfinite(getattr(self, name)) for name in ("alpha", "beta")):
            raise UserError(f"alpha and beta must be finite (got {self.alpha}, {self.beta})")
        for name, allowed in (
            ("length_penalty", ("none", "wu", "avg")),
            ("coverage_penalty", ("none", "wu", "summary")),
        ):
            if getattr(self, name) not in allowed:
                raise UserError(
                    f"{name} must be one of {', '.join(allowed)} (got {getattr(self, name)!r})"
                )
        check_penalties(self.coverage_penalty, self.beta)
        if not self.sampling and self.n_best > self.beam_size:
            raise UserError(f"n_best {self.n_best} is larger than beam_size {self.beam_size}")

    @property
    def beam_width(self):
        """Rows per example: the beam size, 1 when sampling."""
        return 1 if self.sampling else self.beam_size


def block_ngrams(log_probs, seqs, n, ignore, first=None):
    """Forbid tokens that would repeat an n-gram already in each row of ``seqs`` ``[R x t]``.

    n-grams containing a token of ``ignore`` do not count, nor those starting before ``first``
    ``[R]`` (the first column of each row's own tokens; None: all columns). Vectorised over rows and
    positions.
    """
    if seqs.size(1) < n:
        return log_probs
    grams = seqs.unfold(1, n, 1)  # [R x (t - n + 1) x n]
    current = seqs[:, seqs.size(1) - n + 1 :]  # the last n - 1 tokens: [R x n - 1]
    if n > 1:
        repeated = (grams[:, :, :-1] == current.unsqueeze(1)).all(2)
    else:
        repeated = torch.ones_like(grams[:, :, 0], dtype=torch.bool)
    if ignore:
        ignored = torch.tensor(sorted(ignore), device=seqs.device)
        repeated &= ~torch.isin(grams, ignored).any(2)
    if first is not None:
        repeated &= torch.arange(grams.size(1), device=seqs.device).unsqueeze(0) >= first.unsqueeze(
            1
        )
    # several n-grams can end in the same token: count the hits (a plain scatter_ would let any one
    # win)
    hits = torch.zeros(log_probs.shape, dtype=torch.long, device=log_probs.device)
    hits.scatter_add_(1, grams[:, :, -1], repeated.long())
    return log_probs.masked_fill(hits > 0, NEG_INF)


def force_tokens(log_probs, model_log_probs, rows, tokens):
    """``log_probs`` ``[R x V]`` with rows ``rows`` ``[F]`` able to take only ``tokens``
    ``[F x 1]``, at their log-probability in ``model_log_probs`` (before any blocking: a prefix is
    taken whatever it repeats)."""
    kept = model_log_probs[rows].gather(1, tokens)
    only = torch.full(
        (rows.numel(), log_probs.size(1)), NEG_INF, dtype=log_probs.dtype, device=log_probs.device
    )
    return log_probs.index_copy(0, rows, only.scatter_(1, tokens, kept))


def fixed_rows(stepper) -> bool:
    """Whether ``stepper``'s step costs the same whatever rows it holds (``-cuda_graphs``'
    ``GraphedStepper``): examples then join with their whole beams and, done, stay idle until
    joining ones take their rows (``BeamState``'s slots). A stepper without the attribute
    computes the rows it holds."""
    return getattr(stepper, "fixed_rows", False)


def sample(log_probs, topk, temperature):
    """One token per row from ``softmax(log_probs / temperature)`` restricted to the top
    ``topk``."""
    logits = log_probs / max(temperature, 1e-10)
    if 0 < topk < logits.size(1):
        kth = logits.topk(topk, dim=1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, NEG_INF)
    return torch.multinomial(torch.softmax(logits, dim=1), 1)


class Search:
    """Runs the loop; ``run(stepper, ...)`` decodes one batch, ``stream(feeder)`` a stream of them.

    ``recorder``: told each step's kept hypotheses (``beam_dump.BeamRecorder``, -dump_beam); it
    reads them on the host, a wait for the device at every step.
    """

    def __init__(self, opts: SearchOptions, bos: int, eos: int, recorder=None):
        self.opts = opts
        self.bos = bos
        self.eos = eos
        self.recorder = recorder
        self.penalties = Penalties(opts)

    def run(
        self, stepper, batch_size: int, src_lengths, prefix: list | None = None, device=None
    ) -> list[list[Hypothesis]]:
        """Decode one batch whose rows ``stepper`` holds; n-best lists in batch order.
        ``src_lengths``: the examples' source lengths, a list (or a tensor, read here);
        ``prefix``: each example's target prefix ids (lists), or None; ``device``: the
        stepper's (default: ``src_lengths``', the CPU for a list)."""
        if torch.is_tensor(src_lengths):
            device = device or src_lengths.device
            src_lengths = src_lengths.tolist()
        joining = Joining(list(range(batch_size)), list(src_lengths), prefix)
        feeder = OneBatch(stepper, joining, torch.device(device or "cpu"))
        finished = dict(self.stream(feeder))
        return [finished[b] for b in range(batch_size)]

    def stream(self, feeder):
        """Decode the examples ``feeder`` lets in, as they come; yields ``(example id, n-best
        list)`` as each example is done.

        ``feeder.admit(src_lengths)`` is asked before each step, with the source lengths of the
        examples still searching (a host list): it appends the rows of the examples joining now (if
        any; one row each, K on a ``fixed_rows`` stepper) to ``feeder.stepper`` and returns their
        ``Joining``, or None.
        ``feeder.dropped(ids)``, after each step, names the examples (a set of ids, or None) to end
        now, unfinished (their callers gave up). They are yielded too.
        Where ``feeder.stepper`` has ``fixed_rows``, ``admit(src_lengths, slots)`` is given the
        positions of the idle examples, whose rows the first examples joining take (in order).

        Each step reads the device once: which rows ended and which examples are done. An example
        that is done is yielded at the next step's read, when the copies of its last hypotheses
        have reached the host (``finished.FinishedHypotheses``). It leaves the search at once, or,
        on a ``fixed_rows`` stepper, stays idle until an example joining takes its place (its
        rows' step costs nothing there, and a leaving group's copy of every buffer does).
        """
        o = self.opts
        coverage = o.coverage_penalty != "none"
        state = BeamState(
            o.beam_width,
            o.n_best,
            self.bos,
            feeder.device,
            o.attention,
            coverage,
            with_penalty=o.stepwise_penalty,
            with_average=o.ratio > 0 and o.beam_width > 1,
        )
        finished = FinishedHypotheses(self.eos, o.n_best)
        left: list[int] = []  # the examples that were done at the last step
        while True:
            self._refill(state, feeder, finished)
            if not state.n_live:
                break
            spreading = state.stepped is not None  # first rows to spread to their K beams
            log_probs, attn = feeder.stepper.step(state.inputs())  # score
            log_probs = self._constrain(state, log_probs)
            select, tokens, scores = self._select(state, log_probs)  # select
            rows = state.advance(select, tokens, scores, attn)
            if o.stepwise_penalty:
                state.set_penalty(self.penalties.coverage(state))
            if self.recorder is not None:
                self._record(state, select, tokens, log_probs, rows)
            ended = state.ended(tokens, self.eos)  # finish
            final = self.penalties.final_scores(state)
            ended_log_probs = state.finish(ended, final)
            ended_rows, done = self._read(state, ended, self.penalties.done(state, final, ended))
            finished.settle()  # the last step's copies are on the host now
            for example in left:
                yield example, finished.pop(example, o.n_best)
            if ended_rows:
                finished.gather(state, ended_rows, final, ended_log_probs)
            dropped = feeder.dropped(state.ids) or ()
            ending = [
                b
                for b, example in enumerate(state.ids)
                if (done[b] or example in dropped) and not state.idle[b]
            ]
            left = [state.ids[b] for b in ending]
            self._reorder(state, feeder.stepper, rows, ending, spreading)  # reorder
        finished.settle()
        for example in left:
            yield example, finished.pop(example, o.n_best)

    def _reorder(self, state: BeamState, stepper, rows, ending: list[int], spreading: bool) -> None:
        """The examples at positions ``ending`` leave (on a ``fixed_rows`` stepper: stay idle
        until examples joining take their places), and ``stepper`` follows the rows ``rows``
        (``advance``'s; None: each where it is). ``spreading``: some examples' one row (the
        first-step rule) becomes their K rows in this reorder."""
        if fixed_rows(stepper):  # within examples, the idle ones' too; the columns no row needs
            unused = state.make_idle(ending)
            if unused:
                stepper.release_columns(unused)
            if rows is not None:
                stepper.reorder(rows)
            return
        unused = 0
        if ending:
            gone = set(ending)
            examples, unused = state.keep([b for b in range(state.n_examples) if b not in gone])
            # (rows is None only with one row an example: an example's position is its row's)
            rows = examples if rows is None else rows.view(-1, state.K)[examples].view(-1)
        # the rows of an example share its memory: rows that stay in their example can name it
        if rows is not None:
            stepper.reorder(rows, rows if spreading or ending else None, unused)

    def _refill(self, state: BeamState, feeder, finished: FinishedHypotheses) -> None:
        """Let in the examples that ``feeder`` admits now; on a ``fixed_rows`` stepper, into the
        places of the idle examples first (the first search's stepper is made by this admit)."""
        # (before the first admit there is no stepper, so no slots: none is idle yet either)
        if fixed_rows(feeder.stepper):
            slots = state.idle_slots()
            joining = feeder.admit(state.live_src_lengths(), slots)
        else:
            slots = []
            joining = feeder.admit(state.host_src_lengths)
        if joining is None:
            return
        slots = slots[: len(joining.ids)]
        max_lengths = self._max_lengths(joining.src_lengths)
        if joining.prefixes is not None:  # an example's maximum is never shorter than its prefix
            max_lengths = [max(m, len(p)) for m, p in zip(max_lengths, joining.prefixes)]
        whole_beams = fixed_rows(feeder.stepper)
        state.add(joining, max_lengths, whole_beams, slots)
        finished.open(joining.ids)

    def _max_lengths(self, src_lengths: list[int]) -> list[int]:
        """The most tokens each example of source lengths ``src_lengths`` may produce, worked out
        on the host (no kernel for a device): -max_length, or less with -max_length_ratio."""
        o = self.opts
        if o.max_length_ratio <= 0:
            return [o.max_length] * len(src_lengths)
        lengths = torch.tensor(src_lengths, dtype=torch.float32)  # host data: float32 products
        declare_host(lengths)
        # bounded as floats: an infinite ratio is no bound, not an overflow
        return (lengths * o.max_length_ratio).ceil().clamp(1, o.max_length).long().tolist()

    def _constrain(self, state: BeamState, log_probs: torch.Tensor) -> torch.Tensor:
        """The stepper's ``log_probs`` ``[stepper rows x V']`` with what the options forbid at -inf:
        ``</s>`` before -min_length, repeated n-grams, anything but a target prefix's next token."""
        o = self.opts
        if o.min_length > 0:
            short = (state.lengths() < o.min_length).repeat_interleave(state.K)
            log_probs[:, self.eos].masked_fill_(state.of_stepped(short), NEG_INF)
        model_log_probs = log_probs
        if o.block_ngram_repeat > 0:
            first = state.of_stepped(state.col.repeat_interleave(state.K))
            seqs = state.of_stepped(state.seqs[:, 1:])
            log_probs = block_ngrams(
                log_probs, seqs, o.block_ngram_repeat, o.ignore_when_blocking, first
            )
        forced = state.forced()
        if forced is not None:
            log_probs = force_tokens(log_probs, model_log_probs, *forced)
        return log_probs

    def _select(self, state: BeamState, log_probs: torch.Tensor) -> tuple:
        """Pick the continuations: ``(select rows [B*K], tokens [B x K], new cumulative scores
        [B x K])``; ``select`` is None when every row stays where it is (one row per example)."""
        width = log_probs.size(1)
        batch, K = state.scores.shape
        if self.opts.sampling:
            tokens = sample(log_probs, self.opts.sampling_topk, self.opts.sampling_temp)
            return None, tokens.view(batch, 1), state.scores + log_probs.gather(1, tokens)
        if K == 1:  # the best token of each row: adding the row's score does not change which
            best, tokens = top_k(log_probs, 1)
            return None, tokens, state.scores + best
        scores, ids = top_k_with_offsets(log_probs, state.scores, K, state.stepped)  # [B x K]
        origin = torch.div(ids, width, rounding_mode="floor")  # [B x K]: the beam it continues
        if state.stepped is not None:
            # a dead candidate (-inf: fewer live continuations than beams) may continue a row the
            # stepper does not hold: it follows the example's first row, which it holds. When it
            # holds every row, a dead candidate's row is one of its example's: any will do
            origin = origin.masked_fill(scores == NEG_INF, 0)
        select = (origin + state.first_rows().unsqueeze(1)).view(-1)
        return select, ids % width, scores

    def _read(
        self, state: BeamState, ended: torch.Tensor, done: torch.Tensor
    ) -> tuple[list[int], list[bool]]:
        """The step's one read of the device: the rows that ended (``b * K + k``; not those of
        idle examples, whose n-best lists are out) and, per example, whether it is done."""
        flags = torch.cat([ended.view(-1), done]).tolist()
        n_rows = ended.numel()
        rows = [row for row in range(n_rows) if flags[row]]
        if any(state.idle):
            rows = [row for row in rows if not state.idle[row // state.K]]
        return rows, flags[n_rows:]

    def _record(self, state, select, tokens, log_probs, rows) -> None:
        """Tell the recorder the hypotheses kept at this step: tokens, parents (positions in the
        example's beam), cumulative scores and the tokens' log-probabilities, each ``[B x K]``."""
        batch, K = tokens.shape
        parents = torch.zeros_like(tokens) if select is None else select.view(batch, K) % K
        stepped = log_probs if rows is None else log_probs.index_select(0, rows)
        token_log_probs = stepped.gather(1, tokens.view(-1, 1)).view(batch, K)
        columns = [tokens, parents, state.scores, token_log_probs]
        ids = state.ids
        if state.n_live < batch:  # an idle example's rows are no longer its own
            live = [b for b, idle in enumerate(state.idle) if not idle]
            index = from_host(live, tokens.device)
            columns = [column.index_select(0, index) for column in columns]
            ids = [ids[b] for b in live]
        self.recorder.record(ids, *columns)


class OneBatch:
    """The feeder of a single batch whose rows the stepper already holds: all join at once."""

    def __init__(self, stepper, joining: Joining, device):
        self.stepper = stepper
        self.device = device
        self.waiting = joining

    def admit(self, src_lengths: list[int], slots: list[int] = ()) -> Joining | None:
        joining = self.waiting
        self.waiting = None
        return joining

    def dropped(self, ids: list[int]) -> None:
        return None
