"""RNN decoders with global attention (or none): input feeding (stepped) or standard (one RNN call),
optionally with a context gate after the attention.

Both take and return an explicit ``DecoderState``; nothing about a sequence is stored on the module,
so beam search can reorder a state with ``state.map`` and truncated BPTT can cut it with
``state.detach``. Shapes: T target positions, B batch, S source positions, H hidden size.
"""

from __future__ import annotations

import functools

import torch
import torch.nn as nn
from torch import Tensor

from onmt_lite.models.attention import GlobalAttention, padding_mask
from onmt_lite.models.context_gate import ContextGate
from onmt_lite.models.dropout import DropoutMasks, step_dropout_masks
from onmt_lite.models.recurrent import run_rnn
from onmt_lite.models.rnn_state import DecoderState
from onmt_lite.utils.tensors import joined


def in_autocast_dtype(x: Tensor) -> Tensor:
    """``x`` in the dtype autocast gives matrix products on ``x``'s device where autocast is on
    there (and would convert ``x`` to: float32, not float64); else ``x`` itself."""
    device_type = x.device.type
    if x.dtype != torch.float32 or not torch.is_autocast_enabled(device_type):
        return x
    return x.to(torch.get_autocast_dtype(device_type))


class StackedCells(nn.Module):
    """``num_layers`` LSTM or GRU cells stepped together, dropout between layers (the masks
    given). A loop over positions keeps each layer's state apart (``step``; the input-feed
    decoder's state gives and takes them so: ``DecoderState.layers``, ``of_layers``): stacking at
    every position would add, per position, a copy forward and a gradient of the whole stack per
    layer backward. ``forward`` steps once from and to stacks (``unstacked``, ``stacked``)."""

    def __init__(self, rnn_type, num_layers, input_size, hidden_size):
        super().__init__()
        cell = nn.LSTMCell if rnn_type == "LSTM" else nn.GRUCell
        self.is_lstm = rnn_type == "LSTM"
        self.cells = nn.ModuleList(
            cell(input_size if i == 0 else hidden_size, hidden_size) for i in range(num_layers)
        )

    @staticmethod
    def unstacked(hidden: tuple[Tensor, ...]) -> list[tuple[Tensor, ...]]:
        """``hidden`` (tuple of ``[layers x B x H]``) as each layer's state: a list of tuples of
        ``[B x H]`` views."""
        return list(zip(*(h.unbind(0) for h in hidden)))

    @staticmethod
    def stacked(layers: list[tuple[Tensor, ...]]) -> tuple[Tensor, ...]:
        """``unstacked``'s inverse: each layer's state -> tuple of ``[layers x B x H]``."""
        return tuple(torch.stack(states) for states in zip(*layers))

    def forward(self, x, hidden, masks=None):
        """One step: ``x`` ``[B x input]``, ``hidden`` tuple of ``[layers x B x H]``; ``masks``
        ``[layers x B x H]``, the step's dropout masks (``step_dropout_masks``): ``masks[i + 1]``
        after layer i but the last (``masks[0]`` is the caller's, for the step's output), or None:
        no dropout. Returns the top layer's output ``[B x H]`` and the new ``hidden``."""
        drop = None if masks is None else functools.partial(DropoutMasks(masks[None]).drop, 0)
        x, layers = self.step(x, self.unstacked(hidden), drop)
        return x, self.stacked(layers)

    def step(self, x, layers, drop=None):
        """``forward`` on each layer's state (``unstacked``) instead of the stacks, ``drop(x, i)``
        applying the step's mask ``i`` (``DropoutMasks.drop``): returns the top layer's output and
        the layers' new states, for the next step."""
        new_states = []
        for i, (cell, state) in enumerate(zip(self.cells, layers)):
            layer_state = cell(x, state) if self.is_lstm else (cell(x, state[0]),)
            x = layer_state[0]
            if i + 1 < len(self.cells) and drop is not None:
                x = drop(x, i=i + 1)
            new_states.append(layer_state)
        return x, new_states


