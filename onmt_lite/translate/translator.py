"""Translator: load checkpoints once, translate lists of strings, with scores and attention.

    from onmt_lite import Translator
    translator = Translator.load(["model_step_1000.pt"], beam_size=5)
    for result in translator.translate(["h e l l o"]):
        print(result.hypotheses[0], result.scores[0])
"""
import dataclasses

import torch

from onmt_lite.data.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Vocab
from onmt_lite.models.copy_generator import CopyGeneratorLoss, NMTCriterion
from onmt_lite.train.checkpoint import load_checkpoint, model_from_checkpoint
from onmt_lite.translate.feeder import RowFeeder
from onmt_lite.translate.inputs import TextBatches, build_tokenizers
from onmt_lite.translate.packed import ROW_BUCKET, pack_for_cpu, quantize_int8
from onmt_lite.translate.search import Search, SearchOptions
from onmt_lite.translate.stepper import EnsembleStepper, ModelStepper
from onmt_lite.translate.streams import run_streams, stream_threads
from onmt_lite.utils.errors import UserError


@dataclasses.dataclass
class Result:
    """The translations of one input line: n-best texts, scores and log-probabilities, token lists,
    attention ``[out_len x src_len]`` per hypothesis, and the gold score when a target was given.
    For copy models also the copy attention ``[out_len x src_len]`` and the probability of copying
    ``[out_len x 1]`` per hypothesis (None otherwise). The attentions are None when the search did
    not keep them (``attention=False``: what ``onmt_lite_translate`` does unless -replace_unk,
    -attn_debug or -attn_plot asks for them)."""
    source: list
    hypotheses: list
    scores: list
    log_probs: list
    tokens: list
    attention: list
    gold_score: float = None
    gold_words: int = 0
    copy_attention: list = dataclasses.field(default_factory=list)
    p_copy: list = dataclasses.field(default_factory=list)


def decoding_rows(batch_size, batch_type="sents", beam_width=1):
    """``(rows, multiple)``: the rows the decoder multiplies at each step (sentences x beam), to pack
    the weights for, and what their count is padded to a multiple of. Token batches hold no fixed
    number of sentences: 64 rows, padded to multiples of 16. A beam search's rows are whole beams
    but for the first step of examples that join (a row each): padded to the beam width, they are
    padded only then (toy-ende, beam 5: 5-7% faster than padding to 16)."""
    if batch_type != "sents":
        return 64, ROW_BUCKET
    return batch_size * beam_width, beam_width if beam_width > 1 else ROW_BUCKET


def load_models(paths, device, quantize="none", rows=None):
    """Models and vocabularies of the checkpoints; an ensemble must share its vocabularies.
    ``quantize="int8"`` quantises each model for the CPU (see ``quantize_int8``); else, on the CPU,
    ``rows`` (``decoding_rows``: the batch size times the beam, and the multiple the row count is
    padded to) packs the weights for decoding (see packed.py)."""
    if quantize == "int8" and torch.device(device).type != "cpu":
        raise UserError("-quantize int8 is for CPU translation; leave out -gpu")
    models, first = [], None
    for path in paths:
        checkpoint = load_checkpoint(path)
        if first is None:
            first = checkpoint
        elif checkpoint["vocab"] != first["vocab"]:
            raise UserError(f"{path}: its vocabularies differ from those of {paths[0]}; an ensemble needs one")
        vocabs = {side: Vocab.from_plain(words) for side, words in checkpoint["vocab"].items()}
        model = model_from_checkpoint(_options(checkpoint["opt"], path), vocabs, checkpoint, path)
        model.to(device).eval()
        if quantize == "int8":
            model = quantize_int8(model)
        elif rows is not None and torch.device(device).type == "cpu":
            model = pack_for_cpu(model, *rows)
        models.append(model)
    copies = {m.decoder.copy_attn for m in models}
    if len(copies) > 1:
        raise UserError("an ensemble cannot mix copy-attention and plain models")
    return models, vocabs, first.get("preprocess") or {}


def _options(plain, path):
    import argparse

    from onmt_lite.opts import model_opts, option_defaults, train_opts

    defaults = option_defaults([model_opts, train_opts])
    missing = [k for k in ("rnn_size", "encoder_type", "copy_attn") if k not in plain]
    if missing:
        raise UserError(f"{path}: checkpoint options lack {', '.join(missing)}")
    return argparse.Namespace(**{**defaults, **plain, "dropout": 0.0})


