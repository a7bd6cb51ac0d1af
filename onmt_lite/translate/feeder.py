"""Continuous batching for translation: examples join a running search as rows free up."""

from onmt_lite.translate.beam_state import Joining

BEAM_JOIN_FREE = 0.25  # a beam search lets examples join once this part of the batch is free


class RowFeeder:
    """Continuous batching: examples join a running search as soon as there is room for them.

    Without it a batch decodes until its longest output ends, the rows of finished examples
    dropping out one by one: the last steps multiply the whole vocabulary projection for a few rows.
    Here the batches are still encoded one at a time, as they come, but their examples join the
    search one by one whenever fewer than ``batch_size`` sentences (``batch_type`` "tokens": source
    tokens) are being decoded. ``examples[id]`` is ``(line, copy words or None)`` of each example.

    Greedy search and sampling (``beam`` 1) are refilled at every step, which saves the most where
    outputs vary most in length (copy models). A beam search's rows are ``beam`` times wider and
    every join copies the running rows' state, so refilling it at every step costs more than it
    saves: its examples join in groups instead, once at least ``BEAM_JOIN_FREE`` of the batch is
    free (bench/README.md has the measurements behind both choices). A ``GraphedStepper``
    (-cuda_graphs) copies only the joining rows, into the idle examples' (``admit``'s ``slots``),
    and joins in groups alike: counted on the CPU, joining at every step there took 7% fewer steps
    for 37% more kernels outside the graph (which pays is for a device to measure).

    ``prefixes``: ``{line: target prefix ids}`` (``TextBatches.prefixes``), which the examples join
    with (``-tgt_prefix``); None: no example has one. ``running``: makes the search's stepper of the
    first batch's (``-cuda_graphs``: a ``GraphedStepper``); None: the first batch's is it.
    """

    def __init__(
        self,
        batches,
        make_stepper,
        beam,
        batch_size,
        batch_type,
        device,
        prefixes=None,
        running=None,
    ):
        self.batches = iter(batches)
        self.make_stepper = make_stepper
        self.running = running
        self.beam = beam
        self.batch_size = batch_size
        self.batch_type = batch_type
        self.device = device
        self.prefixes = prefixes
        self.stepper = None
        self.waiting = None
        self.examples = {}
        self.next_id = 0

    def _used(self, count, tokens):
        return count if self.batch_type == "sents" else tokens

    def _fits(self, count, tokens, length):
        if self.batch_type == "sents":
            return count < self.batch_size
        return count == 0 or tokens + length <= self.batch_size

    def _next_batch(self):
        """The next batch, encoded: ``[stepper, batch, first example still waiting]``, or None."""
        batch = next(self.batches, None)
        return None if batch is None else [self.make_stepper(batch.to(self.device)), batch, 0]

    def room_for(self, src_lengths: list[int]) -> bool:
        """Whether there is room for examples to join, the examples searching having the source
        lengths ``src_lengths``: a beam search's batch is full until ``BEAM_JOIN_FREE`` of it is
        free."""
        count = len(src_lengths)
        full = self._used(count, sum(src_lengths)) > (1 - BEAM_JOIN_FREE) * self.batch_size
        return not (count and self.beam > 1 and full)

    def admit(self, src_lengths: list[int], slots: list[int] = ()) -> Joining | None:
        """See ``Search.stream``: let in waiting examples while there is room, the first
        ``len(slots)`` into the rows of the examples at positions ``slots`` (``fixed_rows``)."""
        if not self.room_for(src_lengths):
            return None
        count = len(src_lengths)
        tokens = sum(src_lengths)
        ids = []
        lengths = []
        while True:
            self.waiting = self.waiting or self._next_batch()
            if self.waiting is None:
                break
            stepper, batch, first = self.waiting
            batch_lengths = batch.src_lengths_cpu.tolist()  # host data: no wait for a device
            last = first
            while last < batch.batch_size and self._fits(count, tokens, batch_lengths[last]):
                count += 1
                tokens += batch_lengths[last]
                last += 1
            if last == first:
                break
            whole = (first, last) == (0, batch.batch_size)
            joining = stepper if whole else stepper.part(slice(first, last))
            if self.stepper is None:
                self.stepper = joining if self.running is None else self.running(joining)
            else:
                self.stepper.extend(joining, slots[len(ids) : len(ids) + last - first])
            lines = batch.indices_cpu.tolist()
            for b in range(first, last):
                ex_words = batch.src_ex_vocab[b] if batch.src_map is not None else None
                ids.append(self.next_id)
                self.examples[self.next_id] = (lines[b], ex_words)
                self.next_id += 1
            lengths += batch_lengths[first:last]
            self.waiting = None if last == batch.batch_size else [stepper, batch, last]
        if not ids:
            return None
        return Joining(ids, lengths, self._prefixes(ids))

    def dropped(self, ids: list[int]) -> set | None:
        """See ``Search.stream``: no example here ends unfinished."""
        return None

    def _prefixes(self, ids: list[int]) -> list[list[int]] | None:
        """The target prefixes of the examples ``ids`` (token id lists); None without prefixes."""
        if self.prefixes is None:
            return None
        return [list(self.prefixes[self.examples[i][0]]) for i in ids]
