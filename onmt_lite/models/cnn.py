"""The convolutional sequence-to-sequence model (Gehring et al. 2017; 1.x's ``-encoder_type cnn``
and ``-decoder_type cnn``): stacks of residual gated convolutions, the decoder's causal and
attending over the source after each layer (multi-step attention).

The decoder carries the last ``k - 1`` inputs of each layer in a ``CNNState``, so decoding one
position at a time computes what the whole teacher-forced pass computes (1.x ran every step over
the whole prefix again).

Shapes: B batch, S source positions, T new target positions, H hidden size (``-rnn_size``), E
embedding size, L layers, k the kernel width (``-cnn_kernel_width``), W = k - 1. What crosses the
model's interface is time-major; inside, tensors are batch-first (``[B x N x H]``).
"""

from __future__ import annotations

import argparse
import math
from typing import Callable

import torch
import torch.nn as nn
from torch import Tensor

from onmt_lite.models.attention import length_mask, padding_mask
from onmt_lite.models.convolution import GatedConvolution
from onmt_lite.models.embeddings import Embeddings
from onmt_lite.utils.errors import UserError
from onmt_lite.utils.tensors import to_device

# a sum of two terms of equal variance scaled back to that variance (the paper's, 1.x's)
SCALE = math.sqrt(0.5)


def check_cnn_options(opt: argparse.Namespace) -> None:
    """Refuse what the convolutional model cannot do: a CNN on one side only, an even kernel in
    the encoder, and the RNN decoder's extras (copy attention, coverage, -bridge)."""
    if "cnn" not in (opt.encoder_type, opt.decoder_type):
        return
    if opt.encoder_type != opt.decoder_type:
        raise UserError(
            f"-encoder_type {opt.encoder_type} with -decoder_type {opt.decoder_type}: the CNN "
            "decoder attends over the CNN encoder's output and its embeddings, so CNNs go on "
            "both sides (-encoder_type cnn -decoder_type cnn)"
        )
    if opt.cnn_kernel_width % 2 == 0:
        raise UserError(
            f"-cnn_kernel_width {opt.cnn_kernel_width} is even: the CNN encoder keeps a source's "
            "length with width // 2 positions of zeros on each side, which needs an odd width"
        )
    extras = {
        "copy_attn": "the CNN decoder has no copy attention",
        "coverage_attn": "the CNN decoder has no coverage attention",
        "bridge": "the CNN decoder starts from no encoder state for a bridge to map",
    }
    for name in (name for name in extras if getattr(opt, name)):
        raise UserError(f"-{name}: {extras[name]} (an RNN decoder has: -decoder_type rnn)")


