"""The rows of a running search (``search.Search``): each example's hypotheses, their scores,
attention and coverage, and its target prefix; examples join and leave between steps."""
import torch

from onmt_lite.utils.tensors import pad_to
from onmt_lite.utils.topk import row_positions

NEG_INF = float("-inf")


class BeamState:
    """The rows of the search: sequences, cumulative scores, attention history, coverage.

    Examples join at any step (``add``) and leave when done (``keep``). ``seqs`` ``[B*K x t]`` holds
    every row's tokens in a shared column grid: example b's ``<s>`` is at column ``col[b]`` (the
    columns before it are filler), its tokens follow; ``attn[name]`` ``[t - 1 x B*K x S]`` has one
    entry per column after the first (kept only ``with_attention``). Columns no live example needs
    are dropped. ``coverage`` ``[B*K x S]`` (the summed attention, for a coverage penalty) is kept
    only ``with_coverage``. ``stepped`` ``[rows]``: the rows the stepper holds, in its order, when
    examples have just joined (the first beam of each of them); None when it holds every row.
    ``prefix`` ``[B x P]`` and ``prefix_lengths`` ``[B]``: each example's forced first tokens (padded
    with 0 past its length; ``P`` is 0 while no example has one).
    """

    def __init__(self, beam_size, bos, device, with_attention=True, with_coverage=True):
        self.K, self.bos, self.device = beam_size, bos, device
        self.with_attention, self.with_coverage = with_attention, with_coverage
        empty = torch.empty(0, dtype=torch.long, device=device)
        self.example, self.col, self.max_lengths, self.src_lengths = empty, empty, empty, empty
        self.n_finished, self.prefix_lengths = empty, empty
        self.prefix = torch.empty(0, 0, dtype=torch.long, device=device)
        self.seqs = torch.full((0, 1), bos, dtype=torch.long, device=device)
        self.scores = torch.empty(0, beam_size, device=device)
        self.penalty = torch.empty(0, beam_size, device=device)  # coverage penalty in the scores
        self.nth_best = torch.empty(0, device=device)  # score of the n-th best finished
        self.attn = {}
        self.coverage = None
        self.stepped = None

    def add(self, examples, src_lengths, max_lengths, prefix=None):
        """Let ``examples`` ``[n]`` (their ids) join with ``<s>`` as their next input; ``prefix``:
        ``(tokens [n x P], lengths [n])`` of their target prefixes, or None (none has one)."""
        n, K, total = examples.numel(), self.K, self.seqs.size(0)
        tokens, lengths = prefix if prefix is not None else (self.prefix.new_zeros(n, 0), torch.zeros_like(examples))
        width = max(self.prefix.size(1), tokens.size(1))
        self.prefix = torch.cat([pad_to(self.prefix, 1, width), pad_to(tokens, 1, width)])
        self.prefix_lengths = torch.cat([self.prefix_lengths, lengths])
        if K > 1:
            stepped = torch.arange(total, device=self.device) if self.stepped is None else self.stepped
            self.stepped = torch.cat([stepped, torch.arange(total, total + n * K, K, device=self.device)])
        rows = torch.full((n * K, self.seqs.size(1)), self.bos, dtype=torch.long, device=self.device)
        self.seqs = torch.cat([self.seqs, rows])
        scores = torch.full((n, K), NEG_INF, device=self.device)
        scores[:, 0] = 0.0
        self.scores = torch.cat([self.scores, scores])
        self.penalty = torch.cat([self.penalty, torch.zeros(n, K, device=self.device)])
        self.attn = {name: torch.cat([value, value.new_zeros(value.size(0), n * K, value.size(2))], 1)
                     for name, value in self.attn.items()}
        if self.coverage is not None:
            self.coverage = torch.cat([self.coverage, self.coverage.new_zeros(n * K, self.coverage.size(1))])
        self.example = torch.cat([self.example, examples])
        self.col = torch.cat([self.col, torch.full_like(examples, self.seqs.size(1) - 1)])
        self.max_lengths = torch.cat([self.max_lengths, max_lengths])
        self.src_lengths = torch.cat([self.src_lengths, src_lengths])
        self.n_finished = torch.cat([self.n_finished, torch.zeros_like(examples)])
        self.nth_best = torch.cat([self.nth_best, torch.full((n,), NEG_INF, device=self.device)])

    def lengths(self):
        """Tokens each example has produced ``[B]``."""
        return self.seqs.size(1) - 1 - self.col

    def of_stepped(self, tensor):
        """The entries of ``tensor`` ``[B*K x ...]`` for the rows the stepper holds."""
        return tensor if self.stepped is None else tensor[self.stepped]

    def advance(self, select, tokens, scores, attn):
        """Keep rows ``select`` ``[B*K]`` (None: every row where it is), append ``tokens`` ``[B x K]``,
        record attention ``{name: [stepped rows x S]}``. Returns the stepper's rows that ``select``
        names (what the stepper must keep, in order); every row is a stepped one afterwards."""
        picked = select
        if self.stepped is not None:
            picked, self.stepped = row_positions(self.stepped, self.seqs.size(0))[select], None

        def kept(tensor, dim=0, rows=select):
            return tensor if rows is None else tensor.index_select(dim, rows)

        self.seqs = torch.cat([kept(self.seqs), tokens.view(-1, 1)], 1)
        self.scores = scores
        self.penalty = kept(self.penalty.view(-1)).view_as(scores)
        for name, value in attn.items() if self.with_attention else ():
            step = kept(value, rows=picked).unsqueeze(0)
            if name in self.attn:  # the stepper's source width only grows: pad the history to it
                step = torch.cat([pad_to(kept(self.attn[name], 1), 2, step.size(2)), step])
            self.attn[name] = step
        if self.with_coverage:
            std = kept(attn["std"], rows=picked)
            self.coverage = std if self.coverage is None else pad_to(kept(self.coverage), 1, std.size(1)) + std
        return picked

    def keep(self, examples):
        """Keep only the examples ``examples`` (positions among the current ones)."""
        rows = (examples.unsqueeze(1) * self.K + torch.arange(self.K, device=examples.device)).view(-1)
        self.seqs, self.scores, self.example = self.seqs[rows], self.scores[examples], self.example[examples]
        self.penalty, self.col = self.penalty[examples], self.col[examples]
        self.attn = {name: value[:, rows] for name, value in self.attn.items()}
        self.coverage = None if self.coverage is None else self.coverage[rows]
        self.max_lengths, self.src_lengths = self.max_lengths[examples], self.src_lengths[examples]
        self.n_finished, self.nth_best = self.n_finished[examples], self.nth_best[examples]
        self.prefix, self.prefix_lengths = self.prefix[examples], self.prefix_lengths[examples]
        unused = int(self.col.min()) if examples.numel() else self.seqs.size(1) - 1
        if unused:  # columns before every live example's <s>
            self.seqs, self.col = self.seqs[:, unused:], self.col - unused
            self.attn = {name: value[unused:] for name, value in self.attn.items()}
        if self.prefix.size(1) and not bool((self.prefix_lengths > self.lengths()).any()):
            self.prefix = self.prefix[:, :0]  # every prefix is done: no more forcing to check

    def forced(self):
        """``(rows, tokens)``: the stepper's rows still inside their example's prefix ``[F]`` and the
        prefix token each must take ``[F x 1]``; None when there are none."""
        if not self.prefix.size(1):
            return None
        lengths = self.of_stepped(self.lengths().repeat_interleave(self.K))
        inside = lengths < self.of_stepped(self.prefix_lengths.repeat_interleave(self.K))
        rows = inside.nonzero().view(-1)
        if not rows.numel():
            return None
        examples = self.of_stepped(torch.arange(self.K * self.example.numel(), device=self.device) // self.K)[rows]
        return rows, self.prefix[examples, lengths[rows]].unsqueeze(1)
