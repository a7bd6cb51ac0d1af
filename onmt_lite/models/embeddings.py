"""Word embeddings with padding, dropout, pretrained vectors and freezing."""
import torch
import torch.nn as nn

from onmt_lite.data.vocab import PAD_ID
from onmt_lite.utils.errors import UserError
from onmt_lite.utils.files import load_tensors


class Embeddings(nn.Module):
    """``[len x batch]`` word ids -> ``[len x batch x dim]`` vectors (dropout applied)."""

    def __init__(self, vocab_size, dim, dropout=0.0, padding_idx=PAD_ID):
        super().__init__()
        self.word_vec_size = dim
        self.lut = nn.Embedding(vocab_size, dim, padding_idx=padding_idx)
        self.dropout = nn.Dropout(dropout)

    @property
    def weight(self):
        return self.lut.weight

    def forward(self, ids):
        return self.dropout(self.lut(ids))

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
