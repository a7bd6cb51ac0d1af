"""Loss computation with memory-saving sharding: the package researchers subclass from.

A loss compute object is called once per batch (or per truncated-BPTT window)::

    loss, stats = loss_compute(batch, dec_out, attns, normalization, shard_size,
                               trunc_start, trunc_size)

``dec_out`` is the decoder output ``[T x B x H]`` for prediction positions ``trunc_start ..
trunc_start + T - 1`` (position t predicts ``batch.tgt[t + 1]``); ``attns`` holds ``[T x B x S]``
tensors. With ``shard_size == 0`` it returns the summed loss divided by ``normalization`` (the
caller runs ``backward``). With ``shard_size = k > 0`` it runs the generator and loss k target
positions at a time, calls ``backward`` on each piece, then backpropagates the gathered gradients
once through the decoder and encoder, and returns ``(None, stats)``: the gradients equal the
unsharded ones, and the ``[k x B x V]`` log-probabilities of only one shard are alive at a time.

To write your own loss, subclass ``LossComputeBase`` and implement two methods:

* ``_make_shard_state(batch, output, range_, attns)`` returns a dict of tensors (or None) all of
  whose first dimension is the target positions of ``range_ = (start, end)``; ``output`` and
  ``attns`` are already cut to that range, the target is ``batch.tgt[start + 1 : end + 1]``. Tensors
  that need gradients (``output``, attention) are split into shards and their gradients gathered.
* ``_compute_loss(batch, **shard)`` receives one shard of that dict (same keys) and returns
  ``(summed loss tensor, Statistics)``. Call ``self.generator`` here, not in the model.

``onmt_lite_train -loss_class MODULE:CLASS`` (or ``path/to/file.py:CLASS``) trains with such a
class; it is built by its ``from_options(model, tgt_vocab, opt, train)`` class method, which by
default passes the standard criterion (label-smoothed NLL while training) and the model's generator
to ``__init__(criterion, generator)``; its class method ``add_options(parser)`` declares options of
its own (``loss/options.py``). ``docs/research.md`` walks through writing one (a focal loss,
``examples/focal_loss.py``) and testing it; ``tests/unit/test_loss.py`` shows a token-weighted NLL.
"""

from onmt_lite.loss.build import build_loss_compute, load_loss_class
from onmt_lite.loss.copy_compute import CopyGeneratorLossCompute
from onmt_lite.loss.compute import (
    LossComputeBase,
    NMTLossCompute,
    SparsemaxLossCompute,
    coverage_loss,
)
from onmt_lite.loss.criteria import CopyGeneratorLoss, NMTCriterion, SparsemaxCriterion, smoothed
from onmt_lite.loss.sharding import filter_shard_state, shards
from onmt_lite.loss.statistics import Statistics

__all__ = [
    "CopyGeneratorLoss",
    "CopyGeneratorLossCompute",
    "LossComputeBase",
    "NMTCriterion",
    "NMTLossCompute",
    "SparsemaxCriterion",
    "SparsemaxLossCompute",
    "Statistics",
    "build_loss_compute",
    "coverage_loss",
    "filter_shard_state",
    "load_loss_class",
    "shards",
    "smoothed",
]
