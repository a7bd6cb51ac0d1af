"""The Transformer (Vaswani et al. 2017): encoder and decoder, pre-norm as in OpenNMT-py 1.x.

Each layer normalises its input, attends (or feeds forward) and adds the result back; a last
LayerNorm follows the stack. The decoder carries the keys and values of its self-attention in a
``TransformerState`` (``transformer_state.py``), so decoding one position at a time (with the
cache) computes what the whole teacher-forced pass computes, and the search reorders the cache as
it reorders an RNN's state.

Shapes: B batch, S source positions, T new target positions, P cached target positions,
H model size (``-rnn_size``), h heads, d = H / h per head. Inside the stacks tensors are batch-first
(``[B x T x H]``); what crosses the model's interface is time-major, as for the RNNs.
"""

from __future__ import annotations


import torch
import torch.nn as nn
from torch import Tensor

from onmt_lite.data.vocab import PAD_ID
from onmt_lite.models.alignment_head import DEFAULT as DEFAULT_ALIGNMENT
from onmt_lite.models.attention import length_mask
from onmt_lite.models.average_attention import AverageSelfAttention, average_counts
from onmt_lite.models.dropout import Dropout, relu_dropout
from onmt_lite.models.mean_encoder import mean_final_state
from onmt_lite.models.multihead import (
    MultiHeadAttention,
    SelfAttention,
    StepMasks,
    additive_mask,
)
from onmt_lite.models.transformer_state import TransformerState
from onmt_lite.utils.tensors import to_device

LAYER_NORM_EPS = 1e-6


class FeedForward(nn.Module):
    """``x + dropout(W2 dropout(relu(W1 LayerNorm(x))))``: the position-wise feed-forward block."""

    def __init__(self, dim: int, hidden: int, dropout: float):
        super().__init__()
        self.norm = nn.LayerNorm(dim, eps=LAYER_NORM_EPS)
        self.inner, self.outer = nn.Linear(dim, hidden), nn.Linear(hidden, dim)
        self.dropout = Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        inner = relu_dropout(self.inner(self.norm(x)), self.dropout.p, self.training)
        return x + self.dropout(self.outer(inner))


class TransformerEncoderLayer(nn.Module):
    """``x + dropout(SelfAttention(LayerNorm(x)))``, then ``FeedForward``."""

    def __init__(self, dim, heads, ff_size, dropout, attention_dropout, max_relative_positions=0):
        super().__init__()
        self.norm = nn.LayerNorm(dim, eps=LAYER_NORM_EPS)
        self.self_attn = SelfAttention(dim, heads, attention_dropout, max_relative_positions)
        self.feed_forward = FeedForward(dim, ff_size, dropout)
        self.dropout = Dropout(dropout)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        """``x`` ``[B x S x H]``, ``mask`` ``[B x 1 x 1 x S]`` (real source positions) ->
        ``[B x S x H]``."""
        attended, _ = self.self_attn(self.norm(x), mask)
        return self.feed_forward(x + self.dropout(attended))


class TransformerEncoder(nn.Module):
    """Encode a padded source batch with ``num_layers`` Transformer layers (interface of
    ``RNNEncoder``).

    Args:
        num_layers, dim, heads, ff_size, dropout, attention_dropout, max_relative_positions: the
            layers'.
        embeddings: an ``Embeddings`` module of size ``dim`` (with position encoding, normally).
        final_layers: for an RNN decoder, the ``(n_states, layers)`` of the state it starts from:
            the mean of the memory bank over the real positions, as ``-encoder_type mean`` gives;
            None: no final state (a Transformer decoder needs none).
    """

    def __init__(
        self,
        num_layers,
        dim,
        heads,
        ff_size,
        dropout,
        attention_dropout,
        embeddings,
        max_relative_positions=0,
        final_layers=None,
    ):
        super().__init__()
        self.embeddings = embeddings
        self.final_layers = final_layers
        self.layers = nn.ModuleList(
            TransformerEncoderLayer(
                dim, heads, ff_size, dropout, attention_dropout, max_relative_positions
            )
            for _ in range(num_layers)
        )
        self.norm = nn.LayerNorm(dim, eps=LAYER_NORM_EPS)

    def forward(self, src: Tensor, lengths: Tensor, src_feats: Tensor | None = None):
        """Encode ``src`` ``[S x B]`` with ``lengths`` ``[B]`` (and word features ``src_feats``
        ``[S x B x F]``).

        Returns final (see ``final_layers``), memory_bank ``[S x B x H]`` (zeros past each length),
        lengths.
        """
        x = self.embeddings(src, feats=src_feats).transpose(0, 1)  # [B x S x H]
        lengths = to_device(lengths, x.device)  # given on the host or the device
        real = length_mask(lengths, src.size(0))  # [B x S]
        mask = additive_mask(real[:, None, None, :], x.dtype)  # once for every layer
        for layer in self.layers:
            x = layer(x, mask)
        memory_bank = self.norm(x).masked_fill(~real.unsqueeze(2), 0).transpose(0, 1)
        final = None
        if self.final_layers is not None:
            n_states, num_layers = self.final_layers
            final = mean_final_state(memory_bank, lengths, num_layers, n_states)
        return final, memory_bank, lengths


