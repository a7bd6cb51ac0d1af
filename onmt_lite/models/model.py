"""NMTModel: encoder + decoder (the generator is called by the loss, shard by shard)."""

from __future__ import annotations

import torch.nn as nn
from torch import Tensor

from onmt_lite.models.rnn_state import DecoderState


class NMTModel(nn.Module):
    """An encoder-decoder model.

    ``forward`` runs the whole target; ``encode`` and ``decode`` expose the steps with an explicit
    DecoderState, for truncated BPTT (decode window by window, ``state.detach()`` between) and for
    translation (decode one position at a time).
    """

    def __init__(self, encoder, decoder, generator):
        super().__init__()
        self.encoder = encoder
        self.decoder = decoder
        self.generator = generator

    def encode(
        self, src: Tensor, lengths: Tensor, src_feats: Tensor | None = None
    ) -> tuple[Tensor, Tensor, DecoderState]:
        """``src`` ``[S x B]`` (with word features: their ids ``src_feats`` ``[S x B x n_feats]``)
        -> memory_bank ``[S x B x H]``, lengths ``[B]`` (on ``src``'s device), the first
        DecoderState. ``lengths`` may be on the host (a batch's ``src_lengths_cpu``): an RNN encoder
        packs with them there, where device lengths cost a host sync."""
        if src_feats is None:  # an encoder may take no features (a test's stand-in)
            final, memory_bank, lengths = self.encoder(src, lengths)
        else:
            final, memory_bank, lengths = self.encoder(src, lengths, src_feats)
        return memory_bank, lengths, self.decoder.init_state(final, memory_bank)

    def decode(
        self,
        tgt: Tensor,
        memory_bank: Tensor,
        lengths: Tensor,
        state: DecoderState,
        memory_keys: Tensor | None = None,
        need_attention: bool = True,
        need_alignment: bool = False,
    ) -> tuple[Tensor, dict[str, Tensor], DecoderState]:
        """``tgt`` ``[T x B]`` inputs -> dec_out ``[T x B x H]``, attns, the next DecoderState.
        ``memory_keys``: ``decoder.memory_keys(memory_bank)``, when decoding position by position.
        ``need_attention=False``: the caller reads no attention, so a decoder may leave it out (the
        Transformer's then runs its top layer on the fused kernel too; copy attention is always
        returned). ``need_alignment``: also ``attns["align"]``, the alignment head's attention
        (Transformer decoders only, see ``TransformerDecoder``)."""
        # only a Transformer decoder takes it: the commands refuse alignment with others
        if need_alignment:
            return self.decoder(
                tgt,
                memory_bank,
                state,
                lengths,
                memory_keys,
                need_attention=need_attention,
                need_alignment=True,
            )
        return self.decoder(
            tgt, memory_bank, state, lengths, memory_keys, need_attention=need_attention
        )

    def forward(
        self, src: Tensor, tgt: Tensor, lengths: Tensor, src_feats: Tensor | None = None
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """Teacher-forced pass: ``tgt`` ``[T x B]`` is ``<s> .. </s>``; returns dec_out
        ``[T-1 x B x H]`` (position t predicts ``tgt[t+1]``) and attns (``[T-1 x B x S]`` each)."""
        memory_bank, lengths, state = self.encode(src, lengths, src_feats)
        dec_out, attns, _ = self.decode(tgt[:-1], memory_bank, lengths, state)
        return dec_out, attns
