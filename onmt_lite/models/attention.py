"""Global attention (Luong et al. 2015 dot/general, Bahdanau et al. 2015 mlp), masked by length.

Shapes: B batch, T query positions, S source positions, H hidden size.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

from onmt_lite.models.sparsemax import sparsemax

ATTENTION_FUNCTIONS = {"softmax": F.softmax, "sparsemax": sparsemax}


def length_mask(lengths, max_len):
    """``[batch x max_len]`` bool, True at real (not padded) positions."""
    return torch.arange(max_len, device=lengths.device).unsqueeze(0) < lengths.unsqueeze(1)


def padding_mask(lengths, max_len):
    """``[batch x max_len]`` bool, True at padded positions: ``length_mask``'s negation, made
    directly (the attention masks with it at every position)."""
    return torch.arange(max_len, device=lengths.device).unsqueeze(0) >= lengths.unsqueeze(1)


class GlobalAttention(nn.Module):
    """Attention of decoder states over the encoder's memory bank.

    Scores: ``dot`` q·m, ``general`` (W q)·m, ``mlp`` v·tanh(W_q q + W_m m [+ w_c cov]). With
    ``coverage``, the running coverage (sum of the attention of earlier steps) enters the score:
    inside the tanh for ``mlp`` (See et al. 2017), as ``w_c * cov`` added to the score for
    dot/general.
    Output: ``attn_h = tanh(W_out [context; q])`` (None with ``output_layer=False``, for an
    attention whose weights alone are used, such as copy attention). ``attn_func`` turns the scores
    into weights: ``softmax`` or ``sparsemax`` (weights of exactly 0 inside the source too). Weights
    on padded positions are exactly 0.
    """

    def __init__(
        self, dim, attn_type="general", coverage=False, output_layer=True, attn_func="softmax"
    ):
        super().__init__()
        if attn_type not in ("dot", "general", "mlp"):
            raise ValueError(f"unknown attention type {attn_type}")
        if attn_func not in ATTENTION_FUNCTIONS:
            raise ValueError(f"unknown attention function {attn_func}")
        self.attn_type = attn_type
        self.dim = dim
        self.attn_func = attn_func
        if attn_type == "general":
            self.linear_in = nn.Linear(dim, dim, bias=False)
        elif attn_type == "mlp":
            self.linear_memory = nn.Linear(dim, dim, bias=False)
            self.linear_query = nn.Linear(dim, dim, bias=True)
            self.v = nn.Linear(dim, 1, bias=False)
        self.linear_cover = (
            nn.Linear(1, dim if attn_type == "mlp" else 1, bias=False) if coverage else None
        )
        self.linear_out = nn.Linear(dim * 2, dim, bias=attn_type == "mlp") if output_layer else None

    @property
    def projects_memory(self):
        """Whether ``memory_keys`` computes something (mlp) rather than return the memory itself."""
        return self.attn_type == "mlp"

    def memory_keys(self, memory):
        """What the score needs of the memory ``[B x S x H]``, computed once per sequence."""
        return self.linear_memory(memory) if self.projects_memory else memory

    def score(self, query, keys, coverage=None):
        """Unnormalised scores ``[B x T x S]`` of ``query`` ``[B x T x H]`` against ``keys``.

        ``coverage`` is ``[B x T x S]`` (the coverage before each query step) or None.
        """
        if self.attn_type == "mlp":
            hidden = self.linear_query(query).unsqueeze(2) + keys.unsqueeze(1)  # [B x T x S x H]
            if coverage is not None:
                hidden = hidden + self.linear_cover(coverage.unsqueeze(3))
            return self.v(torch.tanh(hidden)).squeeze(3)
        if self.attn_type == "general":
            query = self.linear_in(query)
        scores = torch.bmm(query, keys.transpose(1, 2))
        if coverage is not None:
            scores = scores + self.linear_cover(coverage.unsqueeze(3)).squeeze(3)
        return scores

    def forward(self, query, memory, memory_lengths, coverage=None, keys=None, padding=None):
        """Attend.

        Args:
            query: ``[B x T x H]`` decoder states.
            memory: ``[B x S x H]`` encoder outputs.
            memory_lengths: ``[B]`` source lengths.
            coverage: ``[B x T x S]`` or None.
            keys: ``memory_keys(memory)`` if already computed.
            padding: ``padding_mask(memory_lengths, S)`` if already computed.
        Returns:
            attn_h ``[B x T x H]``, align ``[B x T x S]`` (rows sum to 1, 0 on padding).
        """
        keys = self.memory_keys(memory) if keys is None else keys
        scores = self.score(query, keys, coverage)
        if padding is None:
            padding = padding_mask(memory_lengths, memory.size(1))
        normalise = ATTENTION_FUNCTIONS[self.attn_func]
        # padding [B x 1 x S]
        align = normalise(scores.masked_fill(padding.unsqueeze(1), float("-inf")), dim=-1)
        if self.linear_out is None:
            return None, align
        context = torch.bmm(align, memory)
        attn_h = self.linear_out(torch.cat([context, query], dim=-1))
        return torch.tanh(attn_h), align
