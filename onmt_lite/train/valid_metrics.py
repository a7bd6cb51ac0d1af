"""BLEU and chrF of the validation set during training (greedy decoding, sacrebleu)."""

import torch

from onmt_lite.translate.validation import greedy_translations
from onmt_lite.utils.errors import UserError
from onmt_lite.utils.metrics import corpus_scores


def check_criteria(opt):
    for criterion in opt.early_stopping_criteria or []:
        if criterion in ("BLEU", "chrF") and criterion not in opt.valid_metrics:
            raise UserError(
                f"-early_stopping_criteria {criterion} needs -valid_metrics {criterion}"
            )


class MetricScorer:
    """Decodes validation batches greedily with the model being trained and scores them.

    Calling it with batches returns ``({"BLEU": .., "chrF": ..}, log text with the signatures)``.
    """

    def __init__(self, model, vocabs, preprocess, metrics, device):
        self.model = model
        self.vocabs = vocabs
        self.preprocess = preprocess
        self.metrics = metrics
        self.device = device

    def __call__(self, batches):
        self.model.eval()
        with torch.no_grad():
            hypotheses, references = greedy_translations(
                self.model, self.vocabs, self.preprocess, batches, self.device
            )
        self.model.train()
        scores = corpus_scores(self.metrics, hypotheses, [references])
        return {s.name: s.score for s in scores}, "; " + "; ".join(str(s) for s in scores)