class RNNDecoderBase(nn.Module):
    """What both decoders share: embeddings, attention, copy attention, context gate, state
    initialisation.

    Args:
        rnn_type, num_layers, hidden_size, dropout: of the RNN (dropout also on the output).
        attn_type: "dot", "general", "mlp", or "none": no attention, the output is the RNN's (then
            no ``attns["std"]``: coverage needs attention; copy attention then needs
            ``copy_attn_type``).
        embeddings: an ``Embeddings`` module.
        coverage_attn: feed coverage into the attention and return ``attns["coverage"]``.
        copy_attn: return ``attns["copy"]`` (``reuse_copy_attn``: the standard attention itself;
            else a separate attention of type ``copy_attn_type``).
        attn_func: "softmax" or "sparsemax", of the attention and the copy attention.
        context_gate: None, or "source", "target", "both": a ``ContextGate`` of the RNN's input, the
            RNN's output and the attentional output, applied before the output's dropout.
    """

    input_feed = False  # whether the RNN's input holds the previous output besides the embedding

    def __init__(
        self,
        rnn_type,
        num_layers,
        hidden_size,
        attn_type,
        dropout,
        embeddings,
        coverage_attn=False,
        copy_attn=False,
        reuse_copy_attn=False,
        copy_attn_type=None,
        attn_func="softmax",
        context_gate=None,
    ):
        super().__init__()
        if attn_type == "none" and (coverage_attn or reuse_copy_attn):
            raise ValueError(
                "coverage and a reused copy attention need attention (attn_type is none)"
            )
        if attn_type == "none" and copy_attn and copy_attn_type is None:
            raise ValueError("copy attention without attention needs its own type (copy_attn_type)")
        self.embeddings = embeddings
        self.hidden_size = hidden_size
        self.dropout = nn.Dropout(dropout)
        self.attn = (
            None
            if attn_type == "none"
            else GlobalAttention(
                hidden_size, attn_type, coverage=coverage_attn, attn_func=attn_func
            )
        )
        self.coverage_attn = coverage_attn
        self.copy_attn = copy_attn
        self.copy_attention = None
        if copy_attn and not reuse_copy_attn:
            self.copy_attention = GlobalAttention(
                hidden_size, copy_attn_type or attn_type, output_layer=False, attn_func=attn_func
            )
        self.rnn_input_size = embeddings.embedding_size + (hidden_size if self.input_feed else 0)
        self.context_gate = (
            None
            if context_gate is None
            else ContextGate(context_gate, self.rnn_input_size, hidden_size)
        )

    @property
    def attentional(self):
        """Whether the decoder attends to the source (``attns["std"]``); not with -global_attention
        none."""
        return self.attn is not None

    def init_state(self, encoder_final, memory_bank):
        """The first state: the encoder's final states, a zero input feed, zero coverage."""
        src_len, batch, _ = memory_bank.shape
        zeros = memory_bank.new_zeros
        return DecoderState(
            encoder_final,
            zeros(batch, self.hidden_size),
            zeros(batch, src_len) if self.coverage_attn else None,
        )

    memory_keys_dims = (0, 1)  # the batch and source dimensions of memory_keys's output

    @property
    def precomputes_memory_keys(self):
        """Whether ``memory_keys`` computes something (mlp attention) rather than return the
        memory."""
        return self.attentional and self.attn.projects_memory

    def memory_keys(self, memory_bank):
        """What the attention scores ``memory_bank`` ``[S x B x H]`` by: ``[B x S x H]``, the memory
        itself for dot and general attention (and without attention), a projection of it for mlp. A
        caller that decodes one position at a time computes it once and passes it back to
        ``forward`` (``memory_keys=``)."""
        memory = memory_bank.transpose(0, 1)
        return self.attn.memory_keys(memory) if self.attentional else memory

    def _attend(self, query, memory, lengths, keys, coverage, padding=None):
        """Attention of ``query`` ``[B x T x H]``; with coverage, one position at a time.

        Returns attn_h ``[B x T x H]``, align ``[B x T x S]``, the coverage before each position
        ``[B x T x S]`` (or None) and the coverage after the last one. Without attention: ``query``
        itself and no align (None).
        """
        if not self.attentional:
            return query, None, None, None
        if coverage is None:
            attn_h, align = self.attn(query, memory, lengths, keys=keys, padding=padding)
            return attn_h, align, None, None
        outs = []
        aligns = []
        covs = []
        for t in range(query.size(1)):
            covs.append(coverage)
            attn_h, align = self.attn(
                query[:, t : t + 1], memory, lengths, coverage.unsqueeze(1), keys, padding
            )
            coverage = coverage + align.squeeze(1)
            outs.append(attn_h)
            aligns.append(align)
        return joined(outs, 1), joined(aligns, 1), joined(covs, 1, stack=True), coverage

    def _attns(self, dec_out, align, covs, memory, lengths):
        """The ``attns`` dict, time-major ``[T x B x S]`` tensors: without attention only ``"copy"``
        (a copy attention of its own), or nothing."""
        attns = {} if align is None else {"std": align.transpose(0, 1)}
        if covs is not None:
            attns["coverage"] = covs.transpose(0, 1)
        if self.copy_attn:
            if self.copy_attention is None:
                attns["copy"] = attns["std"]
            else:
                _, copy_align = self.copy_attention(dec_out, memory, lengths)
                attns["copy"] = copy_align.transpose(0, 1)
        return attns


