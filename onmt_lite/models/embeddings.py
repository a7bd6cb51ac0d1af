"""Word embeddings with padding, dropout, sinusoidal position encoding, pretrained vectors and freezing."""
import math

import torch
import torch.nn as nn

from onmt_lite.data.vocab import PAD_ID
from onmt_lite.utils.errors import UserError
from onmt_lite.utils.files import load_tensors


def sinusoids(positions, dim):
    """Position encodings (Vaswani et al. 2017) of ``positions`` ``[...]`` (any shape): ``[... x dim]``,
    ``sin(p / 10000^(i/dim))`` at even columns i and ``cos`` of the same angle at the odd column after."""
    rates = torch.exp(torch.arange(0, dim, 2, device=positions.device) * (-math.log(10000.0) / dim))
    angles = positions.unsqueeze(-1).float() * rates
    return torch.stack([angles.sin(), angles.cos()], -1).flatten(-2)


class Embeddings(nn.Module):
    """``[len x batch]`` word ids -> ``[len x batch x dim]`` vectors (dropout applied).

    With ``position_encoding`` (the Transformer's), the vectors are scaled by ``sqrt(dim)`` and each
    position's ``sinusoids`` added before the dropout.
    """

    def __init__(self, vocab_size, dim, dropout=0.0, padding_idx=PAD_ID, position_encoding=False):
        super().__init__()
        if position_encoding and dim % 2:
            raise ValueError(f"position encoding needs an even word vector size (got {dim})")
        self.word_vec_size, self.position_encoding = dim, position_encoding
        self.lut = nn.Embedding(vocab_size, dim, padding_idx=padding_idx)
        self.dropout = nn.Dropout(dropout)

    @property
    def weight(self):
        return self.lut.weight

    def forward(self, ids, offsets=None):
        """``ids`` ``[len x batch]``; ``offsets`` ``[batch]``, the position of each column's first id
        (None: 0), for the position encoding."""
        emb = self.lut(ids)
        if self.position_encoding:
            positions = torch.arange(ids.size(0), device=ids.device).unsqueeze(1)  # [len x 1]
            if offsets is not None:
                positions = positions + offsets.unsqueeze(0)
            emb = emb * math.sqrt(self.word_vec_size) + sinusoids(positions, self.word_vec_size).to(emb.dtype)
        return self.dropout(emb)

    def load_pretrained(self, path):
        """Copy a ``[vocab x d]`` tensor file (d <= dim) into the first d columns of the table."""
        vectors = load_tensors(path, "pretrained embeddings file")
        if not torch.is_tensor(vectors) or vectors.dim() != 2:
            raise UserError(f"{path}: pretrained embeddings must be a [vocab x dim] tensor")
        rows, cols = vectors.shape
        if rows != self.lut.num_embeddings or cols > self.word_vec_size:
            raise UserError(f"{path}: pretrained embeddings are {rows} x {cols}; the model needs "
                            f"{self.lut.num_embeddings} rows and at most {self.word_vec_size} columns")
        with torch.no_grad():
            self.lut.weight[:, :cols] = vectors.to(self.lut.weight.dtype)

    def freeze(self):
        self.lut.weight.requires_grad_(False)
