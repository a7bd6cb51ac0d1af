"""The copy loss's compute, ``CopyGeneratorLossCompute``: the loss of a copy-attention model (its
generator's mixture of the vocabulary and the source words), with coverage and alignment losses.

See the package's doc (``onmt_lite.loss``) for the API that subclasses implement.
"""

from __future__ import annotations

import torch

from onmt_lite.loss.compute import (
    LossComputeBase,
    coverage_loss,
    coverage_state,
    training_lambda_align,
    training_smoothing,
)
from onmt_lite.loss.criteria import CopyGeneratorLoss
from onmt_lite.models.copy_generator import collapsed_argmax


class CopyGeneratorLossCompute(LossComputeBase):
    """The copy loss (see ``CopyGeneratorLoss``) plus ``lambda_coverage`` times the coverage loss of
    each target token. With ``normalize_by_length`` each sentence's loss is divided by its
    length."""

    def __init__(
        self,
        criterion,
        generator,
        vocab_size,
        normalize_by_length=False,
        lambda_coverage=0.0,
        lambda_align=0.0,
    ):
        super().__init__(criterion, generator)
        self.vocab_size = vocab_size
        self.normalize_by_length = normalize_by_length
        self.lambda_coverage = lambda_coverage
        self.lambda_align = lambda_align

    @classmethod
    def from_options(cls, model, tgt_vocab, opt, train=True):
        criterion = CopyGeneratorLoss(
            len(tgt_vocab), opt.copy_attn_force, training_smoothing(opt, train)
        )
        return cls(
            criterion,
            model.generator,
            len(tgt_vocab),
            opt.copy_loss_by_seqlength,
            opt.lambda_coverage,
            training_lambda_align(opt, train),
        )

    def _make_shard_state(self, batch, output, range_, attns=None):
        if batch.alignment is None:
            raise ValueError(
                "copy attention needs batches with alignment (preprocess with -dynamic_dict)"
            )
        return {
            "output": output,
            "target": self._target(batch, range_),
            "copy_attn": attns["copy"],
            "target_host": self._host_target(batch, range_),
            "align": batch.alignment[range_[0] + 1 : range_[1] + 1],
            **coverage_state(attns, self.lambda_coverage),
            **self._alignment_state(batch, attns, range_),
        }

    def _compute_loss(
        self,
        batch,
        output,
        target,
        copy_attn,
        align,
        target_host=None,
        std_attn=None,
        coverage_attn=None,
        align_head=None,
        align_ref=None,
    ):
        n_pos, n_batch = target.shape
        # the generator runs on real target words only
        rows = self._target_rows(target, target_host)
        example = rows % n_batch  # rows are time-major: row t * B + b is example b
        log_probs = self.generator(
            output.reshape(n_pos * n_batch, -1),
            copy_attn.reshape(n_pos * n_batch, -1),
            batch.src_map,
            rows,
        )
        gold = target.reshape(-1)[rows]
        gold_align = align.reshape(-1)[rows]
        loss, nll = self.criterion(log_probs, gold_align, gold)
        if std_attn is not None:
            loss = (
                loss
                + self.lambda_coverage
                * coverage_loss(std_attn, coverage_attn, target != self.padding_idx).reshape(-1)[
                    rows
                ]
            )
        stats = self._copy_stats(
            nll, log_probs.detach(), gold, gold_align, batch.src_ex_tgt_ids[example]
        )
        if self.normalize_by_length:
            lengths = (batch.tgt[1:] != self.padding_idx).sum(0).to(loss.dtype)  # whole sentences
            loss = loss / lengths[example]
        return loss.sum() + self._alignment_loss(align_head, align_ref), stats

    def _copy_stats(self, nll, log_probs, gold, gold_align, ex_ids):
        """Accuracy on the collapsed distribution, a copied unknown word counting as its copy entry.
        ``ex_ids`` ``[N x n]``: the target-vocabulary id of each source word of each row's
        example."""
        pred = collapsed_argmax(log_probs, ex_ids, self.vocab_size)
        copied_unk = (gold == self.criterion.unk_idx) & (gold_align != self.criterion.unk_idx)
        extended_gold = torch.where(copied_unk, gold_align + self.vocab_size, gold)
        return self._stats(nll.sum(), pred, extended_gold)
