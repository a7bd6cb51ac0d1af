"""Word embeddings with padding, dropout, sinusoidal position encoding, pretrained vectors, freezing
and source word features (1.x's ``-feat_merge``, ``-feat_vec_size``, ``-feat_vec_exponent``)."""

import dataclasses
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from onmt_lite.data.vocab import PAD_ID
from onmt_lite.utils.errors import UserError
from onmt_lite.utils.files import load_tensors
from onmt_lite.utils.logging import logger


def sinusoids(positions, dim):
    """Position encodings (Vaswani et al. 2017) of ``positions`` ``[...]`` (any shape):
    ``[... x dim]``, ``sin(p / 10000^(i/dim))`` at even columns i and ``cos`` of the same angle at
    the odd column after."""
    rates = torch.exp(torch.arange(0, dim, 2, device=positions.device) * (-math.log(10000.0) / dim))
    angles = positions.unsqueeze(-1).float() * rates
    return torch.stack([angles.sin(), angles.cos()], -1).flatten(-2)


FEAT_MERGES = ("concat", "sum", "mlp")


@dataclasses.dataclass(frozen=True)
class FeatureSpec:
    """The source word features of a model: each feature's vocabulary size and how they are
    merged."""

    vocab_sizes: tuple = ()
    merge: str = "concat"
    vec_size: int = -1
    exponent: float = 0.7

    def dims(self, word_dim):
        """Each feature's embedding size (1.x's rule): the word size with ``sum``, else ``vec_size``
        when > 0, else ``int(vocab_size ** exponent)``."""
        if self.merge == "sum":
            return [word_dim] * len(self.vocab_sizes)
        if self.vec_size > 0:
            return [self.vec_size] * len(self.vocab_sizes)
        return [int(size**self.exponent) for size in self.vocab_sizes]

    def output_size(self, word_dim):
        """The merged embedding's size: the word and feature sizes together with ``concat``, the
        word size with ``sum`` and ``mlp``."""
        return word_dim + sum(self.dims(word_dim)) if self.merge == "concat" else word_dim


