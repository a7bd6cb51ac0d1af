"""BLEU and chrF of the validation set during training (greedy decoding, sacrebleu)."""
import torch

from onmt_lite.translate.search import SearchOptions
from onmt_lite.translate.translator import Translator
from onmt_lite.utils.errors import UserError


def check_criteria(opt):
    for criterion in opt.early_stopping_criteria or []:
        if criterion in ("BLEU", "chrF") and criterion not in opt.valid_metrics:
            raise UserError(f"-early_stopping_criteria {criterion} needs -valid_metrics {criterion}")


class MetricScorer:
    """Decodes validation batches greedily with the model being trained and scores them.

    Calling it with batches returns ``({"BLEU": .., "chrF": ..}, log text with the signatures)``.
    """

    def __init__(self, model, vocabs, preprocess, metrics, device):
        self.translator = Translator([model], vocabs, preprocess, SearchOptions(beam_size=1), device=device)
        self.model, self.metrics, self.device = model, metrics, device

    def __call__(self, batches):
        from sacrebleu.metrics import BLEU, CHRF

        hypotheses, references = [], []
        self.model.eval()
        with torch.no_grad():
            for batch in batches:
                if batch.tgt_tokens is None:
                    raise UserError("-valid_metrics: the validation shards hold no reference words "
                                    "(preprocess the data again with this version)")
                for b, nbest in enumerate(self.translator.decode_batch(batch.to(self.device))):
                    hypotheses.append(self.translator.detokenize(nbest[0][0]))
                    references.append(self.translator.detokenize(batch.tgt_tokens[b]))
        self.model.train()
        scores, text = {}, []
        for name in self.metrics:
            metric = BLEU() if name == "BLEU" else CHRF()
            result = metric.corpus_score(hypotheses, [references])
            scores[name] = result.score
            text.append(f"{result} ({metric.get_signature()})")
        return scores, "; " + "; ".join(text)