class TransformerDecoderLayer(nn.Module):
    """Masked self-attention, attention over the memory bank, feed-forward; each pre-normed and
    added back. ``average``: the average attention network's gated average in self-attention's
    place (``AverageSelfAttention``), fed forward first with ``average_ffn`` (1.x's dropout there:
    the attention dropout)."""

    def __init__(
        self,
        dim,
        heads,
        ff_size,
        dropout,
        attention_dropout,
        max_relative_positions=0,
        average=False,
        average_ffn=False,
    ):
        super().__init__()
        self.self_attn_norm = nn.LayerNorm(dim, eps=LAYER_NORM_EPS)
        if average:
            ffn = FeedForward(dim, dim, attention_dropout) if average_ffn else None
            self.self_attn = AverageSelfAttention(dim, ffn)
        else:
            self.self_attn = SelfAttention(dim, heads, attention_dropout, max_relative_positions)
        self.context_norm = nn.LayerNorm(dim, eps=LAYER_NORM_EPS)
        self.context_query = nn.Linear(dim, dim)
        self.context_attn = MultiHeadAttention(dim, heads, attention_dropout)
        self.feed_forward = FeedForward(dim, ff_size, dropout)
        self.dropout = Dropout(dropout)

    def forward(
        self, x, self_mask, cache, memory_keys, memory_values, memory_mask, need_weights=False
    ):
        """``x`` ``[B x T x H]``; ``self_mask`` ``[B x 1 x T x P+T]``; ``cache`` the layer's keys
        and values, P and whether to write into them (see ``SelfAttention``);
        ``memory_keys``/``memory_values`` ``[B x h x S x d]``; ``memory_mask`` ``[B x 1 x 1 x S]``.
        Returns ``[B x T x H]``, the new cache, the context attention weights ``[B x h x T x S]``
        (or None unless ``need_weights``)."""
        attended, cache = self.self_attn(self.self_attn_norm(x), self_mask, cache)
        x = x + self.dropout(attended)
        query = self.context_attn.split(self.context_query(self.context_norm(x)))
        context, weights = self.context_attn(
            query, memory_keys, memory_values, memory_mask, need_weights
        )
        return self.feed_forward(x + self.dropout(context)), cache, weights


