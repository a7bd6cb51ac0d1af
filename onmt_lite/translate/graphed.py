"""``-cuda_graphs``: a decoder's search step replayed as one CUDA graph.

On a GPU a small model's decoding step is some 60 kernels of a few microseconds each, which the
host takes longer to launch one by one from Python than the device takes to run them
(bench/README.md, "The host's share of GPU decoding"): the host sets the pace. A CUDA graph records
a step's kernels once; each later step launches them all with one call. A graph replays fixed
shapes at fixed addresses, so ``GraphedStepper`` keeps the search's rows in buffers of fixed size
and runs the step in place on them:

- R rows: the rows the search holds first, filler after them (computed, never read);
- S source positions: the longest source so far, each row's padding masked by its length;
- C cache columns (a Transformer's): ``TransformerState``'s shared column grid with room to grow;
  each row attends from its ``start`` to the column being written, ``cached``, here a device
  scalar. An RNN's state has no columns: its new state is copied into the buffers of the old.

When the rows, a source or the columns outgrow their buffers, the buffers are made twice as large
and the step is recorded again: a few recordings a run (the columns no row uses any more are
dropped first, once the buffers are full: until then they cost a graph nothing). The Translator
keeps each decoding thread's ``GraphedStepper`` from one search to the next (``restart``), so that
a server, which runs a search for each burst of requests, records only when a burst outgrows the
buffers. The search's reorder within examples (each step of a beam search) happens at the start of
the next step, inside the graph. Examples never leave the buffers' rows: one that is done stays,
idle, until an example joining takes its rows (``extend``'s ``slots``), a copy of the joining rows
outside the graph.

Off CUDA the same fixed-shape step runs without a graph (what the tests check: the same lines as
``ModelStepper``, no read of the device and no copy from the host in a step; and the same lines
with the step recorded and replayed by a CUDA graph's rules, ``tests/graph_replay.py``). One
model: a Transformer decoder or an input-feeding RNN decoder, without copy attention, relative
positions or kept attention (``graphing_problem``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from onmt_lite.models.embeddings import Embeddings
from onmt_lite.models.rnn_decoder import InputFeedRNNDecoder
from onmt_lite.models.transformer import TransformerDecoder
from onmt_lite.translate.stepper import EnsembleStepper, ModelStepper
from onmt_lite.utils.cuda import graph_recording
from onmt_lite.utils.tensors import corner, from_host

# the buffers' first sizes (doubled as needed, each time recorded again, which waits for the
# device and collects Python's garbage: tens of milliseconds): rows (when the search does not say
# how many it holds at most), source positions, cache columns
FIRST_ROWS = 8
FIRST_SOURCES = 64
FIRST_COLUMNS = 64

# a buffer's dimensions: (rows, source positions or None, cache columns or None), as the decoder
# states' ``parts`` give them
Dims = tuple[int, int | None, int | None]


def graphing_problem(models: list, keep_attention: bool) -> str | None:
    """Why the search of ``models`` cannot run as a graph (a phrase for an error), or None."""
    if len(models) != 1:
        return "an ensemble (several -model)"
    decoder = models[0].decoder
    if not isinstance(decoder, (TransformerDecoder, InputFeedRNNDecoder)):
        return "a decoder other than a Transformer's or an input-feeding RNN's (-input_feed 0)"
    if decoder.copy_attn:
        return "copy attention"
    if isinstance(decoder, TransformerDecoder):
        if decoder.max_relative_positions:
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


def memory_parts(stepper: ModelStepper) -> list[tuple[Tensor, Dims]]:
    """What a step reads of the rows' sources: the memory bank ``[B x S x H]`` (an RNN's; a
    Transformer reads only its keys) and the precomputed keys, with their dimensions."""
    parts = []
    if not isinstance(stepper.model.decoder, TransformerDecoder):
        parts.append((stepper.memory, (0, 1, None)))
    if stepper.keys is not None:
        parts.append((stepper.keys, (stepper.keys_batch_dim, stepper.keys_source_dim, None)))
    return parts


def only_model(stepper) -> ModelStepper:
    """The ``ModelStepper`` of a single model's stepper (an ``EnsembleStepper`` of one)."""
    if isinstance(stepper, EnsembleStepper):
        (stepper,) = stepper.steppers
    return stepper


