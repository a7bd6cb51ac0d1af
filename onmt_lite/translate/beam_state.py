"""The rows of a running search (``search.Search``) and every operation on them.

B examples are searching, K rows each (the beam; 1 for greedy search and sampling): row
``b * K + k`` is beam k of example b. Examples join between steps (``add``) and, done, leave
(``keep``) or stay idle until an example joining takes their place (``make_idle``: slots, below).

What the search decides from lives on the device (sequences, scores, attention, the finished
counts); what the host needs to know each step without asking the device lives on the host (the
examples' ids, the column each started at, their source and target prefixes' lengths). A GPU then
runs a search step without waiting, but for the one read of ``Search.stream``.

The first-step rule: an example joins with one row in the stepper, since its K beams would be alike
until its first step, and the reorder after that step gives it its K rows. While some examples have
joined and not yet stepped, ``stepped`` names the rows the stepper holds, and ``inputs``,
``of_stepped`` and ``advance`` read and write through it; outside this class only ``Search`` sees
it: ``_select`` skips the rows that are not there, ``_constrain`` reads through ``of_stepped``, and
the reorder after the step spreads the first rows (``stream``). A stepper whose step costs the same
whatever rows it holds (``fixed_rows``: -cuda_graphs) takes an example's K rows at once instead
(``add(..., whole_beams=True)``): ``stepped`` stays None.

Slots (``fixed_rows`` only): an example that is done stays, idle (``make_idle``), its rows going on
unread, until an example joining takes its place (``add(..., slots=...)``): its rows are written
over, where any other stepper's examples leave (``keep``) and joining ones come after the rest.
"""

from __future__ import annotations

import dataclasses

import torch

from onmt_lite.utils.tensors import from_host, pad_to
from onmt_lite.utils.topk import row_positions

NEG_INF = float("-inf")


@dataclasses.dataclass
class Joining:
    """Examples joining a search, as host data: their ids, source lengths, and target prefixes
    (token id lists, ``-tgt_prefix``; None: none has one)."""

    ids: list[int]
    src_lengths: list[int]
    prefixes: list[list[int]] | None = None