class TransformerDecoder(nn.Module):
    """``num_layers`` Transformer decoder layers (interface of the RNN decoders).

    ``attns["std"]`` is the top layer's attention over the memory bank, averaged over its heads;
    with ``copy_attn`` it is ``attns["copy"]`` too (1.x copies with that attention as well). Asked
    for (``need_alignment``), ``attns["align"]`` is the attention of the ``alignment`` head:
    ``[T x B x S]``, row t the attention of the output at position t, the one that predicts the next
    token.

    Args:
        num_layers, dim, heads, ff_size, dropout, attention_dropout, max_relative_positions: the
            layers'.
        embeddings: an ``Embeddings`` module of size ``dim``.
        copy_attn: return ``attns["copy"]``.
        alignment: the ``AlignmentHead`` that gives ``attns["align"]``.
        average, average_ffn: the average attention network (``TransformerDecoderLayer``); its
            layers have no relative positions.
    """

    attentional = True  # it always attends to the source (see RNNDecoderBase.attentional)

    def __init__(
        self,
        num_layers,
        dim,
        heads,
        ff_size,
        dropout,
        attention_dropout,
        embeddings,
        max_relative_positions=0,
        copy_attn=False,
        alignment=DEFAULT_ALIGNMENT,
        average=False,
        average_ffn=False,
    ):
        super().__init__()
        self.embeddings = embeddings
        self.copy_attn = copy_attn
        self.alignment = alignment
        self.average = average
        self.max_relative_positions = 0 if average else max_relative_positions
        self.layers = nn.ModuleList(
            TransformerDecoderLayer(
                dim,
                heads,
                ff_size,
                dropout,
                attention_dropout,
                self.max_relative_positions,
                average,
                average_ffn,
            )
            for _ in range(num_layers)
        )
        self.norm = nn.LayerNorm(dim, eps=LAYER_NORM_EPS)
        # every layer's keys and values of the memory bank, in one product once per source
        self.memory_projection = nn.Linear(dim, 2 * dim * num_layers)
        self.step_masks = StepMasks()  # tables, not parameters: checkpoints do not hold them

    precomputes_memory_keys = True
    memory_keys_dims = (1, 3)  # the batch and source dimensions of memory_keys's output

    def init_state(self, encoder_final, memory_bank: Tensor) -> TransformerState:
        """An empty cache for each row of ``memory_bank`` ``[S x B x H]`` (the encoder's final state
        is not used)."""
        batch = memory_bank.size(1)
        layer = self.layers[0].self_attn
        empty = memory_bank.new_zeros(2 * len(self.layers), batch, layer.heads, 0, layer.head_dim)
        return TransformerState(
            empty, torch.zeros(batch, dtype=torch.long, device=memory_bank.device)
        )

    def memory_keys(self, memory_bank: Tensor) -> Tensor:
        """Every layer's keys and values of ``memory_bank`` ``[S x B x H]``:
        ``[layers*2 x B x h x S x d]``, keys then values for each layer (each ``[B x h x S x d]``
        contiguous: no copy at each step)."""
        src_len, batch, _ = memory_bank.shape
        attention = self.layers[0].context_attn
        projected = self.memory_projection(memory_bank).view(
            src_len, batch, 2 * len(self.layers), attention.heads, attention.head_dim
        )
        return projected.permute(2, 1, 3, 0, 4).contiguous()

    def forward(
        self,
        tgt,
        memory_bank,
        state,
        memory_lengths,
        memory_keys=None,
        need_attention=True,
        need_alignment=False,
    ):
        """Decode ``tgt`` ``[T x B]`` after the ``state.cached`` positions of ``state``, over
        ``memory_bank`` ``[S x B x H]`` (None when ``memory_keys`` is given: they are all a step
        reads of it).

        Returns dec_out ``[T x B x H]``, attns (dict of ``[T x B x S]``; empty when
        ``need_attention`` is False and there is no copy attention; with ``need_alignment`` also
        ``"align"``), the new TransformerState.
        """
        need_weights = need_attention or self.copy_attn
        length = tgt.size(0)
        state = state.with_room(length)
        in_place = state.writes_in_place(length)  # else each layer gives its keys and values
        cached = state.cached
        positions = cached - state.start  # [B]: each row's position of tgt[0]
        # start >= 0, so no row's first position is past ``cached``
        x = self.embeddings(tgt, positions, max_offset=state.last_column())  # [T x B x H]
        x = x.transpose(0, 1)  # [B x T x H]
        keys = self.memory_keys(memory_bank) if memory_keys is None else memory_keys
        lengths = memory_lengths.to(x.device)
        memory_mask, self_mask, started = self._masks(
            state, length, lengths, keys.size(3), x.dtype, need_alignment
        )
        align_layer = self._alignment_layer() if need_alignment else None
        full_context = self._full_context()
        # views of each layer's keys and values: unbind's backward is one stack, not a gradient
        # of the whole of ``keys`` for each of them and their sum
        layer_keys = keys.unbind(0)
        cache = []
        attns = {}
        for i, layer in enumerate(self.layers):
            layer_cache = (state.layer(i), cached, in_place)
            layer_in = x
            top = i == len(self.layers) - 1
            aligning = i == align_layer and not full_context
            context = (layer_keys[2 * i], layer_keys[2 * i + 1], memory_mask)
            x, keys_values, weights = layer(
                x, self_mask, layer_cache, *context, need_weights=(need_weights and top) or aligning
            )
            if i == align_layer:
                align_weights = weights
                if full_context:  # the layer again, its self-attention seeing all
                    full = additive_mask(self._full_context_mask(tgt, started, cached), x.dtype)
                    _, _, align_weights = layer(
                        layer_in, full, layer_cache, *context, need_weights=True
                    )
                attns["align"] = self._alignment_of(align_weights)
            cache.append(keys_values)
        dec_out = self.norm(x).transpose(0, 1).contiguous()
        new_state = TransformerState(
            state.cache if in_place else cache, state.start, cached + length
        )
        if need_weights:
            attns["std"] = weights.mean(1).transpose(0, 1)
            if self.copy_attn:
                attns["copy"] = attns["std"]
        return dec_out, attns, new_state

    def _masks(
        self,
        state: TransformerState,
        length: int,
        lengths: Tensor,
        src_len: int,
        dtype: torch.dtype,
        need_alignment: bool,
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        """The context attention's and self-attention's masks as addends, once for every layer (a
        bool mask is converted at each call): ``[B x 1 x 1 x S]`` and ``[B x 1 x T|1 x P+T]``; and
        the self-attention's columns each row has, bool ``[B x 1 x 1 x P+T]`` (None for a
        search's step, whose masks come from tables: not in a graph, not for the alignment)."""
        if length == 1 and not (state.fixed or need_alignment or torch.is_grad_enabled()):
            memory_mask = self.step_masks.below(lengths, src_len, dtype)
            self_mask = self.step_masks.from_start(state.start, state.cached + 1, dtype)
            return memory_mask, self._self_attention_input(self_mask), None
        real = length_mask(lengths, src_len)  # [B x S]
        memory_mask = additive_mask(real[:, None, None, :], dtype)
        started, self_mask = state.self_masks(length)
        return memory_mask, self._self_attention_input(additive_mask(self_mask, dtype)), started

    def _self_attention_input(self, mask: Tensor) -> Tensor:
        """What every layer's self-attention takes of the additive ``mask``: the mask itself, or,
        for the average attention network, the positions each new one averages
        (``average_counts``), counted once for all the layers."""
        return average_counts(mask) if self.average else mask

    def _full_context(self) -> bool:
        """Whether the alignment layer runs again with every target position in view
        (-full_context_alignment): 1.x's average never read that mask, so for an average the
        plain pass is the full-context one."""
        return self.alignment.full_context and not self.average

    def _alignment_layer(self) -> int:
        """The index of the alignment head's layer; a ValueError if the decoder lacks the head."""
        problem = self.alignment.problem(len(self.layers), self.layers[0].context_attn.heads)
        if problem:
            raise ValueError(problem)
        return self.alignment.layer % len(self.layers)

    @staticmethod
    def _full_context_mask(tgt: Tensor, started: Tensor, cached: int) -> Tensor:
        """The self-attention mask ``[B x 1 x 1 x P+T]`` of the full-context alignment pass: every
        cached and new position of each row, but not padding (``tgt`` ``[T x B]``)."""
        real = torch.cat(
            [tgt.new_ones(tgt.size(1), cached, dtype=torch.bool), (tgt != PAD_ID).t()], 1
        )
        return started & real[:, None, None, :]

    def _alignment_of(self, weights: Tensor) -> Tensor:
        """The alignment ``[T x B x S]`` of a layer's context attention ``[B x h x T x S]``: its
        first ``alignment.heads`` heads (0: all) averaged."""
        heads = self.alignment.heads or weights.size(1)
        return weights[:, :heads].mean(1).transpose(0, 1)