class Embeddings(nn.Module):
    """``[len x batch]`` word ids (and ``[len x batch x n_feats]`` feature ids) -> ``[len x batch x
    embedding_size]`` vectors (dropout applied).

    With features, each has its own table and ``features.merge`` combines them with the word's
    vector: ``concat`` ``[word; f1; f2 ..]``, ``sum`` ``word + f1 + f2 ..``, ``mlp``
    ``relu(W [word; f1; ..] + b)`` (back to the word size). With ``position_encoding`` (the
    Transformer's), the merged vectors are scaled by ``sqrt(embedding_size)`` and each position's
    ``sinusoids`` added before the dropout.
    """

    def __init__(
        self,
        vocab_size,
        dim,
        dropout=0.0,
        padding_idx=PAD_ID,
        position_encoding=False,
        features=FeatureSpec(),
    ):
        super().__init__()
        if features.merge not in FEAT_MERGES:
            raise ValueError(f"unknown feature merge {features.merge!r}")
        self.word_vec_size = dim
        self.position_encoding = position_encoding
        self.embedding_size = features.output_size(dim)
        if position_encoding and self.embedding_size % 2:
            raise ValueError(
                f"position encoding needs an even embedding size (got {self.embedding_size})"
            )
        self.lut = nn.Embedding(vocab_size, dim, padding_idx=padding_idx)
        self.feat_merge = features.merge
        self.feat_luts = nn.ModuleList(
            nn.Embedding(size, feat_dim, padding_idx=padding_idx)
            for size, feat_dim in zip(features.vocab_sizes, features.dims(dim))
        )
        self.feat_mlp = None
        if features.vocab_sizes and features.merge == "mlp":
            self.feat_mlp = nn.Sequential(nn.Linear(dim + sum(features.dims(dim)), dim), nn.ReLU())
        self.dropout = nn.Dropout(dropout)
        self._encoding_table = None  # see _encodings

    @property
    def n_feats(self):
        return len(self.feat_luts)

    @property
    def weight(self):
        return self.lut.weight

    def merged(self, ids, feats):
        """The word vectors of ``ids`` ``[len x batch]`` merged with those of the feature ids
        ``feats`` ``[len x batch x n_feats]``: ``[len x batch x embedding_size]``."""
        emb = self.lut(ids)
        if not self.n_feats:
            return emb
        if feats is None or feats.size(-1) != self.n_feats:
            got = 0 if feats is None else feats.size(-1)
            raise ValueError(f"the embeddings take {self.n_feats} word feature(s), got {got}")
        feat_embs = [lut(feats[..., i]) for i, lut in enumerate(self.feat_luts)]
        if self.feat_merge == "sum":
            return emb + sum(feat_embs)
        emb = torch.cat([emb] + feat_embs, -1)
        return self.feat_mlp(emb) if self.feat_mlp is not None else emb

    def forward(self, ids, offsets=None, feats=None, max_offset: int = 0):
        """``ids`` ``[len x batch]``; ``offsets`` ``[batch]``, the position of each column's first
        id (None: 0), for the position encoding, none above ``max_offset`` (a host figure: the
        table of encodings is sized without reading ``offsets``); ``feats`` ``[len x batch x
        n_feats]``, the feature ids of a model with features."""
        emb = self.merged(ids, feats)
        if self.position_encoding:
            length = ids.size(0)
            table = self._encodings(length + max_offset, emb)  # [positions x size]
            if offsets is None:
                encodings = table[:length].unsqueeze(1)  # [len x 1 x size]
            else:
                positions = offsets.unsqueeze(0)  # [1 x batch]
                if length > 1:
                    positions = torch.arange(length, device=ids.device).unsqueeze(1) + positions
                encodings = F.embedding(positions, table)  # [len x batch x size]
            emb = emb * math.sqrt(self.embedding_size) + encodings
        return self.dropout(emb)

    def _encodings(self, count: int, like: torch.Tensor) -> torch.Tensor:
        """``sinusoids`` of the positions from 0 to at least ``count - 1`` ``[positions x size]``,
        in ``like``'s dtype and device: a table kept between calls (a decoding step would
        otherwise compute its row anew: eight kernels), made again when short or elsewhere. Not a
        buffer: checkpoints do not hold it."""
        table = self._encoding_table
        if (
            table is None
            or table.size(0) < count
            or table.device != like.device
            or table.dtype != like.dtype
        ):
            size = 1 << max(count - 1, 63).bit_length()  # a power of two: few remakes
            positions = torch.arange(size, device=like.device)
            table = sinusoids(positions, self.embedding_size).to(like.dtype)
            self._encoding_table = table
        return table

    @staticmethod
    def kept_tables(module: nn.Module) -> list[torch.Tensor]:
        """The position tables that the ``Embeddings`` in ``module`` keep between calls. A recorded
        CUDA graph reads them by address, so it must hold them: a longer input makes a table anew
        and lets the old one go (the encoder's, with -share_embeddings the decoder's too)."""
        return [
            part._encoding_table
            for part in module.modules()
            if isinstance(part, Embeddings) and part._encoding_table is not None
        ]

    def load_pretrained(self, path):
        """Copy a ``[vocab x d]`` tensor file into the first d columns of the table; of wider
        vectors, the first ``word_vec_size`` columns (as OpenNMT-py 1.x), with a warning."""
        vectors = load_tensors(path, "pretrained embeddings file")
        if not torch.is_tensor(vectors) or vectors.dim() != 2:
            raise UserError(f"{path}: pretrained embeddings must be a [vocab x dim] tensor")
        rows, cols = vectors.shape
        if rows != self.lut.num_embeddings:
            raise UserError(
                f"{path}: pretrained embeddings are {rows} x {cols}; the model needs "
                f"{self.lut.num_embeddings} rows"
            )
        if cols > self.word_vec_size:
            logger.warning(
                f"{path}: pretrained embeddings of {cols} dimensions, the first "
                f"{self.word_vec_size} kept (the word vector size)"
            )
            vectors = vectors[:, : self.word_vec_size]
            cols = self.word_vec_size
        with torch.no_grad():
            self.lut.weight[:, :cols] = vectors.to(self.lut.weight.dtype)

    def freeze(self):
        self.lut.weight.requires_grad_(False)