class BeamState:
    """The search's rows.

    Device tensors:
        seqs ``[B*K x t]``: every row's tokens in a shared column grid: example b's ``<s>`` is at
            column ``cols[b]`` (the columns before it are filler), its tokens follow. Columns no
            live example needs are dropped.
        scores ``[B x K]``: cumulative log-probabilities (minus the coverage penalty with
            -stepwise_penalty, which ``penalty`` ``[B x K]`` holds; None without:
            ``with_penalty``); -inf for a dead row.
        attn ``{name: [t - 1 x B*K x S]}``: one entry per column after the first (kept
            ``with_attention``).
        coverage ``[B*K x S]``: the summed attention, for a coverage penalty (``with_coverage``).
        bounds ``[B x 3]``: each example's ``<s>`` column, the column of its last allowed token
            and its source length (``col``, ``last_col`` and ``src_lengths`` view them): one tensor,
            so that examples leaving take one index for all three.
        prefix ``[B x P]`` (padded with 0), None while no example has one.
        best_finished ``[B x n_best]``: the best ``n_best`` final scores of each example's finished
            hypotheses, -inf while fewer, for the early stop (a finished hypothesis never scores
            -inf: a row that ends is live, so its score is finite, or NaN). None with one row an
            example: there is no early stop to bound (``Penalties.done``).
        best_average ``[B]``: the best final score per token of each example's finished
            hypotheses, counting 1.x's way (its tokens, ``</s>`` included, + 2), -inf while none,
            for -ratio's stop (``Penalties.done``); None without (``with_average``).
    Host lists (``[B]``): ids, cols, host_src_lengths, prefix_lengths, and idle: the examples done
    whose rows stay in the search until an example joining takes their place (slots); what their
    rows do is never read, and their columns may be dropped (a negative ``cols``).
    """

    def __init__(
        self,
        beam_size: int,
        n_best: int,
        bos: int,
        device,
        with_attention=True,
        with_coverage=True,
        with_penalty=False,
        with_average=False,
    ):
        self.K = beam_size
        self.device = device
        self.with_attention = with_attention
        self.with_coverage = with_coverage
        self.ids: list[int] = []
        self.cols: list[int] = []
        self.host_src_lengths: list[int] = []
        self.prefix_lengths: list[int] = []
        self.idle: list[bool] = []
        self.bounds = torch.empty(0, 3, dtype=torch.long, device=device)
        # on the device once: a Python number in torch.where is a new tensor there at each call
        self.minus_infinity = torch.tensor(NEG_INF, device=device)
        self._first_rows = torch.empty(0, dtype=torch.long, device=device)
        one_row = beam_size == 1
        self.best_finished = None if one_row else torch.empty(0, n_best, device=device)
        self.best_average = torch.empty(0, device=device) if with_average else None
        self.prefix = None
        # what a joining example's rows start from, made once: <s>, and the scores of its first
        # step's beam: 0 for the first row, -inf for the K - 1 alike (whether the stepper holds
        # them or not), so that the first step picks its K continuations from one row
        self._bos = torch.tensor(bos, device=device)
        self._first_scores = torch.full((beam_size,), NEG_INF, device=device)
        self._first_scores[0] = 0.0
        self.seqs = torch.full((0, 1), bos, dtype=torch.long, device=device)
        self.scores = torch.empty(0, beam_size, device=device)
        self.penalty = torch.empty(0, beam_size, device=device) if with_penalty else None
        self.attn: dict = {}
        self.coverage = None
        self.stepped = None  # [stepper rows]: see the module's docstring
        self.stepped_rows: list[int] | None = None  # the same on the host

    @property
    def n_examples(self) -> int:
        return len(self.ids)

    @property
    def n_live(self) -> int:
        """The examples searching (not idle)."""
        return self.idle.count(False)

    def idle_slots(self) -> list[int]:
        """The positions of the idle examples, in order: the slots of examples joining."""
        return [b for b, idle in enumerate(self.idle) if idle]

    def live_src_lengths(self) -> list[int]:
        """The source lengths of the examples searching."""
        return [n for n, idle in zip(self.host_src_lengths, self.idle) if not idle]

    @property
    def col(self) -> torch.Tensor:
        """Each example's ``<s>`` column ``[B]``."""
        return self.bounds[:, 0]

    @property
    def last_col(self) -> torch.Tensor:
        """The column of each example's last allowed token ``[B]`` (its maximum length after
        ``col``)."""
        return self.bounds[:, 1]

    @property
    def src_lengths(self) -> torch.Tensor:
        """Each example's source length ``[B]``."""
        return self.bounds[:, 2]

    def max_lengths(self) -> torch.Tensor:
        """The most tokens each example may produce ``[B]``."""
        return self.last_col - self.col

    def add(
        self,
        joining: Joining,
        max_lengths: list[int],
        whole_beams: bool = False,
        slots: list[int] = (),
    ) -> None:
        """Let the examples of ``joining`` join with ``<s>`` as their next input; ``max_lengths``:
        the most tokens each may produce. ``whole_beams``: the stepper took each example's K rows
        (else its first row alone: the first-step rule). ``slots``: the positions of idle
        examples whose places the first ``len(slots)`` joining examples take (their rows written
        over; ``whole_beams`` only); the others come after those held."""
        n = len(joining.ids)
        K = self.K
        total = self.seqs.size(0)
        at = from_host(list(slots), self.device) if slots else None  # [placed]
        rows_at = at if at is None or K == 1 else self._rows_of(at)  # [placed * K]
        prefixes = joining.prefixes or [[] for _ in range(n)]
        self._add_prefixes(prefixes, slots, at)
        if K > 1 and not whole_beams:  # the stepper's new rows: each joining example's first
            held = list(range(total)) if self.stepped_rows is None else self.stepped_rows
            self.stepped_rows = held + list(range(total, total + n * K, K))
            self.stepped = from_host(self.stepped_rows, self.device)
        width = self.seqs.size(1)
        self.seqs = placed(self.seqs, self._bos.expand(n * K, width), rows_at)
        self.scores = placed(self.scores, self._first_scores.expand(n, K), at)
        if self.penalty is not None:
            self.penalty = placed(self.penalty, self.penalty.new_zeros(n, K), at)
        for name, value in self.attn.items():
            added = value.new_zeros(value.size(0), n * K, value.size(2))
            self.attn[name] = placed(value, added, rows_at, 1)
        if self.coverage is not None:
            added = self.coverage.new_zeros(n * K, self.coverage.size(1))
            self.coverage = placed(self.coverage, added, rows_at)
        first = width - 1  # their <s> column
        bounds = [[first, first + m, s] for m, s in zip(max_lengths, joining.src_lengths)]
        self.bounds = placed(self.bounds, from_host(bounds, self.device).view(n, 3), at)
        if self.best_finished is not None:
            unfinished = self.minus_infinity.expand(n, self.best_finished.size(1))
            self.best_finished = placed(self.best_finished, unfinished, at)
        if self.best_average is not None:
            self.best_average = placed(self.best_average, self.minus_infinity.expand(n), at)
        for lists, added in (
            (self.ids, joining.ids),
            (self.host_src_lengths, joining.src_lengths),
            (self.idle, [False] * n),
            (self.cols, [first] * n),
        ):
            put(lists, added, slots)

    def _rows_of(self, examples: torch.Tensor) -> torch.Tensor:
        """The rows ``b * K + k`` of the examples at positions ``examples`` ``[n]``: ``[n * K]``."""
        return (examples.unsqueeze(1) * self.K + torch.arange(self.K, device=self.device)).view(-1)

    def _add_prefixes(self, prefixes: list[list[int]], slots, at) -> None:
        """The target prefixes of examples joining (token id lists; empty: none), the first
        ``len(slots)`` at the positions ``slots`` (``at`` on the device)."""
        put(self.prefix_lengths, [len(prefix) for prefix in prefixes], slots)
        width = max(0 if self.prefix is None else self.prefix.size(1), *map(len, prefixes))
        if not width:  # no example has one: nothing to keep on the device
            return
        padded = [prefix + [0] * (width - len(prefix)) for prefix in prefixes]
        tokens = from_host(padded, self.device).view(len(prefixes), width)
        if self.prefix is None:  # the examples before them had none
            self.prefix = tokens.new_zeros(self.n_examples, width)
        self.prefix = placed(pad_to(self.prefix, 1, width), tokens, at)

    def first_rows(self) -> torch.Tensor:
        """Each example's first row ``[B]`` (``b * K``); made anew only when B changes."""
        if self._first_rows.numel() != self.n_examples:
            self._first_rows = torch.arange(0, self.n_examples * self.K, self.K, device=self.device)
        return self._first_rows

    def lengths(self) -> torch.Tensor:
        """Tokens each example has produced ``[B]``."""
        return self.seqs.size(1) - 1 - self.col

    def host_lengths(self) -> list[int]:
        """``lengths()`` on the host."""
        return [self.seqs.size(1) - 1 - col for col in self.cols]

    def of_stepped(self, tensor: torch.Tensor) -> torch.Tensor:
        """The entries of ``tensor`` ``[B*K x ...]`` for the rows the stepper holds."""
        return tensor if self.stepped is None else tensor[self.stepped]

    def inputs(self) -> torch.Tensor:
        """The stepper rows' next inputs: their last tokens ``[stepper rows]``."""
        return self.of_stepped(self.seqs[:, -1])

    def advance(self, select, tokens, scores, attn) -> torch.Tensor | None:
        """Keep rows ``select`` ``[B*K]`` (None: every row where it is), append ``tokens``
        ``[B x K]`` with their cumulative ``scores`` ``[B x K]``, record attention
        ``{name: [stepper rows x S]}``.
        Returns the stepper's rows that ``select`` names (what the stepper must keep, in order);
        every row is a stepped one afterwards."""
        picked = select
        if self.stepped is not None:
            picked = row_positions(self.stepped, self.seqs.size(0))[select]
            self.stepped = None
            self.stepped_rows = None

        def kept(tensor, dim=0, rows=select):
            return tensor if rows is None else tensor.index_select(dim, rows)

        self.seqs = torch.cat([kept(self.seqs), tokens.view(-1, 1)], 1)
        self.scores = scores
        if self.penalty is not None:
            self.penalty = kept(self.penalty.view(-1)).view_as(scores)
        for name, value in attn.items() if self.with_attention else ():
            step = kept(value, rows=picked).unsqueeze(0)
            if name in self.attn:  # the stepper's source width only grows: pad the history to it
                step = torch.cat([pad_to(kept(self.attn[name], 1), 2, step.size(2)), step])
            self.attn[name] = step
        if self.with_coverage:
            std = kept(attn["std"], rows=picked)
            if self.coverage is None:
                self.coverage = std
            else:
                self.coverage = pad_to(kept(self.coverage), 1, std.size(1)) + std
        return picked

    def set_penalty(self, penalty: torch.Tensor) -> None:
        """-stepwise_penalty: ``penalty`` ``[B x K]`` replaces the coverage penalty in the
        scores."""
        self.scores = self.scores + self.penalty - penalty
        self.penalty = penalty

    def log_probs(self) -> torch.Tensor:
        """The rows' cumulative log-probabilities ``[B x K]``: the scores without the coverage
        penalty that -stepwise_penalty puts in them."""
        return self.scores if self.penalty is None else self.scores + self.penalty

    def ended(self, tokens: torch.Tensor, eos: int) -> torch.Tensor:
        """The rows that end at this step ``[B x K]``: ``</s>`` or their example's maximum length
        (a row already dead is -inf and does not end again; a NaN score still ends)."""
        at_most = (self.last_col <= self.seqs.size(1) - 1).unsqueeze(1)  # the last token's column
        return ((tokens == eos) | at_most) & (self.scores != NEG_INF)

    def finish(self, ended: torch.Tensor, final: torch.Tensor) -> torch.Tensor:
        """Count the rows ``ended`` ``[B x K]`` as finished with their ``final`` scores, and end
        them (-inf). Returns the rows' log-probabilities ``[B x K]`` (the scores without the
        penalty)."""
        log_probs = self.log_probs()
        if self.best_finished is not None:
            candidates = torch.where(ended, final, self.minus_infinity)  # [B x K]
            merged = torch.cat([self.best_finished.to(final.dtype), candidates], 1)
            self.best_finished = merged.topk(self.best_finished.size(1), dim=1).values
        if self.best_average is not None:
            # 1.x divides by its sequence's length + 1, which holds <s>: the tokens (</s> too) + 2
            per_token = final / (self.lengths() + 2).unsqueeze(1)  # [B x K]
            averages = torch.where(ended, per_token, self.minus_infinity).amax(1)  # [B]
            self.best_average = torch.maximum(self.best_average.to(final.dtype), averages)
        self.scores = self.scores.masked_fill(ended, NEG_INF)
        return log_probs

    def nth_best(self) -> torch.Tensor:
        """The score of each example's n-th best finished hypothesis ``[B]`` (-inf while fewer)."""
        return self.best_finished[:, -1]

    def keep(self, positions: list[int]) -> tuple[torch.Tensor, int]:
        """Keep only the examples at ``positions`` (among the current ones, in order). Returns
        their positions on the device ``[B']`` and the number of leading columns dropped (those
        before every remaining example's ``<s>``)."""
        examples = from_host(positions, self.device)
        rows = examples if self.K == 1 else self._rows_of(examples)  # K == 1: a row an example
        self.seqs = self.seqs[rows]
        self.scores = self.scores[examples]
        if self.penalty is not None:
            self.penalty = self.penalty[examples]
        self.attn = {name: value[:, rows] for name, value in self.attn.items()}
        self.coverage = None if self.coverage is None else self.coverage[rows]
        self.bounds = self.bounds[examples]
        if self.best_finished is not None:
            self.best_finished = self.best_finished[examples]
        if self.best_average is not None:
            self.best_average = self.best_average[examples]
        if self.prefix is not None:
            self.prefix = self.prefix[examples]
        self.ids = [self.ids[p] for p in positions]
        self.cols = [self.cols[p] for p in positions]
        self.host_src_lengths = [self.host_src_lengths[p] for p in positions]
        self.prefix_lengths = [self.prefix_lengths[p] for p in positions]
        self.idle = [self.idle[p] for p in positions]
        return examples, self._drop_columns()

    def make_idle(self, positions: list[int]) -> int:
        """The examples at ``positions`` are done (their n-best lists are out) but keep their
        rows, idle, until examples joining take their places (slots): their rows go on, and what
        they find is not read. Returns the number of leading columns dropped (those before every
        example still searching's ``<s>``; an idle example's may be among them)."""
        for b in positions:
            self.idle[b] = True
        if not positions:  # the columns in use are as they were
            return 0
        return self._drop_columns()

    def _drop_columns(self) -> int:
        """Drop the leading columns that no example searching uses (before every such example's
        ``<s>``; all but the last when none is searching) and return their number; forget the
        prefixes once none is being forced."""
        cols = [col for col, idle in zip(self.cols, self.idle) if not idle]
        unused = min(cols) if cols else self.seqs.size(1) - 1
        if unused:
            self.seqs = self.seqs[:, unused:]
            self.bounds[:, :2] -= unused  # in place: no one else holds it
            self.cols = [col - unused for col in self.cols]
            self.attn = {name: value[unused:] for name, value in self.attn.items()}
        if self.prefix is not None and not self._inside_prefix():
            self.prefix = None  # every prefix is done: no more forcing to check
        return unused

    def _inside_prefix(self) -> list[int]:
        """The positions of the examples searching that are still inside their target prefix."""
        lengths = self.host_lengths()
        return [
            b
            for b, length in enumerate(lengths)
            if length < self.prefix_lengths[b] and not self.idle[b]
        ]

    def forced(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """``(rows, tokens)``: the stepper's rows still inside their example's prefix ``[F]`` and
        the prefix token each must take ``[F x 1]``; None when there are none."""
        if self.prefix is None:
            return None
        inside = set(self._inside_prefix())
        if not inside:
            return None
        K = self.K
        lengths = self.host_lengths()
        # the rows the stepper holds: every row, or (just joined) the first of each example's
        held = range(len(self.ids) * K) if self.stepped_rows is None else self.stepped_rows
        rows = [i for i, row in enumerate(held) if row // K in inside]
        examples = [held[i] // K for i in rows]
        columns = [lengths[b] for b in examples]  # the next prefix token's
        tokens = self.prefix[from_host(examples, self.device), from_host(columns, self.device)]
        return from_host(rows, self.device), tokens.unsqueeze(1)


def placed(old: torch.Tensor, new: torch.Tensor, at: torch.Tensor | None, dim: int = 0):
    """``old`` with the first ``len(at)`` entries of ``new`` along ``dim`` written over its entries
    ``at`` (in place; None: none) and the others appended."""
    if at is None:
        return torch.cat([old, new], dim)
    n_placed = at.numel()
    old.index_copy_(dim, at, new.narrow(dim, 0, n_placed))
    if n_placed == new.size(dim):
        return old
    return torch.cat([old, new.narrow(dim, n_placed, new.size(dim) - n_placed)], dim)


def put(values: list, added: list, slots) -> None:
    """The host-list side of ``placed``: ``added``'s first ``len(slots)`` items at the positions
    ``slots`` of ``values``, the others appended."""
    for b, value in zip(slots, added):
        values[b] = value
    values += added[len(slots) :]
