"""The gated convolution of the convolutional sequence-to-sequence model (Gehring et al. 2017, 1.x's
``GatedConv``): ``out * sigmoid(gate)`` of a weight-normalised 1-D convolution of ``2 x H``
channels, dropout on its input.

Shapes: B batch, H channels (the hidden size), N positions in, k the kernel width; position-major
(``[B x N x H]``), as a decoder's window of past inputs is kept.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor


class GatedConvolution(nn.Module):
    """A gated linear unit over a convolution of width ``width`` from ``channels`` to
    ``2 * channels``, whose weight is weight-normalised (Salimans and Kingma 2016): each output
    channel's kernel is ``g * v / ||v||``, the norm over its input channels and positions.

    Args:
        channels: H, in and out.
        width: k, the kernel's positions.
        dropout: the probability of the dropout on the input.
        padding: positions of zeros the convolution adds on each side (``width // 2`` keeps the
            length; the decoder's causal convolution adds none and is given its past instead).

    Parameters: ``v`` ``[2H x H x k]``, ``g`` ``[2H]``, ``bias`` ``[2H]``; the first H output
    channels are the values, the last H the gates.
    """

    def __init__(self, channels: int, width: int, dropout: float, padding: int = 0):
        super().__init__()
        self.padding = padding
        self.v = nn.Parameter(torch.empty(2 * channels, channels, width))
        # the paper's initialisation for a GLU after dropout (1.x's, before -param_init)
        nn.init.xavier_uniform_(self.v, gain=math.sqrt(4 * (1 - dropout)))
        with torch.no_grad():
            self.g = nn.Parameter(self.v.flatten(1).norm(dim=1))  # the weight starts as v
        self.bias = nn.Parameter(torch.zeros(2 * channels))
        self.dropout = nn.Dropout(dropout)
        self._step_weight = None  # (the parameters' versions, the matrix): see step_weight

    def weight(self) -> Tensor:
        """The normalised kernel ``[2H x H x k]``."""
        scale = self.g / self.v.flatten(1).norm(dim=1)  # [2H]
        return self.v * scale.view(-1, 1, 1)

    def step_weight(self) -> Tensor:
        """The kernel as one matrix ``[2H x k*H]``, positions first, as a window ``[B x k x H]``
        flattens. Without gradients (decoding) it is made once while the parameters stay as they
        are: a decoding step would otherwise normalise and copy the kernel again (0.3 ms of a
        layer's 2 ms at 320 rows of 256)."""
        if torch.is_grad_enabled():
            return self.weight().transpose(1, 2).flatten(1)
        version = (self.v._version, self.g._version, self.v.data_ptr(), self.g.data_ptr())
        if self._step_weight is None or self._step_weight[0] != version:
            self._step_weight = (version, self.weight().transpose(1, 2).flatten(1))
        return self._step_weight[1]

    def forward(self, x: Tensor) -> Tensor:
        """``x`` ``[B x N x H]`` -> ``[B x N + 2 * padding - k + 1 x H]``."""
        x = self.dropout(x)
        width = self.v.size(2)
        if self.padding == 0 and x.size(1) == width:
            # one position out (a decoding step): one matrix product, which the CPU runs in half
            # the time of a convolution (320 rows of 256, width 3: 1.3 ms against 3.0 ms)
            flat = x.reshape(x.size(0), -1)  # [B x k*H]
            mixed = torch.addmm(self.bias, flat, self.step_weight().t()).unsqueeze(1)
        else:
            mixed = F.conv1d(x.transpose(1, 2), self.weight(), self.bias, padding=self.padding)
            mixed = mixed.transpose(1, 2)  # [B x N' x 2H]
        values, gates = mixed.chunk(2, dim=-1)  # [B x N' x H] each
        return values * torch.sigmoid(gates)