class GraphedStepper:
    """``ModelStepper``'s interface to the search (``step``, ``reorder``, ``extend``) on
    fixed-size buffers, the step recorded as a CUDA graph when ``record`` (else run as is).

    Buffers (R rows; see the module's docstring):
        tokens ``[R]``: the rows' next inputs; lengths ``[R]``: their sources' (filler: 1);
        memory: ``memory_parts``'s, R rows and S positions each; state: the decoder state's
        ``parts``, R rows (and C columns for a Transformer's cache) each;
        cached ``[]``: the column a Transformer writes next (``columns`` on the host);
        order ``[R]``: the reorder the next step starts with (the identity but for one step).
    """

    # a step computes every row of the buffers, filler included, so rows cost it nothing: an
    # example joins with all its beam's rows (``extend``; not one row until its first step), and
    # one that is done keeps its rows until an example joining takes them (``extend``'s
    # ``slots``), which spares the copies of every buffer that leaving would make
    fixed_rows = True

    def __init__(self, stepper, record: bool, rows: int | None = None, beam: int = 1):
        """``stepper``: the first batch's; ``rows``: the most the search holds (None: unknown);
        ``beam``: the rows an example joins with (the search's beam width)."""
        first = only_model(stepper)
        self.model = first.model
        self.beam = beam
        self.transformer = isinstance(self.model.decoder, TransformerDecoder)
        self.record = record
        self.held: list[Tensor] = []  # tensors the graph reads that no buffer owns
        self.like = first.state  # what the state buffers make (``of_parts``)
        self.n_rows = 0  # the rows the search holds: the first n_rows of each buffer
        self.columns = 0
        self.unused_columns = 0  # the leading columns no row uses, dropped when the buffers fill
        device = first.lengths.device
        self.size = (
            doubled(rows or FIRST_ROWS, first.lengths.size(0)),
            doubled(FIRST_SOURCES, first.memory.size(1)),
            FIRST_COLUMNS if self.transformer else 0,
        )
        capacity = self.size[0]
        self.tokens = torch.zeros(capacity, dtype=torch.long, device=device)
        self.lengths = torch.ones(capacity, dtype=torch.long, device=device)
        self.cached = torch.zeros((), dtype=torch.long, device=device)
        self.order = torch.arange(capacity, device=device)
        self.identity = torch.arange(capacity, device=device)
        parts = memory_parts(first)
        self.memory_dims = [dims for _, dims in parts]
        self.memory = [t.new_zeros(self._shape(t, dims)) for t, dims in parts]
        parts = first.state.parts()
        self.state_dims = [dims for _, dims in parts]
        self.state = [t.new_zeros(self._shape(t, dims)) for t, dims in parts]
        self.graph = None
        self.out = None
        self.extend(first)

    def restart(self, first) -> GraphedStepper:
        """This stepper for a new search whose first batch's stepper is ``first``: the rows,
        columns and pending reorder of the search before forgotten, every buffer as a new stepper's
        (filler), and the recorded step kept (the buffers keep their sizes and addresses)."""
        self.n_rows = 0
        self.columns = 0
        self.unused_columns = 0
        self.cached.zero_()
        self.order.copy_(self.identity)
        self.lengths.fill_(1)
        for buffer in (self.tokens, *self.memory, *self.state):
            buffer.zero_()
        self.extend(first)
        return self

    def _shape(self, tensor: Tensor, dims: Dims) -> tuple:
        """``tensor``'s shape with the buffers' size in each of ``dims``."""
        shape = list(tensor.shape)
        for dim, size in zip(dims, self.size):
            if dim is not None:
                shape[dim] = size
        return tuple(shape)

    def _enlarged(self, old: Tensor, dims: Dims, fill: int = 0) -> Tensor:
        """A buffer of the current size with ``old`` in its leading corner, ``fill`` elsewhere."""
        new = old.new_full(self._shape(old, dims), fill)
        new[corner(old.shape)] = old
        return new

    def _fit(self, rows: int, sources: int, columns: int) -> None:
        """Make the buffers hold ``rows`` rows, ``sources`` source positions and ``columns``
        columns (doubled where short; the step is recorded again)."""
        old_rows, old_sources, old_columns = self.size
        new_rows = doubled(old_rows, rows)
        self.size = (new_rows, doubled(old_sources, sources), doubled(old_columns, columns))
        if self.size == (old_rows, old_sources, old_columns):
            return
        vector = (0, None, None)
        self.tokens = self._enlarged(self.tokens, vector)
        self.lengths = self._enlarged(self.lengths, vector, 1)
        self.memory = [self._enlarged(t, d) for t, d in zip(self.memory, self.memory_dims)]
        self.state = [self._enlarged(t, d) for t, d in zip(self.state, self.state_dims)]
        # a pending reorder names rows below old_rows; the new rows stay where they are
        identity = torch.arange(new_rows, device=self.order.device)
        self.order = torch.cat([self.order, identity[old_rows:]])
        self.identity = identity
        self.graph = None
        self.out = None

    def _decode(self) -> Tensor:
        """The step on the buffers: the pending reorder, one position decoded for every row, the
        state advanced in place. Returns the log-probabilities ``[R x V]``."""
        for buffer, (row_dim, _, _) in zip(self.state, self.state_dims):
            buffer.copy_(buffer.index_select(row_dim, self.order))
        self.order.copy_(self.identity)
        state = self.like.of_parts(self.state)
        if self.transformer:
            state.cached = self.cached  # the column written: a device scalar, ``fixed``
        memory_bank = None if self.transformer else self.memory[0].transpose(0, 1)  # [S x R x H]
        # (``memory_parts`` puts the keys last)
        keys = self.memory[-1] if self.model.decoder.precomputes_memory_keys else None
        dec_out, _, new_state = self.model.decode(
            self.tokens.unsqueeze(0),
            memory_bank,
            self.lengths,
            state,
            keys,
            need_attention=False,
        )
        if self.transformer:  # the new position is in the cache buffers already
            self.cached.add_(1)
        else:
            for buffer, (new, _) in zip(self.state, new_state.parts()):
                buffer.copy_(new)
        return self.model.generator(dec_out[0])

    def _warm_up(self) -> None:
        """A run of ``_decode`` outside a graph, before its recording (it makes what a first run
        makes: cuBLAS's workspace, the position table), its step undone: the graph's first replay
        does it from the state before it."""
        kept = (*self.state, self.order, self.cached)
        saved = [buffer.clone() for buffer in kept]
        self._decode()
        for buffer, before in zip(kept, saved):
            buffer.copy_(before)

    def _record_graph(self) -> None:
        """Record ``_decode`` as a CUDA graph, after ``_warm_up`` on a side stream."""
        device = self.tokens.device
        with graph_recording(device) as side:
            side.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(side):
                self._warm_up()
            torch.cuda.current_stream(device).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            # thread_local: the server's other models decode in their threads meanwhile
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                self.out = self._decode()
        self.graph = graph
        # read by the graph: kept alive when a longer source makes the table anew
        self.held = Embeddings.kept_tables(self.model)

    def _make_room_for_a_column(self) -> int:
        """Shift the unused columns out if the buffers hold no column more, and return the columns
        the next step needs, the one it writes included (an RNN: 0): what ``_fit`` is to hold."""
        if not self.transformer:
            return 0
        if self.columns + 1 > self.size[2] and self.unused_columns:
            self._shift_columns_left(self.unused_columns)
        return self.columns + 1

    def step(self, tokens: Tensor) -> tuple[Tensor, dict]:
        """``tokens`` ``[n_rows]`` -> log-probabilities ``[n_rows x V]`` (a view of the graph's
        output, valid until the next step) and no attention."""
        self._fit(self.n_rows, 0, self._make_room_for_a_column())
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
        """As ``ModelStepper.reorder`` within examples (``rows`` ``[n_rows]``), at the start of the
        next step, in the graph. Examples never leave (``memory_rows``): see ``extend``."""
        if memory_rows is not None or unused_columns:
            raise ValueError("examples do not leave a GraphedStepper's rows: others take them")
        self.order[: rows.size(0)].copy_(rows)

    def release_columns(self, unused: int) -> None:
        """The ``unused`` columns after those released before are no row's any more: dropped when
        the buffers are full (until then they cost the graph nothing)."""
        self.unused_columns += unused

    def _shift_columns_left(self, unused: int) -> None:
        """Move a Transformer's columns ``unused`` to the left: the first ``unused`` are no
        row's."""
        *cache, start = self.state
        width = self.size[2]
        for buffer, (_, _, column_dim) in zip(cache, self.state_dims):
            kept = buffer.narrow(column_dim, unused, width - unused).clone()
            buffer.narrow(column_dim, 0, width - unused).copy_(kept)
        # (the live rows start at ``unused`` or later; filler and idle rows stay at 0 or more, so
        # that no row's position, cached - start, is past the columns)
        start.sub_(unused).clamp_(min=0)
        self.cached.sub_(unused)
        self.columns -= unused
        self.unused_columns -= unused

    def extend(self, other, slots: list[int] = ()) -> None:
        """Put the rows of ``other`` (a single model's stepper of examples joining, one row each,
        their decoder state the first: a Transformer's cache empty) into the buffers, each
        ``beam`` times: the first ``len(slots)`` examples into the rows of the examples at
        positions ``slots`` (idle ones, written over), the others after the rows held. Example b's
        rows are ``b * beam`` to ``b * beam + beam - 1``."""
        joining = only_model(other)
        beam = self.beam
        n_rows = self.n_rows
        examples = joining.lengths.size(0)
        appended = (examples - len(slots)) * beam
        self._fit(n_rows + appended, joining.memory.size(1), self._make_room_for_a_column())
        at = None  # where the joining rows go: after the rows held (None) or ``[examples * beam]``
        if slots:
            targets = [b * beam + k for b in slots for k in range(beam)]
            at = from_host(targets + list(range(n_rows, n_rows + appended)), self.tokens.device)
        state_parts = [part for part, _ in joining.state.parts()]
        if self.transformer:  # their positions start at the column written next
            state_parts[-1] = state_parts[-1] + self.columns
        pairs = [
            *zip(self.memory, self.memory_dims, [part for part, _ in memory_parts(joining)]),
            *zip(self.state, self.state_dims, state_parts),
            (self.lengths, (0, None, None), joining.lengths),
        ]
        for buffer, (row_dim, _, _), part in pairs:
            self._write_rows(buffer, row_dim, part, at)
        self.n_rows += appended

    def _write_rows(self, buffer: Tensor, row_dim: int, part: Tensor, at: Tensor | None) -> None:
        """Write ``part`` (one row per joining example along ``row_dim``) into ``buffer``'s rows
        ``at`` (None: the rows after those held), each example's row to its ``beam`` rows, zeros
        where ``part`` is narrower than the buffer (a shorter source, a cache without columns)."""
        count = part.size(row_dim) * self.beam
        if part.numel() == 0:  # zeros alone
            if at is None:
                buffer.narrow(row_dim, self.n_rows, count).zero_()
            else:
                buffer.index_fill_(row_dim, at, 0)
            return
        shape = list(buffer.shape)
        shape[row_dim] = count
        covered = all(shape[d] == part.size(d) for d in range(len(shape)) if d != row_dim)
        if covered and at is not None:  # (repeat_interleave: one copy; with one row, none)
            beams = part if self.beam == 1 else part.repeat_interleave(self.beam, row_dim)
            buffer.index_copy_(row_dim, at, beams)
            return
        if at is None:
            rows = buffer.narrow(row_dim, self.n_rows, count)
            if not covered:
                rows.zero_()
        else:  # (part narrower than the buffer: zeros around it)
            rows = buffer.new_zeros(shape)
        # [... x examples x beam x ...]: each example's row copied to its beam's, one copy
        beams = rows.unflatten(row_dim, (part.size(row_dim), self.beam))
        index = list(corner(part.shape))
        index.insert(row_dim + 1, slice(None))  # every beam
        beams[tuple(index)] = part.unsqueeze(row_dim + 1)
        if at is not None:
            buffer.index_copy_(row_dim, at, rows)
