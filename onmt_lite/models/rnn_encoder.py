"""The RNN encoder: LSTM or GRU, stacked, optionally bidirectional, on packed sequences."""

import torch
import torch.nn as nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

from onmt_lite.models.recurrent import run_rnn
from onmt_lite.utils.tensors import to_device


def concat_directions(state, num_layers):
    """``[layers*2 x B x h]`` -> ``[layers x B x 2h]``: each layer's forward and backward states."""
    _, batch, hidden = state.shape
    return (
        state.view(num_layers, 2, batch, hidden)
        .permute(0, 2, 1, 3)
        .reshape(num_layers, batch, 2 * hidden)
    )


class Bridge(nn.Module):
    """A learned map from encoder final states to decoder initial states, one example at a time.

    Each state ``[enc_layers x B x H]`` is rearranged to ``[B x enc_layers*H]`` (never mixing
    examples), mapped by Linear + ReLU, and rearranged to ``[dec_layers x B x H]``.
    """

    def __init__(self, n_states, enc_layers, dec_layers, hidden):
        super().__init__()
        self.dec_layers = dec_layers
        self.hidden = hidden
        self.maps = nn.ModuleList(
            nn.Linear(enc_layers * hidden, dec_layers * hidden) for _ in range(n_states)
        )

    def forward(self, states):
        out = []
        for state, linear in zip(states, self.maps):
            batch = state.size(1)
            flat = state.transpose(0, 1).reshape(batch, -1)
            mapped = torch.relu(linear(flat)).view(batch, self.dec_layers, self.hidden)
            out.append(mapped.transpose(0, 1).contiguous())
        return tuple(out)


class RNNEncoder(nn.Module):
    """Encode a padded source batch.

    Args:
        rnn_type: "LSTM" or "GRU".
        bidirectional: split ``hidden_size`` over two directions and concatenate them.
        num_layers, hidden_size, dropout: of the RNN (dropout between layers).
        embeddings: an ``Embeddings`` module.
        bridge_layers: decoder layers for a learned bridge, or None for no bridge.
    """

    def __init__(
        self,
        rnn_type,
        bidirectional,
        num_layers,
        hidden_size,
        dropout,
        embeddings,
        bridge_layers=None,
    ):
        super().__init__()
        if bidirectional and hidden_size % 2:
            raise ValueError("a bidirectional encoder needs an even -rnn_size")
        self.embeddings = embeddings
        self.num_layers = num_layers
        self.bidirectional = bidirectional
        self.rnn = getattr(nn, rnn_type)(
            input_size=embeddings.embedding_size,
            hidden_size=hidden_size // (2 if bidirectional else 1),
            num_layers=num_layers,
            dropout=dropout if num_layers > 1 else 0.0,
            bidirectional=bidirectional,
        )
        n_states = 2 if rnn_type == "LSTM" else 1
        self.bridge = (
            Bridge(n_states, num_layers, bridge_layers, hidden_size) if bridge_layers else None
        )

    def forward(self, src, lengths, src_feats=None):
        """Encode ``src`` ``[S x B]`` with ``lengths`` ``[B]`` (and, for embeddings with word
        features, their ids ``src_feats`` ``[S x B x n_feats]``). ``lengths`` may be on the host (a
        batch's ``src_lengths_cpu``): packing reads them there, where device lengths cost a host
        sync.

        Returns:
            final: tuple of ``[layers x B x hidden]`` states (``(h, c)`` for LSTM, ``(h,)`` for
                GRU),
            memory_bank: ``[S x B x hidden]`` (zeros past each length),
            lengths: ``[B]`` on ``src``'s device.
        """
        emb = self.embeddings(src, feats=src_feats)
        packed = pack_padded_sequence(emb, lengths.cpu(), enforce_sorted=False)
        outputs, final = run_rnn(self.rnn, packed)  # final: in the batch's order
        # padded in the packed (longest first) order, then put back in the batch's order on the
        # device: pad_packed_sequence would read its unsorted_indices to the host for its lengths
        longest_first = PackedSequence(outputs.data, outputs.batch_sizes)
        memory_bank, _ = pad_packed_sequence(longest_first, total_length=src.size(0))
        memory_bank = memory_bank.index_select(1, outputs.unsorted_indices)  # [S x B x hidden]
        final = final if isinstance(final, tuple) else (final,)
        if self.bidirectional:
            final = tuple(concat_directions(s, self.num_layers) for s in final)
        if self.bridge is not None:
            final = self.bridge(final)
        return final, memory_bank, to_device(lengths, memory_bank.device)
