"""``-cuda_graphs``: a Transformer decoder's search step replayed as one CUDA graph.

On a GPU a small Transformer's decoding step is some 60 kernels of a few microseconds each, which
the host takes longer to launch one by one from Python than the device takes to run them
(bench/README.md, "The host's share of GPU decoding"): the host sets the pace. A CUDA graph records
a step's kernels once; each later step launches them all with one call. A graph replays fixed
shapes at fixed addresses, so ``GraphedStepper`` keeps the search's rows in buffers of fixed size
and runs the step in place on them:

- R rows: the rows the search holds first, filler after them (computed, never read);
- S source positions: the longest source so far, each row's padding masked by its length;
- C cache columns: ``TransformerState``'s shared column grid with room to grow; each row attends
  from its ``start`` to the column being written, ``cached``, here a device scalar.

When the rows, a source or the columns outgrow their buffers, the buffers are made twice as large
and the step is recorded again: a few recordings a run. The search's reorder within examples (each
step of a beam search) happens at the start of the next step, inside the graph; examples joining,
leaving and the columns no row uses any more are done outside it, as often as examples come and go.

Off CUDA the same fixed-shape step runs without a graph (what the tests check: the same lines as
``ModelStepper``, no read of the device and no copy from the host in a step). One Transformer model
without copy attention, relative positions or kept attention (``graphing_problem``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from onmt_lite.models.transformer import TransformerDecoder, TransformerState
from onmt_lite.translate.stepper import EnsembleStepper, ModelStepper

# the buffers' first sizes (doubled as needed): rows, source positions, cache columns (most
# outputs need no second recording)
FIRST_ROWS = 8
FIRST_SOURCES = 16
FIRST_COLUMNS = 32


def graphing_problem(models: list, keep_attention: bool) -> str | None:
    """Why the search of ``models`` cannot run as a graph (a phrase for an error), or None."""
    if len(models) != 1:
        return "an ensemble (several -model)"
    decoder = models[0].decoder
    if not isinstance(decoder, TransformerDecoder):
        return "a decoder that is not a Transformer's"
    if decoder.copy_attn:
        return "copy attention"
    if decoder.layers[0].self_attn.attention.relative is not None:
        return "relative positions (-max_relative_positions)"
    if keep_attention:
        return (
            "the attention kept (-replace_unk, -attn_debug, -attn_plot, a coverage penalty; "
            "the library's attention=True)"
        )
    return None


def doubled(size: int, needed: int) -> int:
    """``size`` doubled until it is at least ``needed``."""
    while size < needed:
        size *= 2
    return size


def enlarged(old: Tensor, shape: tuple, fill: int | float = 0) -> Tensor:
    """A tensor of ``shape`` (no dimension smaller than ``old``'s) with ``old`` in its leading
    corner and ``fill`` elsewhere."""
    new = old.new_full(shape, fill)
    new[tuple(slice(0, size) for size in old.shape)] = old
    return new


def only_model(stepper) -> ModelStepper:
    """The ``ModelStepper`` of a single model's stepper (an ``EnsembleStepper`` of one)."""
    if isinstance(stepper, EnsembleStepper):
        (stepper,) = stepper.steppers
    return stepper


class GraphedStepper:
    """``ModelStepper``'s interface to the search (``step``, ``reorder``, ``extend``) on
    fixed-size buffers, the step recorded as a CUDA graph when ``record`` (else run as is).

    Buffers (R rows, S source positions, C columns, L layers, h heads, d = H / h):
        tokens ``[R]``: the rows' next inputs; lengths ``[R]``: their sources' lengths (filler: 1);
        keys ``[2L x R x h x S x d]``: each layer's keys and values of the rows' sources;
        cache: 2L tensors ``[R x h x C x d]``; start ``[R]``: each row's first column;
        cached ``[]``: the column the next position is written to (``columns`` on the host);
        rows ``[R]``: the reorder the next step starts with (the identity but for one step).
    """

    def __init__(self, stepper, record: bool):
        first = only_model(stepper)
        self.model = first.model
        self.record = record
        self.n_rows = 0  # the rows the search holds: the first n_rows of each buffer
        self.columns = 0
        keys = first.keys  # [2L x B x h x S x d]
        device = keys.device
        n_states, _, heads, _, head_dim = keys.shape
        rows = doubled(FIRST_ROWS, keys.size(1))
        sources = doubled(FIRST_SOURCES, keys.size(3))
        self.tokens = torch.zeros(rows, dtype=torch.long, device=device)
        self.lengths = torch.ones(rows, dtype=torch.long, device=device)
        self.keys = keys.new_zeros(n_states, rows, heads, sources, head_dim)
        shape = (rows, heads, FIRST_COLUMNS, head_dim)
        self.cache = tuple(keys.new_zeros(shape) for _ in range(n_states))
        self.start = torch.zeros(rows, dtype=torch.long, device=device)
        self.cached = torch.zeros((), dtype=torch.long, device=device)
        self.rows = torch.arange(rows, device=device)
        self.identity = torch.arange(rows, device=device)
        self.graph = None
        self.out = None
        self.extend(first)

    def _fit(self, rows: int, sources: int, columns: int) -> None:
        """Make the buffers hold ``rows`` rows, ``sources`` source positions and ``columns``
        columns (doubled where short; the step is recorded again)."""
        n_states, old_rows, heads, old_sources, head_dim = self.keys.shape
        old_columns = self.cache[0].size(2)
        new_rows = doubled(old_rows, rows)
        new_sources = doubled(old_sources, sources)
        new_columns = doubled(old_columns, columns)
        if (new_rows, new_sources, new_columns) == (old_rows, old_sources, old_columns):
            return
        self.tokens = enlarged(self.tokens, (new_rows,))
        self.lengths = enlarged(self.lengths, (new_rows,), 1)
        self.keys = enlarged(self.keys, (n_states, new_rows, heads, new_sources, head_dim))
        shape = (new_rows, heads, new_columns, head_dim)
        self.cache = tuple(enlarged(buffer, shape) for buffer in self.cache)
        self.start = enlarged(self.start, (new_rows,))
        # a pending reorder names rows below old_rows; the new rows stay where they are
        identity = torch.arange(new_rows, device=self.rows.device)
        self.rows = torch.cat([self.rows, identity[old_rows:]])
        self.identity = identity
        self.graph = None
        self.out = None

    def _decode(self) -> Tensor:
        """The step on the buffers: the pending reorder, one position decoded for every row (its
        keys and values written at column ``cached``), ``cached`` advanced. Returns the
        log-probabilities ``[R x V]``."""
        for buffer in (*self.cache, self.start):
            buffer.copy_(buffer.index_select(0, self.rows))
        self.rows.copy_(self.identity)
        state = TransformerState(self.cache, self.start, self.cached)
        dec_out, _, _ = self.model.decode(
            self.tokens.unsqueeze(0), None, self.lengths, state, self.keys, need_attention=False
        )
        self.cached.add_(1)
        return self.model.generator(dec_out[0])

    def _record_graph(self) -> None:
        """Record ``_decode`` as a CUDA graph, after a run outside it (which makes what a first
        run makes: cuBLAS's workspace, the position table): the run does the step's pending
        reorder and writes what the graph's first replay writes again; only ``cached`` is set
        back."""
        side = torch.cuda.Stream(self.tokens.device)
        side.wait_stream(torch.cuda.current_stream(self.tokens.device))
        with torch.cuda.stream(side):
            self._decode()
        torch.cuda.current_stream(self.tokens.device).wait_stream(side)
        self.cached.fill_(self.columns)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self.out = self._decode()
        self.graph = graph

    def step(self, tokens: Tensor) -> tuple[Tensor, dict]:
        """``tokens`` ``[n_rows]`` -> log-probabilities ``[n_rows x V]`` (a view of the graph's
        output, valid until the next step) and no attention."""
        self._fit(self.n_rows, 0, self.columns + 1)
        self.tokens[: self.n_rows].copy_(tokens)
        if not self.record:
            log_probs = self._decode()
        else:
            if self.graph is None:
                self._record_graph()
            self.graph.replay()
            log_probs = self.out
        self.columns += 1
        return log_probs[: self.n_rows], {}

    def reorder(self, rows: Tensor, memory_rows: Tensor | None = None, unused_columns: int = 0):
        """As ``ModelStepper.reorder``: within examples (``memory_rows`` None) at the start of the
        next step, in the graph; else now."""
        n_rows = rows.size(0)
        if memory_rows is None:
            self.rows[:n_rows].copy_(rows)
            return
        self._fit(n_rows, 0, 0)
        for buffer in (*self.cache, self.start):
            buffer[:n_rows] = buffer.index_select(0, rows)
        self.keys[:, :n_rows] = self.keys.index_select(1, memory_rows)
        self.lengths[:n_rows] = self.lengths.index_select(0, memory_rows)
        self.n_rows = n_rows
        if unused_columns:
            self._drop_columns(unused_columns)

    def _drop_columns(self, unused: int) -> None:
        """Move every row's columns ``unused`` to the left: the first ``unused`` are no row's."""
        width = self.cache[0].size(2)
        for buffer in self.cache:
            buffer[:, :, : width - unused] = buffer[:, :, unused:].clone()
        # (the live rows start at ``unused`` or later; filler rows stay at 0 or more, so that no
        # row's position, cached - start, is past the columns)
        self.start.sub_(unused).clamp_(min=0)
        self.cached.sub_(unused)
        self.columns -= unused

    def extend(self, other) -> None:
        """Append the rows of ``other`` (a single model's stepper of examples joining: their
        cache empty), which start at the column written next."""
        joining = only_model(other)
        keys = joining.keys  # [2L x m x h x S' x d]
        n_rows = self.n_rows
        added = keys.size(1)
        self._fit(n_rows + added, keys.size(3), self.columns + 1)
        rows = slice(n_rows, n_rows + added)
        self.keys[:, rows].zero_()
        self.keys[:, rows, :, : keys.size(3)] = keys
        self.lengths[rows] = joining.lengths
        self.start[rows] = self.columns
        self.n_rows += added