class InputFeedRNNDecoder(RNNDecoderBase):
    """Stacked cells stepped one target position at a time, the previous attentional output
    concatenated to each input (Luong et al. 2015)."""

    input_feed = True

    def __init__(self, rnn_type, num_layers, hidden_size, attn_type, dropout, embeddings, **kwargs):
        super().__init__(
            rnn_type, num_layers, hidden_size, attn_type, dropout, embeddings, **kwargs
        )
        self.rnn = StackedCells(rnn_type, num_layers, self.rnn_input_size, hidden_size)

    def forward(
        self, tgt, memory_bank, state, memory_lengths, memory_keys=None, need_attention=True
    ):
        """Decode ``tgt`` ``[T x B]`` from ``state`` (``memory_keys``:
        ``self.memory_keys(memory_bank)`` if already computed; ``need_attention`` changes nothing:
        the attention makes the output).

        Returns dec_out ``[T x B x H]``, attns (dict of ``[T x B x S]``), the new DecoderState.
        """
        memory = memory_bank.transpose(0, 1)
        # once, not per position
        keys = self.memory_keys(memory_bank) if memory_keys is None else memory_keys
        padding = padding_mask(memory_lengths, memory.size(1))
        layers = state.layers()
        feed = state.input_feed
        coverage = state.coverage
        outs = []
        aligns = []
        covs = []
        # each step's dropout masks: [0] the output's, [1:] between the layers
        masks = step_dropout_masks(self.dropout, tgt.size(0), len(self.rnn.cells), feed)
        masks = None if masks is None else DropoutMasks(masks)
        embedded = self.embeddings(tgt)  # [T x B x E]
        # under autocast converted once: the first cell would convert each position's input. Not
        # with a context gate: the cell's input then has two uses, whose gradients add up in its
        # dtype
        if self.context_gate is None:
            embedded = in_autocast_dtype(embedded)
        for t, emb_t in enumerate(embedded):
            drop = None if masks is None else functools.partial(masks.drop, t)
            rnn_input = torch.cat([emb_t, feed], 1)
            rnn_out, layers = self.rnn.step(rnn_input, layers, drop)
            attn_h, align, cov_before, coverage = self._attend(
                rnn_out.unsqueeze(1), memory, memory_lengths, keys, coverage, padding
            )
            out = attn_h.squeeze(1)
            if self.context_gate is not None:
                out = self.context_gate(rnn_input, rnn_out, out)
            feed = out if drop is None else drop(out, i=0)
            outs.append(feed)
            aligns.append(align)
            covs.append(cov_before)
        dec_out = joined(outs, 1, stack=True)  # [B x T x H]
        covs = joined(covs, 1) if coverage is not None else None
        align = joined(aligns, 1) if self.attentional else None
        attns = self._attns(dec_out, align, covs, memory, memory_lengths)
        return dec_out.transpose(0, 1), attns, DecoderState.of_layers(layers, feed, coverage)


class StdRNNDecoder(RNNDecoderBase):
    """One ``nn.LSTM``/``nn.GRU`` call over the whole target, then attention over all positions
    (position by position only when coverage makes the attention sequential)."""

    def __init__(self, rnn_type, num_layers, hidden_size, attn_type, dropout, embeddings, **kwargs):
        super().__init__(
            rnn_type, num_layers, hidden_size, attn_type, dropout, embeddings, **kwargs
        )
        self.is_lstm = rnn_type == "LSTM"
        self.rnn = getattr(nn, rnn_type)(
            embeddings.embedding_size,
            hidden_size,
            num_layers,
            dropout=dropout if num_layers > 1 else 0.0,
        )

    def forward(
        self, tgt, memory_bank, state, memory_lengths, memory_keys=None, need_attention=True
    ):
        """As ``InputFeedRNNDecoder.forward``; the returned state's input feed is the last
        output."""
        emb = self.embeddings(tgt)
        rnn_out, hidden = run_rnn(self.rnn, emb, state.hidden if self.is_lstm else state.hidden[0])
        hidden = hidden if self.is_lstm else (hidden,)
        memory = memory_bank.transpose(0, 1)
        rnn_out = rnn_out.transpose(0, 1)  # [B x T x H]
        attn_h, align, covs, coverage = self._attend(
            rnn_out,
            memory,
            memory_lengths,
            self.memory_keys(memory_bank) if memory_keys is None else memory_keys,
            state.coverage,
            # once: with coverage the attention goes position by position
            padding_mask(memory_lengths, memory.size(1)) if self.attentional else None,
        )
        if self.context_gate is not None:
            attn_h = self.context_gate(emb.transpose(0, 1), rnn_out, attn_h)
        dec_out = self.dropout(attn_h)
        attns = self._attns(dec_out, align, covs, memory, memory_lengths)
        return dec_out.transpose(0, 1), attns, DecoderState(hidden, dec_out[:, -1], coverage)