class CNNEncoder(nn.Module):
    """Encode a padded source batch: its embeddings projected to H, then ``num_layers`` residual
    gated convolutions (``x = (x + conv(x)) * SCALE``).

    Padded positions are zeros in every convolution's input, as the positions past the ends are,
    so that an example's output does not depend on the others in its batch (1.x convolved the
    padding's embeddings).

    Args:
        num_layers: L.
        hidden: H.
        width: k, odd.
        dropout: each convolution's input dropout.
        embeddings: an ``Embeddings`` module.
    """

    def __init__(
        self, num_layers: int, hidden: int, width: int, dropout: float, embeddings: Embeddings
    ):
        super().__init__()
        self.embeddings = embeddings
        self.linear = nn.Linear(embeddings.embedding_size, hidden)
        self.layers = nn.ModuleList(
            GatedConvolution(hidden, width, dropout, padding=width // 2) for _ in range(num_layers)
        )

    def forward(
        self, src: Tensor, lengths: Tensor, src_feats: Tensor | None = None
    ) -> tuple[None, Tensor, Tensor]:
        """Encode ``src`` ``[S x B]`` with ``lengths`` ``[B]`` (``src_feats`` ``[S x B x
        n_feats]``: word features' ids).

        Returns:
            final: None (the decoder starts from no state),
            memory_bank: ``[S x B x 2H]``, at each position the top layer's output (the decoder
                attention's keys) then its sum with the projected embedding, times SCALE (the
                values),
            lengths: ``[B]``, on the memory bank's device.
        """
        emb = self.embeddings(src, feats=src_feats)  # [S x B x E]
        lengths = to_device(lengths, emb.device)  # given on the host or the device
        projected = self.linear(emb).transpose(0, 1)  # [B x S x H]
        real = length_mask(lengths, src.size(0)).unsqueeze(2).to(projected.dtype)  # [B x S x 1]
        x = projected
        for layer in self.layers:
            x = (x + layer(x * real)) * SCALE
        values = (x + projected) * SCALE
        memory_bank = torch.cat([x, values], 2).transpose(0, 1)  # [S x B x 2H]
        return None, memory_bank, lengths


class ConvAttention(nn.Module):
    """One decoder layer's attention over the source (1.x's ``ConvMultiStepAttention``): the query
    is the layer's convolution output, projected, plus the target embedding, times SCALE; dot
    product with the keys, softmax over the real source positions, the values averaged."""

    def __init__(self, hidden: int):
        super().__init__()
        self.linear_in = nn.Linear(hidden, hidden)

    def forward(
        self, target_emb: Tensor, conv_out: Tensor, keys: Tensor, values: Tensor, padding: Tensor
    ) -> tuple[Tensor, Tensor]:
        """``target_emb``, ``conv_out`` ``[B x T x H]``; ``keys``, ``values`` ``[B x S x H]``;
        ``padding`` bool ``[B x 1 x S]`` -> context ``[B x T x H]``, weights ``[B x T x S]``."""
        query = (target_emb + self.linear_in(conv_out)) * SCALE
        scores = torch.bmm(query, keys.transpose(1, 2)).masked_fill(padding, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        return torch.bmm(weights, values), weights


class CNNState:
    """The CNN decoder's state between calls.

    Attributes:
        windows: ``[L x B x W x H]``, each layer's last W inputs (zeros before the first position:
            the causal convolution's padding).
        positions: ``[B]`` long, each row's next target position (for -position_encoding; rows
            that joined a running search later have fewer).
        decoded: a host bound of ``positions``: the positions decoded so far.
    """

    def __init__(self, windows: Tensor, positions: Tensor, decoded: int):
        self.windows = windows
        self.positions = positions
        self.decoded = decoded

    def map(self, fn: Callable[[Tensor, int], Tensor]) -> CNNState:
        """A new state with ``fn(tensor, batch_dim)`` applied to every tensor (e.g.
        index_select)."""
        return CNNState(fn(self.windows, 1), fn(self.positions, 0), self.decoded)

    def detach(self) -> CNNState:
        """The same state cut from the graph (between truncated BPTT windows)."""
        return CNNState(self.windows.detach(), self.positions, self.decoded)

    def concat(self, other: CNNState) -> CNNState:
        """The rows of ``self`` then those of ``other``."""
        return CNNState(
            torch.cat([self.windows, other.windows], 1),
            torch.cat([self.positions, other.positions]),
            max(self.decoded, other.decoded),
        )

    def compact(self, unused: int) -> CNNState:
        """The state itself: its windows have a fixed width (see ``TransformerState.compact``)."""
        return self


class CNNDecoder(nn.Module):
    """Decode with ``num_layers`` residual causal gated convolutions, each followed by its
    attention over the source: ``x = (x + (context + conv(x)) * SCALE) * SCALE``.

    Args:
        num_layers: L.
        hidden: H.
        width: k.
        dropout: each convolution's input dropout.
        embeddings: the target ``Embeddings``.
    """

    copy_attn = False
    attentional = True
    precomputes_memory_keys = True
    memory_keys_dims = (1, 2)  # the batch and source dimensions of memory_keys's output

    def __init__(
        self, num_layers: int, hidden: int, width: int, dropout: float, embeddings: Embeddings
    ):
        super().__init__()
        self.embeddings = embeddings
        self.hidden = hidden
        self.window = width - 1
        self.linear = nn.Linear(embeddings.embedding_size, hidden)
        self.layers = nn.ModuleList(
            GatedConvolution(hidden, width, dropout) for _ in range(num_layers)
        )
        self.attentions = nn.ModuleList(ConvAttention(hidden) for _ in range(num_layers))

    def init_state(self, encoder_final, memory_bank: Tensor) -> CNNState:
        """Zero windows for each row of ``memory_bank`` ``[S x B x 2H]`` (the encoder's final
        state is None)."""
        batch = memory_bank.size(1)
        windows = memory_bank.new_zeros(len(self.layers), batch, self.window, self.hidden)
        positions = torch.zeros(batch, dtype=torch.long, device=memory_bank.device)
        return CNNState(windows, positions, 0)

    def memory_keys(self, memory_bank: Tensor) -> Tensor:
        """The attention's keys and values of ``memory_bank`` ``[S x B x 2H]``:
        ``[2 x B x S x H]``, batch-first and contiguous (no copy at each step)."""
        src_len, batch, _ = memory_bank.shape
        return memory_bank.view(src_len, batch, 2, self.hidden).permute(2, 1, 0, 3).contiguous()

    def forward(
        self,
        tgt: Tensor,
        memory_bank: Tensor | None,
        state: CNNState,
        memory_lengths: Tensor,
        memory_keys: Tensor | None = None,
        need_attention: bool = True,
    ) -> tuple[Tensor, dict[str, Tensor], CNNState]:
        """Decode ``tgt`` ``[T x B]`` after the positions of ``state``, over ``memory_bank``
        ``[S x B x 2H]`` (None when ``memory_keys`` is given). ``need_attention`` changes nothing:
        every layer attends.

        Returns dec_out ``[T x B x H]``, attns ``{"std": [T x B x S]}`` (the top layer's), the
        new CNNState.
        """
        memory = self.memory_keys(memory_bank) if memory_keys is None else memory_keys
        keys, values = memory.unbind(0)  # [B x S x H] each
        length = tgt.size(0)
        emb = self.embeddings(tgt, state.positions, max_offset=state.decoded)  # [T x B x E]
        target_emb = self.linear(emb).transpose(0, 1)  # [B x T x H]
        lengths = memory_lengths.to(target_emb.device)
        padding = padding_mask(lengths, keys.size(1)).unsqueeze(1)  # [B x 1 x S]
        x = target_emb
        windows = []
        for i, (conv, attention) in enumerate(zip(self.layers, self.attentions)):
            seen = torch.cat([state.windows[i], x], 1)  # [B x W+T x H]
            windows.append(seen[:, length:])  # the last W
            conv_out = conv(seen)  # [B x T x H]
            context, weights = attention(target_emb, conv_out, keys, values, padding)
            x = (x + (context + conv_out) * SCALE) * SCALE
        new_state = CNNState(torch.stack(windows), state.positions + length, state.decoded + length)
        dec_out = x.transpose(0, 1).contiguous()  # [T x B x H]
        return dec_out, {"std": weights.transpose(0, 1)}, new_state
