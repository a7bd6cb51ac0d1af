"""The hypotheses a search has finished: gathered on the device at the step they end, copied to the
host without a wait, and made ``Hypothesis`` objects once the copies are done.

On a GPU the host must not wait for the device at every finished hypothesis (a ``.tolist()``
each stalls the whole search). ``gather`` selects the rows that ended at a step (the host knows
which from the step's one read, ``Search.stream``) and starts their copies to the host;
``settle``, called after the next step's read (by which the device has done the copies), turns
them into Hypothesis lists.
"""

from __future__ import annotations

import bisect
import dataclasses

import torch

from onmt_lite.translate.beam_state import NEG_INF
from onmt_lite.utils.host_syncs import declare_host
from onmt_lite.utils.tensors import from_host, host_copy


@dataclasses.dataclass
class Hypothesis:
    """A finished output: token ids (no ``<s>``, no ``</s>``), its score and log-probability, and
    each tracked attention ``[len x S]`` (one row per output token and ``</s>``)."""

    tokens: list
    score: float
    log_prob: float
    attention: dict
    end: tuple = ()  # (step, beam): where the hypothesis ended, counting its example's steps from 0


def completed(hyps: list[Hypothesis], n_best: int) -> list[Hypothesis]:
    """The first ``n_best`` of ``hyps``, completed with empty hypotheses of score ``-inf`` when
    fewer finished: every other continuation had probability 0 (a sparsemax generator, blocked
    n-grams), and an n-best list always has ``n_best`` entries (the output's lines follow from it).
    """
    impossible = [Hypothesis([], NEG_INF, NEG_INF, {}) for _ in range(n_best - len(hyps))]
    return hyps[:n_best] + impossible


@dataclasses.dataclass
class _Copies:
    """The rows that ended at one step, on their way to the host: ``where`` (host data), per row,
    ``(example id, <s> column, source length, step, beam)``; ``seqs`` ``[E x t]``, ``scores``
    ``[2 x E]`` (final scores and log-probabilities), ``attn`` ``{name: [t - 1 x E x S]}``;
    ``done``: a CUDA event recorded after the copies (None elsewhere)."""

    where: list
    seqs: torch.Tensor
    scores: torch.Tensor
    attn: dict
    done: torch.cuda.Event | None


def _minus_score(hypothesis: Hypothesis) -> float:
    return -hypothesis.score


class FinishedHypotheses:
    """Per example id, its ``n_best`` best finished hypotheses, best first (equal scores in the
    order they ended): no other can be in its n-best list."""

    def __init__(self, eos: int, n_best: int):
        self.eos = eos
        self.n_best = n_best
        self.lists: dict[int, list[Hypothesis]] = {}
        self._copies: list[_Copies] = []

    def open(self, ids: list[int]) -> None:
        """Start the (empty) lists of the examples ``ids``."""
        self.lists.update((i, []) for i in ids)

    def gather(self, state, rows: list[int], final: torch.Tensor, log_probs: torch.Tensor) -> None:
        """Start copying the rows ``rows`` (host, row numbers ``b * K + k``) of ``state`` (a
        ``BeamState``) that ended at this step, with their ``final`` scores and ``log_probs``
        ``[B x K]``, to the host."""
        index = from_host(rows, state.device)
        K = state.K
        lengths = state.host_lengths()
        where = [
            (
                state.ids[row // K],
                state.cols[row // K],
                state.host_src_lengths[row // K],
                lengths[row // K] - 1,
                row % K,
            )
            for row in rows
        ]
        scores = torch.stack([final.reshape(-1), log_probs.reshape(-1).to(final.dtype)])
        copies = _Copies(
            where,
            host_copy(state.seqs.index_select(0, index)),
            host_copy(scores.index_select(1, index)),
            {name: host_copy(value.index_select(1, index)) for name, value in state.attn.items()},
            None,
        )
        if index.device.type == "cuda":
            copies.done = torch.cuda.Event()
            copies.done.record()
        for tensor in (copies.seqs, copies.scores, *copies.attn.values()):
            declare_host(tensor)
        self._copies.append(copies)

    def settle(self) -> None:
        """Make the gathered rows Hypothesis objects: call it once the device has done the copies
        (after a read of the device queued after them); it waits for them otherwise."""
        for copies in self._copies:
            if copies.done is not None:
                copies.done.synchronize()
            seqs = copies.seqs.tolist()
            finals, log_probs = copies.scores.tolist()
            for i, (example, col, src_length, step, beam) in enumerate(copies.where):
                hyps = self.lists[example]
                if len(hyps) >= self.n_best and not finals[i] > hyps[-1].score:
                    continue  # not among the n best (NaN neither): ``_keep`` would drop it
                tokens = seqs[i][col + 1 :]
                if tokens[-1] == self.eos:
                    tokens.pop()
                attention = {}
                if copies.attn:
                    # a copy: a view would keep every row's attention alive (and be pickled whole
                    # by a decoding stream); a Result's attention is read on the host
                    # (-replace_unk, plots)
                    attention = {
                        name: value[col:, i, :src_length].clone()
                        for name, value in copies.attn.items()
                    }
                hyp = Hypothesis(tokens, finals[i], log_probs[i], attention, (step, beam))
                self._keep(hyps, hyp)
        self._copies.clear()

    def _keep(self, hyps: list[Hypothesis], hyp: Hypothesis) -> None:
        """Put ``hyp`` in ``hyps`` (best first) after those of equal score, which ended before it,
        and keep the first ``n_best``: the list a stable sort of all of them would start with."""
        bisect.insort_right(hyps, hyp, key=_minus_score)
        del hyps[self.n_best :]

    def pop(self, example: int, n_best: int) -> list[Hypothesis]:
        """The n-best list of ``example`` (``completed``), forgotten here; ``settle`` first."""
        return completed(self.lists.pop(example), n_best)
