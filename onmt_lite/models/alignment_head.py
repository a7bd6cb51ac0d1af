"""The Transformer decoder's alignment head (guided alignment, -lambda_align): which attention it
is."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class AlignmentHead:
    """The decoder's alignment head (Garg et al. 2019): the attention over the source of layer
    ``layer`` (negative: from the last), its first ``heads`` heads averaged (0: all). With
    ``full_context`` that layer runs again on the same input without the future mask (nor padding)
    in its self-attention, and the alignment is that pass's attention (its output is not used)."""

    layer: int = -3
    heads: int = 0
    full_context: bool = False

    def problem(self, num_layers: int, num_heads: int) -> str | None:
        """Why this head does not exist in a decoder of ``num_layers`` layers of ``num_heads``
        heads, or None."""
        if not -num_layers <= self.layer < num_layers:
            return (
                f"-alignment_layer {self.layer} is not a layer of the {num_layers}-layer decoder "
                f"(from {-num_layers} to {num_layers - 1})"
            )
        if self.heads > num_heads:
            return f"-alignment_heads {self.heads} is more than the decoder's {num_heads} heads"
        return None


# 1.x's defaults: the third layer from the top, all its heads, no second pass
DEFAULT = AlignmentHead()
