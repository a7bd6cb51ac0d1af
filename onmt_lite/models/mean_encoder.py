"""The mean encoder (OpenNMT-py 1.x's ``-encoder_type mean``): no recurrence; the memory bank is the
source embeddings and the decoder starts from their mean."""

import torch.nn as nn

from onmt_lite.models.attention import length_mask
from onmt_lite.models.rnn_encoder import Bridge
from onmt_lite.utils.tensors import to_device


def mean_final_state(memory_bank, lengths, num_layers, n_states):
    """The mean of ``memory_bank`` ``[S x B x H]`` over each example's real positions (zeros past
    each length, as encoders give), as ``n_states`` states ``[num_layers x B x H]`` of a decoder to
    start from."""
    mean = memory_bank.sum(0) / lengths.to(memory_bank.device, memory_bank.dtype).unsqueeze(1)
    return (mean.unsqueeze(0).expand(num_layers, -1, -1).contiguous(),) * n_states


class MeanEncoder(nn.Module):
    """Encode a padded source batch as its embeddings, with the same interface as ``RNNEncoder``.

    The final state of each of ``num_layers`` layers is the mean of the example's source embeddings
    over its real (unpadded) positions; an LSTM decoder gets it as both ``h`` and ``c`` (as in 1.x),
    a GRU decoder as ``h``. The memory bank is the embeddings (zeros past each length), so its size
    is the word vector size: the builder checks that it equals the decoder's hidden size.

    Args:
        rnn_type: the decoder's cell, "LSTM" (two states) or "GRU" (one).
        num_layers: layers of the final state (-enc_layers).
        embeddings: an ``Embeddings`` module.
        bridge_layers: decoder layers for a learned bridge, or None for no bridge.
    """

    def __init__(self, rnn_type, num_layers, embeddings, bridge_layers=None):
        super().__init__()
        self.embeddings = embeddings
        self.num_layers = num_layers
        self.n_states = 2 if rnn_type == "LSTM" else 1
        dim = embeddings.embedding_size
        self.bridge = (
            Bridge(self.n_states, num_layers, bridge_layers, dim) if bridge_layers else None
        )

    def forward(self, src, lengths, src_feats=None):
        """Encode ``src`` ``[S x B]`` with ``lengths`` ``[B]`` (and, for embeddings with word
        features, their ids ``src_feats`` ``[S x B x n_feats]``).

        Returns:
            final: tuple of ``[layers x B x dim]`` states (``(mean, mean)`` for LSTM, ``(mean,)``
                for GRU),
            memory_bank: ``[S x B x dim]`` (the embeddings, zeros past each length),
            lengths: ``[B]``.
        """
        emb = self.embeddings(src, feats=src_feats)
        lengths = to_device(lengths, emb.device)  # given on the host or the device
        mask = length_mask(lengths, src.size(0)).t().unsqueeze(2).to(emb.dtype)  # [S x B x 1]
        memory_bank = emb * mask
        final = mean_final_state(memory_bank, lengths, self.num_layers, self.n_states)
        if self.bridge is not None:
            final = self.bridge(final)
        return final, memory_bank, lengths
