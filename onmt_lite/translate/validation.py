"""The one door from training into translation: greedy translations of validation batches."""

from onmt_lite.translate.search import SearchOptions
from onmt_lite.translate.translator import Translator
from onmt_lite.utils.errors import UserError


def greedy_translations(model, vocabs: dict, preprocess: dict, batches, device) -> tuple:
    """``(hypotheses, references)``: each example of ``batches`` decoded greedily with ``model`` (in
    the mode the caller set) and its reference words, both as text, detokenized as the translator
    writes its output. The batches must hold their target words (``batch.tgt_tokens``)."""
    translator = Translator(
        [model], vocabs, preprocess=preprocess, search=SearchOptions(beam_size=1), device=device
    )
    hypotheses = []
    references = []
    for batch in batches:
        if batch.tgt_tokens is None:
            raise UserError(
                "-valid_metrics: the validation shards hold no reference words "
                "(preprocess the data again with this version)"
            )
        for b, nbest in enumerate(translator.decode_batch(batch.to(device))):
            hypotheses.append(translator.detokenize(nbest[0][0]))
            references.append(translator.detokenize(batch.tgt_tokens[b]))
    return hypotheses, references
