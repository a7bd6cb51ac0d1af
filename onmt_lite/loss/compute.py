"""The loss computes: truncation windows, normalisation, and the NLL and sparsemax losses (the
copy loss's is ``loss/copy_compute.py``; ``shards`` in ``loss/sharding.py`` cuts their state into
shards; ``loss/build.py`` picks one).

See the package's doc (``onmt_lite.loss``) for the API that subclasses implement.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
from torch import Tensor

from onmt_lite.data.alignment import reference_alignment
from onmt_lite.data.batch import Batch
from onmt_lite.data.vocab import PAD_ID, Vocab
from onmt_lite.loss.sharding import shards
from onmt_lite.loss.criteria import NMTCriterion, SparsemaxCriterion
from onmt_lite.loss.statistics import Statistics
from onmt_lite.models.copy_generator import NMTGenerator
from onmt_lite.utils.errors import UserError
from onmt_lite.utils.stock import is_stock
from onmt_lite.utils.tensors import to_device
from onmt_lite.utils.topk import row_argmax


def training_smoothing(opt, train):
    """Label smoothing applies to training only; validation reports the plain NLL."""
    return opt.label_smoothing if train else 0.0


def training_lambda_align(opt, train):
    """The alignment loss applies to training only (validation reports the NLL's statistics
    alone)."""
    return opt.lambda_align if train else 0.0


def _refuse_sparsemax(cls, opt):
    """A -generator_function sparsemax model's loss must take the raw scores
    (``SparsemaxLossCompute``)."""
    if getattr(opt, "generator_function", "softmax") == "sparsemax" and not issubclass(
        cls, SparsemaxLossCompute
    ):
        raise UserError(
            f"-loss_class {cls.__name__}: a -generator_function sparsemax model needs a loss built "
            "on SparsemaxLossCompute (its generator's log-probabilities are -inf outside the "
            "support)"
        )


def coverage_loss(std_attn, coverage, target_mask):
    """``sum_s min(attn, coverage)`` per target position ``[T x B]``, 0 where ``target_mask`` is
    False.

    ``coverage`` is the attention summed over the earlier steps only (See et al. 2017), so the loss
    is not a constant and has a gradient.
    """
    return torch.min(std_attn, coverage).sum(2) * target_mask


def alignment_loss(align_head: Tensor, align_ref: Tensor) -> Tensor:
    """Garg et al. (2019)'s alignment loss as OpenNMT-py 1.x computes it: ``-sum(ref * log(max(head,
    1e-18)))`` over ``[T x B x S]`` (in float32: 1e-18 is 0 in float16). Padded source positions
    have attention 0 and reference 0, so the floor adds nothing there."""
    return -(align_ref * align_head.float().clamp(min=1e-18).log()).sum()


class LossComputeBase(nn.Module):
    """Base of the loss computations: range cutting, sharding, normalisation (see the module doc).

    Args:
        criterion: a module mapping scores and targets to per-token losses.
        generator: the module mapping decoder outputs to log-probabilities.
    """

    lambda_align = (
        0.0  # the weight of the alignment loss (-lambda_align); 0: none, no alignment computed
    )

    def __init__(self, criterion: nn.Module, generator: nn.Module):
        super().__init__()
        self.criterion = criterion
        self.generator = generator

    @property
    def needs_alignment(self) -> bool:
        """Whether the loss reads ``attns["align"]`` (the trainer then asks the decoder for it)."""
        return self.lambda_align > 0

    @classmethod
    def add_options(cls, parser: argparse.ArgumentParser) -> None:
        """Declare the class's own options: add an argument group to ``parser`` (none by default).
        ``onmt_lite_train -loss_class`` parses and checks them with its own, shows them with
        ``-h``, saves them in checkpoints and restores them on ``-train_from``; ``from_options``
        reads them from ``opt`` (see ``loss/options.py``)."""

    @classmethod
    def from_options(
        cls, model: nn.Module, tgt_vocab: Vocab, opt: argparse.Namespace, train: bool = True
    ) -> LossComputeBase:
        """The loss compute for ``model`` and the training options ``opt``: by default
        ``cls(NMTCriterion(label smoothing if train else 0), model.generator)``. Override it when
        ``__init__`` takes other arguments (a copy model's generator needs a copy-aware loss)."""
        if opt.copy_attn:
            raise UserError(
                f"-loss_class {cls.__name__}: a copy-attention model needs a loss built on "
                f"CopyGeneratorLossCompute (or a from_options that builds one)"
            )
        _refuse_sparsemax(cls, opt)
        return cls(NMTCriterion(training_smoothing(opt, train)), model.generator)

    @property
    def padding_idx(self):
        return PAD_ID

    def _make_shard_state(
        self,
        batch: Batch,
        output: Tensor,
        range_: tuple[int, int],
        attns: dict[str, Tensor] | None = None,
    ) -> dict[str, Tensor | None]:
        """The tensors of the loss for prediction positions ``range_``, each
        ``[end - start x ...]``."""
        raise NotImplementedError

    def _compute_loss(self, batch: Batch, **shard: Tensor) -> tuple[Tensor, Statistics]:
        """``(summed loss, Statistics)`` of one shard of ``_make_shard_state``'s dict."""
        raise NotImplementedError

    def forward(
        self,
        batch: Batch,
        output: Tensor,
        attns: dict[str, Tensor],
        normalization: float | Tensor = 1.0,
        shard_size: int = 0,
        trunc_start: int = 0,
        trunc_size: int | None = None,
    ) -> tuple[Tensor | None, Statistics]:
        """Loss of ``output`` (prediction positions ``trunc_start ..``) against ``batch.tgt``.

        ``normalization``: a number, or a 0-dim tensor on the device (fp16's, divided by the loss
        scale). Returns ``(loss / normalization, Statistics)``, or ``(None, Statistics)`` when
        ``shard_size`` is positive (the backward pass has then been run).
        """
        if trunc_size is None:
            trunc_size = batch.tgt.size(0) - 1 - trunc_start
        if output.size(0) != trunc_size:
            raise ValueError(f"output has {output.size(0)} positions, the range has {trunc_size}")
        state = self._make_shard_state(
            batch, output, (trunc_start, trunc_start + trunc_size), attns
        )
        if shard_size == 0:
            loss, stats = self._compute_loss(batch, **state)
            return loss / normalization, stats
        total = Statistics()
        device_type = output.device.type
        # -model_dtype: losses under autocast, backward not
        autocast = torch.is_autocast_enabled(device_type)
        dtype = torch.get_autocast_dtype(device_type)
        # the gathered backward runs after the last shard
        with torch.autocast(device_type, enabled=False):
            for shard in shards(state, shard_size):
                with torch.autocast(device_type, dtype=dtype, enabled=autocast):
                    loss, stats = self._compute_loss(batch, **shard)
                (loss / normalization).backward()
                total.update(stats)
        return None, total

    def _alignment_state(
        self, batch: Batch, attns: dict[str, Tensor], range_: tuple[int, int]
    ) -> dict[str, Tensor]:
        """With ``lambda_align``: ``align_head``, the decoder's alignment ``[end - start x B x S]``,
        and ``align_ref``, the reference alignment of the same positions: the output at position t
        predicts target token t (``batch.tgt[t + 1]``) and is aligned as that token is."""
        if not self.needs_alignment:
            return {}
        if batch.align is None:
            raise ValueError(
                "-lambda_align needs batches with alignments (preprocess with -train_align)"
            )
        if "align" not in attns:
            raise ValueError(
                "-lambda_align needs the decoder's alignment (decode with need_alignment=True)"
            )
        ref = reference_alignment(
            batch.align, batch.tgt.size(0) - 1, batch.batch_size, batch.src.size(0)
        )
        return {"align_head": attns["align"], "align_ref": ref[range_[0] : range_[1]]}

    def _alignment_loss(
        self, align_head: Tensor | None, align_ref: Tensor | None
    ) -> Tensor | float:
        """``lambda_align`` times the alignment loss of one shard (0 without alignment)."""
        return (
            0.0 if align_head is None else self.lambda_align * alignment_loss(align_head, align_ref)
        )

    def _target(self, batch: Batch, range_: tuple[int, int]) -> Tensor:
        """The target words predicted at positions ``range_``: ``[end - start x B]``."""
        return batch.tgt[range_[0] + 1 : range_[1] + 1]

    def _host_target(self, batch: Batch, range_: tuple[int, int]) -> Tensor | None:
        """``_target`` from the batch's host copy of its targets (``batch.tgt_cpu``), or None for a
        batch without one: where the real words are is then known without reading the device."""
        host = getattr(batch, "tgt_cpu", None)
        return None if host is None else host[range_[0] + 1 : range_[1] + 1]

    def _target_rows(self, target: Tensor, target_host: Tensor | None = None) -> Tensor:
        """``[M]`` indices of the non-padding entries of ``target`` ``[T x B]`` flattened
        time-major, on its device. Found from ``target_host``, the same words on the host, when
        given: a ``nonzero`` of a device tensor is a host sync (it must read how many there
        are)."""
        if target_host is None:
            return (target.reshape(-1) != self.padding_idx).nonzero().squeeze(1)
        rows = (target_host.reshape(-1) != self.padding_idx).nonzero().squeeze(1)  # on the host
        return to_device(rows, target.device)

    def _stats(self, nll_sum: Tensor, pred: Tensor, target: Tensor) -> Statistics:
        """Statistics of one shard: ``pred`` and ``target`` are ``[N]`` word ids."""
        non_pad = target != self.padding_idx
        correct = (pred == target) & non_pad
        return Statistics.on_device(nll_sum, non_pad.sum(), correct.sum())  # read at reports


def coverage_state(attns, lambda_coverage):
    if lambda_coverage == 0:
        return {}
    if "coverage" not in attns:
        raise ValueError("-lambda_coverage needs a model trained with -coverage_attn")
    return {"std_attn": attns["std"], "coverage_attn": attns["coverage"]}


class NMTLossCompute(LossComputeBase):
    """Negative log-likelihood (or label-smoothed) of the target, plus ``lambda_coverage`` times the
    coverage loss of each target token and ``lambda_align`` times the alignment loss. The statistics
    (xent, ppl) are those of the NLL alone."""

    def __init__(self, criterion, generator, lambda_coverage=0.0, lambda_align=0.0):
        super().__init__(criterion, generator)
        self.lambda_coverage = lambda_coverage
        self.lambda_align = lambda_align

    @classmethod
    def from_options(cls, model, tgt_vocab, opt, train=True):
        _refuse_sparsemax(cls, opt)
        return cls(
            NMTCriterion(training_smoothing(opt, train)),
            model.generator,
            opt.lambda_coverage,
            training_lambda_align(opt, train),
        )

    def _make_shard_state(self, batch, output, range_, attns=None):
        return {
            "output": output,
            "target": self._target(batch, range_),
            "target_host": self._host_target(batch, range_),
            **coverage_state(attns, self.lambda_coverage),
            **self._alignment_state(batch, attns, range_),
        }

    def _compute_loss(
        self,
        batch,
        output,
        target,
        target_host=None,
        std_attn=None,
        coverage_attn=None,
        align_head=None,
        align_ref=None,
    ):
        # the generator runs on real target words only
        rows = self._target_rows(target, target_host)
        gold = target.reshape(-1)[rows]
        loss, nll, best = self._generator_loss(output.reshape(-1, output.size(2))[rows], gold)
        if std_attn is not None:
            loss = (
                loss
                + self.lambda_coverage
                * coverage_loss(std_attn, coverage_attn, target != self.padding_idx)
                .reshape(-1)[rows]
                .sum()
            )
        return loss + self._alignment_loss(align_head, align_ref), self._stats(
            nll.sum(), best, gold
        )

    def _generator_loss(self, hidden, gold):
        """(summed loss, nll ``[N]``, best word ``[N]``) of ``hidden`` ``[N x H]`` against ``gold``
        ``[N]``. Training with the plain generator and criterion fuses the projection, log-softmax
        and loss a chunk of rows at a time (``LinearLogSoftmaxNLL``: no ``[N x V]`` matrix)."""
        # the fused form computes the stock forwards: an edited one (patched, overridden) trains
        fused = is_stock(self.generator, NMTGenerator) and is_stock(self.criterion, NMTCriterion)
        if torch.is_grad_enabled() and fused:
            return self.criterion.from_hidden(hidden, self.generator[0], gold)
        log_probs = self.generator(hidden)
        loss, nll = self.criterion(log_probs, gold)
        return loss.sum(), nll, row_argmax(log_probs.detach())


class SparsemaxLossCompute(NMTLossCompute):
    """The sparsemax loss (1.x's SparsemaxLoss) of a ``SparsemaxGenerator``'s raw scores, plus
    ``lambda_coverage`` times the coverage loss; its summed value is what the statistics report as
    the loss (their perplexity is then ``exp`` of the mean sparsemax loss, not a perplexity). No
    label smoothing: 1.x smoothed ``log(sparsemax)``, which is ``-inf`` outside the support."""

    @classmethod
    def from_options(cls, model, tgt_vocab, opt, train=True):
        if opt.label_smoothing > 0:
            raise UserError(
                f"-label_smoothing {opt.label_smoothing} cannot be used with -generator_function "
                "sparsemax: the sparsemax loss has no smoothed form (the log-probabilities outside "
                "the support are -inf)"
            )
        return cls(
            SparsemaxCriterion(),
            model.generator,
            opt.lambda_coverage,
            training_lambda_align(opt, train),
        )

    def _generator_loss(self, hidden, gold):
        scores = self.generator.scores(hidden)
        loss, reported = self.criterion(scores, gold)
        return loss.sum(), reported, row_argmax(scores.detach())
