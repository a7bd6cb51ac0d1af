"""``-optim sparseadam``, as OpenNMT-py 1.x trained with it: lazy Adam for the embeddings.

The word and source feature embeddings' lookup tables get sparse gradients (the rows of the step's
tokens only), and torch's ``SparseAdam`` updates those rows alone: their weights and moments move,
the other rows' moments do not decay. Every other parameter trains with Adam. Both take
``-adam_beta1/2`` and an epsilon of 1e-8, as in 1.x (whose ``-optim adam`` had 1e-9).

A step sums each table's sparse gradient over its tokens once (``coalesce``): its norm, clipping and
the update then see each row once. Refused where a table's gradient would not be sparse or could
not be summed: ``-share_decoder_embeddings`` (the generator's dense gradient reaches the decoder's
table; 1.x's SparseAdam failed on it), several processes, ``-cuda_graphs``.
"""

import os

import torch
from torch import nn

from onmt_lite.models.embeddings import Embeddings
from onmt_lite.train.distributed import launched_by_torchrun
from onmt_lite.utils.errors import UserError

EPSILON = 1e-8


def lookup_tables(model: nn.Module) -> list[nn.Embedding]:
    """The word and source feature lookup tables of ``model``'s embeddings (each once)."""
    tables = {}
    for embeddings in model.modules():
        if isinstance(embeddings, Embeddings):
            for table in (embeddings.lut, *embeddings.feat_luts):
                tables[id(table)] = table
    return list(tables.values())


def set_sparse_gradients(model: nn.Module, sparse: bool) -> list[nn.Embedding]:
    """Let the backward pass give ``model``'s lookup tables sparse gradients (or dense ones);
    returns the tables."""
    tables = lookup_tables(model)
    for table in tables:
        table.sparse = sparse
    return tables


def check_options(opt) -> None:
    """-optim sparseadam's refusals."""
    if opt.optim != "sparseadam":
        return
    processes = int(os.environ["WORLD_SIZE"]) if launched_by_torchrun() else opt.world_size
    if opt.share_decoder_embeddings:
        raise UserError(
            "-optim sparseadam: -share_decoder_embeddings gives the decoder's embeddings the "
            "generator's dense gradient (1.x's SparseAdam failed on it); use -optim adam"
        )
    if processes > 1:
        raise UserError(
            "-optim sparseadam trains in one process: sparse gradients are not summed across "
            "processes"
        )


def sparse_adam(param_groups: list[dict], sparse: set[int], betas) -> list[torch.optim.Optimizer]:
    """Adam for the parameters of ``param_groups`` not in ``sparse`` (ids), torch's SparseAdam for
    those in it; groups left empty are dropped, and an optimizer left without any."""
    optimizers = []
    for optimizer_class, selected, extra in (
        (torch.optim.Adam, False, {"fused": True}),
        (torch.optim.SparseAdam, True, {}),
    ):
        groups = [
            {**group, "params": [p for p in group["params"] if (id(p) in sparse) == selected]}
            for group in param_groups
        ]
        groups = [group for group in groups if group["params"]]
        if groups:
            optimizers.append(optimizer_class(groups, betas=betas, eps=EPSILON, **extra))
    return optimizers
