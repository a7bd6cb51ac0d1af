"""One decoding step of a model or an ensemble, over ``rows = batch x beam``.

``ModelStepper`` holds the encoder output and the DecoderState of one model, one row per example
until the search's reorder after an example's first step gives it a row per beam;
``step(tokens)`` returns log-probabilities ``[rows x V']`` (``V' = V + n_src_words`` for copy
models, the copy scores collapsed onto words the vocabulary has) and attention ``{"std", "copy"}``
``[rows x S]`` (plus ``"p_copy"`` ``[rows x 1]``, the probability of copying, for copy models), or
only what the copy needs when the search keeps no attention (``keep_attention=False``);
``reorder(rows)`` follows the search's choice of rows. ``part(rows)`` (a slice: views) and
``extend(other)`` move rows from one stepper to another: examples encoded in one batch join a
search that is already running (the source width S of the attention then grows to the longest; it
never shrinks).
"""

import copy
import math

import torch

from onmt_lite.data.vocab import UNK_ID
from onmt_lite.models.copy_generator import at_least_float32, collapse_copy_log_probs
from onmt_lite.utils.tensors import pad_to


def _joined(a, b, dim, pad_dims=()):
    """``a`` and ``b`` concatenated along ``dim``, first padded to the larger size along
    ``pad_dims``."""
    for pad_dim in pad_dims:
        size = max(a.size(pad_dim), b.size(pad_dim))
        a = pad_to(a, pad_dim, size)
        b = pad_to(b, pad_dim, size)
    return torch.cat([a, b], dim)


class ModelStepper:
    def __init__(self, model, batch, vocab_size, keep_attention=True):
        self.model = model
        self.vocab_size = vocab_size
        self.copy = model.decoder.copy_attn
        self.keep_attention = keep_attention
        # the lengths on the host: an RNN encoder packs with them there
        encoded = model.encode(batch.src, batch.src_lengths_cpu, batch.src_feats)
        memory_bank, lengths, state = encoded
        # the memory bank batch-first, [rows x S x H]: examples that leave are dropped with one
        # contiguous copy per row (not a gather of the rows of a time-major tensor), and the
        # attention reads each row's memory contiguously
        self.memory = memory_bank.transpose(0, 1).contiguous()
        # what the attention computes of the memory (mlp attention's projection, the Transformer's
        # keys and values): once per example here, not at every step for every beam
        self.keys = (
            model.decoder.memory_keys(memory_bank)
            if model.decoder.precomputes_memory_keys
            else None
        )
        self.keys_batch_dim, self.keys_source_dim = model.decoder.memory_keys_dims
        self.lengths = lengths
        self.state = state
        if self.copy:
            self.src_map = batch.src_map
            self.ex_ids = batch.src_ex_tgt_ids

    def step(self, tokens):
        inputs = tokens
        if self.copy:  # a copied word outside the vocabulary is read back as <unk>
            inputs = tokens.masked_fill(tokens >= self.vocab_size, UNK_ID)
        inputs = inputs.unsqueeze(0)
        dec_out, attns, self.state = self.model.decode(
            inputs,
            self.memory.transpose(0, 1),
            self.lengths,
            self.state,
            self.keys,
            need_attention=self.keep_attention,
        )
        if not self.copy:
            log_probs = self.model.generator(dec_out[0])
        else:
            log_probs = collapse_copy_log_probs(
                self.model.generator(dec_out[0], attns["copy"][0], self.src_map),
                self.ex_ids,
                self.vocab_size,
            )
        if not self.keep_attention:
            return log_probs, {}
        # the search keeps attention in float32 whatever the model's precision (-precision)
        attns = {
            name: at_least_float32(value[0])
            for name, value in attns.items()
            if name in ("std", "copy")
        }
        if self.copy:
            gate = self.model.generator.linear_copy(dec_out[0])
            attns["p_copy"] = torch.sigmoid(at_least_float32(gate))
        return log_probs, attns

    def part(self, rows: slice):
        """A stepper of the consecutive rows ``rows`` of this one (whole examples), viewing its
        tensors, no copy: the stepper it joins copies them in (``extend``), and a part that starts
        a search steps on the views (a step makes its state anew, or writes its own rows)."""
        part = copy.copy(self)

        def take(tensor, dim):
            return tensor.narrow(dim, rows.start, rows.stop - rows.start)

        part.state = self.state.map(take)
        part._take_memory(take)
        return part

    def extend(self, other, slots: list[int] = ()):
        """Append the rows of ``other``; source positions and copy entries padded to the longer.
        (``slots``, the places of idle examples, are for ``fixed_rows`` steppers: none here.)"""
        if slots:
            raise ValueError("a ModelStepper appends rows: it has no idle examples' places")
        self.memory = _joined(self.memory, other.memory, 0, (1,))
        self.lengths = torch.cat([self.lengths, other.lengths])
        if self.keys is not None:
            self.keys = _joined(self.keys, other.keys, self.keys_batch_dim, (self.keys_source_dim,))
        self.state = self.state.concat(other.state)
        if self.copy:
            self.src_map = _joined(self.src_map, other.src_map, 1, (0, 2))
            self.ex_ids = _joined(self.ex_ids, other.ex_ids, 0, (1,))

    def reorder(self, rows, memory_rows=None, unused_columns: int = 0):
        """Follow the search: state rows ``rows``; with ``memory_rows`` the rows' examples changed
        too (examples left, or rows joined: a row per beam after each example's first step), and the
        first ``unused_columns`` positions of the state are no row's any more (examples left)."""
        self.state = self.state.map(lambda t, dim: t.index_select(dim, rows))
        if memory_rows is not None:
            self.state = self.state.compact(unused_columns)
            self._take_memory(lambda t, dim: t.index_select(dim, memory_rows))

    def _take_memory(self, take) -> None:
        """Keep ``take(tensor, rows dimension)`` of each tensor of the rows' sources."""
        self.memory = take(self.memory, 0)
        self.lengths = take(self.lengths, 0)
        if self.keys is not None:
            self.keys = take(self.keys, self.keys_batch_dim)
        if self.copy:
            self.src_map = take(self.src_map, 1)
            self.ex_ids = take(self.ex_ids, 0)


class EnsembleStepper:
    """Several models decoding together: log-probabilities averaged in log space (or in probability
    space with ``raw_probs``), attention averaged (each kind that every model has)."""

    def __init__(self, steppers, raw_probs=False):
        self.steppers = steppers
        self.raw_probs = raw_probs

    def step(self, tokens):
        outputs = [s.step(tokens) for s in self.steppers]
        if len(outputs) == 1:
            return outputs[0]
        log_probs = torch.stack([lp for lp, _ in outputs])
        if self.raw_probs:
            averaged = torch.logsumexp(log_probs, 0) - math.log(len(outputs))
        else:
            averaged = log_probs.mean(0)
        # the attentions every model has (a model without attention has none)
        names = [name for name in outputs[0][1] if all(name in a for _, a in outputs)]
        attns = {name: torch.stack([a[name] for _, a in outputs]).mean(0) for name in names}
        return averaged, attns

    def part(self, rows: slice):
        return EnsembleStepper([s.part(rows) for s in self.steppers], self.raw_probs)

    def extend(self, other, slots: list[int] = ()):
        for stepper, addition in zip(self.steppers, other.steppers):
            stepper.extend(addition, slots)

    def reorder(self, rows, memory_rows=None, unused_columns: int = 0):
        for stepper in self.steppers:
            stepper.reorder(rows, memory_rows, unused_columns)
