"""Context gates (Tu et al. 2017, "Context Gates for Neural Machine Translation") of the RNN
decoders.

A gate ``z = sigmoid(W [x; h; a] + b)`` of the decoder's input ``x``, the RNN output ``h`` and the
attentional output ``a`` weighs a source projection ``S a`` against a target projection
``T [x; h]`` (OpenNMT-py 1.x's formulas):

- ``source``: ``tanh(T [x; h] + z * S a)``
- ``target``: ``tanh(z * T [x; h] + S a)``
- ``both``: ``tanh((1 - z) * T [x; h] + z * S a)``

Shapes: ``[N x input]``, ``[N x H]``, ``[N x H]`` -> ``[N x H]`` (N any number of rows).
"""

import torch
import torch.nn as nn

GATE_TYPES = ("source", "target", "both")


class ContextGate(nn.Module):
    """A context gate of type ``gate_type`` for decoder inputs of ``input_size`` and hidden size
    ``hidden_size`` (of the RNN output and the attentional output alike)."""

    def __init__(self, gate_type, input_size, hidden_size):
        super().__init__()
        if gate_type not in GATE_TYPES:
            raise ValueError(f"unknown context gate {gate_type}")
        self.gate_type = gate_type
        self.gate = nn.Linear(input_size + 2 * hidden_size, hidden_size)
        self.source_proj = nn.Linear(hidden_size, hidden_size)
        self.target_proj = nn.Linear(input_size + hidden_size, hidden_size)

    def forward(self, dec_input, rnn_output, attn_output):
        """The gated output ``[N x H]`` of ``dec_input`` ``[N x input]``, ``rnn_output`` and
        ``attn_output`` ``[N x H]``."""
        z = torch.sigmoid(self.gate(torch.cat([dec_input, rnn_output, attn_output], -1)))
        source = self.source_proj(attn_output)
        target = self.target_proj(torch.cat([dec_input, rnn_output], -1))
        if self.gate_type == "source":
            return torch.tanh(target + z * source)
        if self.gate_type == "target":
            return torch.tanh(z * target + source)
        return torch.tanh((1 - z) * target + z * source)
