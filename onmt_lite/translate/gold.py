"""Gold scores: the log-probability the models give each reference target (``-tgt``)."""

from __future__ import annotations

import torch

from onmt_lite.data.batch import Batch
from onmt_lite.data.vocab import PAD_ID
from onmt_lite.loss import CopyGeneratorLoss, NMTCriterion
from onmt_lite.translate.result import Result


def gold_scores(models: list, batch: Batch, results: list[Result], vocab_size: int) -> None:
    """Set ``gold_score`` (the log-probability of each target of ``batch``, copy-aware, averaged
    over the ensemble ``models``) and ``gold_words`` of the batch's examples' ``results``."""
    totals = torch.zeros(batch.batch_size)
    target = batch.tgt[1:]  # [T x B]
    copy = models[0].decoder.copy_attn
    for model in models:
        dec_out, attns = model(batch.src, batch.tgt, batch.src_lengths, batch.src_feats)
        rows = dec_out.size(0) * dec_out.size(1)
        if copy:
            log_probs = model.generator(
                dec_out.reshape(rows, -1), attns["copy"].reshape(rows, -1), batch.src_map
            )
            _, nll = CopyGeneratorLoss(vocab_size)(
                log_probs, batch.alignment[1:].reshape(-1), target.reshape(-1)
            )
        else:
            _, nll = NMTCriterion()(model.generator(dec_out.reshape(rows, -1)), target.reshape(-1))
        totals -= nll.view_as(target).sum(0).cpu() / len(models)
    words = (batch.tgt_cpu[1:] != PAD_ID).sum(0).tolist()  # host data: no read of the device
    lines = batch.indices_cpu.tolist()
    gold = totals.tolist()
    for b, line in enumerate(lines):
        results[line].gold_score = gold[b]
        results[line].gold_words = words[b]