class Translator:
    """Translate with one model or an ensemble. Options are those of ``onmt_lite_translate``."""

    def __init__(self, models, vocabs, preprocess, search_options, replace_unk=False, phrase_table=None,
                 batch_size=30, batch_type="sents", avg_raw_probs=False, src_spm="", tgt_spm="", device="cpu"):
        self.models, self.vocabs, self.search_options = models, vocabs, search_options
        self.copy = models[0].decoder.copy_attn
        self.tokenizers = build_tokenizers(preprocess, src_spm, tgt_spm)
        self.replace_unk, self.phrase_table = replace_unk, phrase_table or {}
        self.batch_size, self.batch_type, self.avg_raw_probs = batch_size, batch_type, avg_raw_probs
        self.device = torch.device(device)

    @classmethod
    def load(cls, paths, device="cpu", quantize="none", **kwargs):
        search_keys = {f.name for f in dataclasses.fields(SearchOptions)}
        search = SearchOptions(**{k: v for k, v in kwargs.items() if k in search_keys})
        rows = decoding_rows(kwargs.get("batch_size", 30), kwargs.get("batch_type", "sents"), search.beam_width)
        models, vocabs, preprocess = load_models(list(paths), torch.device(device), quantize, rows)
        rest = {k: v for k, v in kwargs.items() if k not in search_keys}
        return cls(models, vocabs, preprocess, search, device=device, **rest)

    def translate(self, sources, targets=None, progress=None):
        """Translate a list of strings; returns one ``Result`` per string, in order.

        ``progress``, if given, is called with the number of lines just finished: once with the
        empty lines (not decoded), then as lines finish; the numbers add up to ``len(sources)``.
        On a CPU with 2 or more threads (``torch.get_num_threads()``) several searches decode side
        by side, each over its share of the batches, in processes of one thread each where the
        system can fork (streams.py); the results are the same.
        """
        inputs = TextBatches(sources, targets, self.vocabs, self.tokenizers, self.copy)
        results = [Result(tokens_src, [], [], [], [], []) for tokens_src in inputs.src_tokens]
        if progress is not None and inputs.n_lines > len(inputs.lines):
            progress(inputs.n_lines - len(inputs.lines))
        streams = stream_threads(torch.get_num_threads(), self.device, self.search_options.sampling,
                                 inputs.count(self.batch_size, self.batch_type))

        def decode_stream(i):
            """The ``i``-th stream's share of the batches: ``(line, n-best, copy words)`` per example."""
            batches = inputs.batches(self.batch_size, self.batch_type, i, len(streams))
            feeder = RowFeeder(batches, self._stepper, self.search_options.beam_width, self.batch_size,
                               self.batch_type, self.device)
            for example, nbest in Search(self.search_options, BOS_ID, EOS_ID).stream(feeder):
                line, ex_words = feeder.examples.pop(example)
                yield line, nbest, ex_words

        def record(item):
            line, nbest, ex_words = item
            self._record(results[line], nbest, ex_words)
            if progress is not None:
                progress(1)

        run_streams(streams, decode_stream, record)
        with torch.no_grad():
            if inputs.has_target:
                for batch in inputs.batches(self.batch_size, self.batch_type):
                    self._gold(batch.to(self.device), results)
        for result in results:
            if not result.hypotheses:  # an empty source line
                result.hypotheses, result.scores, result.log_probs = [""], [0.0], [0.0]
                result.tokens, result.attention = [[]], [None]
                result.copy_attention, result.p_copy = [None], [None]
        return results

    def _stepper(self, batch):
        """The stepper of ``batch``: its examples encoded by every model, a row each."""
        vocab_size = len(self.vocabs["tgt"])
        steppers = [ModelStepper(m, batch, vocab_size, self.search_options.attention) for m in self.models]
        return EnsembleStepper(steppers, self.avg_raw_probs)

    def decode_batch(self, batch, search=None, sources=None):
        """n-best ``(words, Hypothesis)`` lists of the examples of ``batch``, in batch order."""
        search = search or Search(self.search_options, BOS_ID, EOS_ID)
        nbest = search.run(self._stepper(batch), batch.batch_size, batch.src_lengths)
        out = []
        for b, hyps in enumerate(nbest):
            ex_words = batch.src_ex_vocab[b] if self.copy else None
            source = sources[int(batch.indices[b])] if sources is not None else None
            out.append([(self._words(hyp, source, ex_words), hyp) for hyp in hyps])
        return out

    def _record(self, result, nbest, ex_words):
        """Put an example's n-best hypotheses into its Result."""
        for hyp in nbest:
            words = self._words(hyp, result.source, ex_words)
            result.tokens.append(words)
            result.hypotheses.append(self.detokenize(words))
            result.scores.append(hyp.score)
            result.log_probs.append(hyp.log_prob)
            result.attention.append(hyp.attention.get("std"))
            result.copy_attention.append(hyp.attention.get("copy"))
            result.p_copy.append(hyp.attention.get("p_copy"))

    def _words(self, hyp, src_tokens, ex_words):
        """Token ids to words: copied words from the source, ``<unk>`` replaced when asked."""
        itos, vocab_size = self.vocabs["tgt"].itos, len(self.vocabs["tgt"])
        align = hyp.attention.get("copy" if self.copy else "std")
        words = []
        for position, token in enumerate(hyp.tokens):
            if token >= vocab_size:
                words.append(ex_words[token - vocab_size])
            elif token == UNK_ID and self.replace_unk and align is not None and src_tokens is not None:
                source_word = src_tokens[int(align[position, :len(src_tokens)].argmax())]
                words.append(self.phrase_table.get(source_word, source_word))
            else:
                words.append(itos[token])
        return words

    def detokenize(self, words):
        """Output words as text (sentencepiece pieces decoded)."""
        sp = self.tokenizers[1]._sp
        return sp.decode(words) if sp is not None else " ".join(words)

    def _gold(self, batch, results):
        """Log-probability of each gold target (copy-aware), averaged over the ensemble."""
        totals = torch.zeros(batch.batch_size)
        target = batch.tgt[1:]
        for model in self.models:
            dec_out, attns = model(batch.src, batch.tgt, batch.src_lengths)
            rows = dec_out.size(0) * dec_out.size(1)
            if self.copy:
                log_probs = model.generator(dec_out.reshape(rows, -1), attns["copy"].reshape(rows, -1), batch.src_map)
                _, nll = CopyGeneratorLoss(len(self.vocabs["tgt"]))(log_probs, batch.alignment[1:].reshape(-1),
                                                                    target.reshape(-1))
            else:
                _, nll = NMTCriterion()(model.generator(dec_out.reshape(rows, -1)), target.reshape(-1))
            totals -= nll.view_as(target).sum(0).cpu() / len(self.models)
        words = (target != PAD_ID).sum(0)
        for b in range(batch.batch_size):
            line = int(batch.indices[b])
            results[line].gold_score, results[line].gold_words = float(totals[b]), int(words[b])
