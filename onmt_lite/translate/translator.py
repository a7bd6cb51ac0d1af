"""Translator: load checkpoints once, translate lists of strings, with scores and attention.

    from onmt_lite import Translator
    translator = Translator.load(["model_step_1000.pt"], beam_size=5)
    for result in translator.translate(["h e l l o"]):
        print(result.hypotheses[0], result.scores[0])
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import torch

from onmt_lite.data.batch import Batch
from onmt_lite.data.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID, vocabs_from_plain
from onmt_lite.loss import CopyGeneratorLoss, NMTCriterion
from onmt_lite.models.checkpoint import load_checkpoint, model_from_checkpoint, model_options
from onmt_lite.translate.alignment import alignment_matrices, check_alignment_models
from onmt_lite.translate.beam_dump import BeamRecorder, empty_entry, line_entry
from onmt_lite.translate.fast_paths import decoding_rows, decoding_streams, prepare_model
from onmt_lite.translate.feeder import RowFeeder
from onmt_lite.translate.inputs import TextBatches, build_tokenizers, read_file_lines
from onmt_lite.translate.search import Search, SearchOptions, require_whole
from onmt_lite.translate.stepper import EnsembleStepper, ModelStepper
from onmt_lite.translate.streams import run_streams
from onmt_lite.utils.cuda import configure_cuda
from onmt_lite.utils.errors import UserError


@dataclasses.dataclass
class Result:
    """The translations of one input line: n-best texts, scores and log-probabilities, token lists,
    attention ``[out_len x src_len]`` per hypothesis, and the gold score when a target was given.
    ``beam``: the line's beam dump (``beam_dump.line_entry``) when the Translator records them.
    For copy models also the copy attention ``[out_len x src_len]`` and the probability of copying
    ``[out_len x 1]`` per hypothesis (None otherwise). The attentions are None when the search did
    not keep them (``attention=False``: what ``onmt_lite_translate`` does unless -replace_unk,
    -attn_debug or -attn_plot asks for them). With ``report_align``, ``alignment`` holds each
    hypothesis's alignment ``[n_tokens x src_len]`` (see translate/alignment.py; None for an empty line)."""
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
    alignment: list = dataclasses.field(default_factory=list)
    beam: dict = None

    def fill_empty(self, n_best):
        """The Result of an empty source line: ``n_best`` empty outputs of score 0, as for any line."""
        self.hypotheses, self.scores, self.log_probs = [""] * n_best, [0.0] * n_best, [0.0] * n_best
        self.tokens, self.attention = [[] for _ in range(n_best)], [None] * n_best
        self.copy_attention, self.p_copy, self.alignment = [None] * n_best, [None] * n_best, [None] * n_best


def load_models(paths: list[str], device, quantize: str = "none", rows: tuple | None = None) -> tuple[list, dict, dict]:
    """Models and vocabularies of the checkpoints; an ensemble must share its vocabularies. Each model
    is prepared for decoding on ``device`` by ``fast_paths.prepare_model`` (int8 with ``quantize``,
    else packed for ``rows`` on the CPU)."""
    models, first = [], None
    for path in paths:
        checkpoint = load_checkpoint(path)
        if first is None:
            first = checkpoint
        elif checkpoint["vocab"] != first["vocab"]:
            raise UserError(f"{path}: its vocabularies differ from those of {paths[0]}; an ensemble needs one")
        vocabs = vocabs_from_plain(checkpoint["vocab"])
        model = model_from_checkpoint(model_options(checkpoint["opt"], path), vocabs, checkpoint, path)
        models.append(prepare_model(model.to(device).eval(), device, quantize, rows))
    copies = {m.decoder.copy_attn for m in models}
    if len(copies) > 1:
        raise UserError("an ensemble cannot mix copy-attention and plain models")
    return models, vocabs, first.get("preprocess") or {}


def require_attention(models, wanted, names=None):
    """A UserError when an option of ``wanted`` (option names, without the dash) reads the attention
    but a model of the ensemble has none (-global_attention none); ``names``: the models' paths.
    -replace_unk reads a copy model's copy attention, which such a model has."""
    for i, model in enumerate(models):
        if model.decoder.attentional:
            continue
        copy_attention = model.decoder.copy_attn  # -replace_unk reads it
        reading = [name for name in wanted if not (name == "replace_unk" and copy_attention)]
        if reading:
            name = names[i] if names is not None else f"model {i + 1} of the ensemble"
            raise UserError(f"-{reading[0]} needs the model's attention, but {name} was trained "
                            "with -global_attention none")


def attention_options(opt):
    """The options of ``onmt_lite_translate`` given in ``opt`` that read the models' attention."""
    asked = {"replace_unk": opt.replace_unk, "attn_debug": opt.attn_debug, "attn_plot": opt.attn_plot,
             "coverage_penalty": opt.coverage_penalty != "none"}
    return [name for name, given in asked.items() if given]


def search_options(opt, tgt_vocab):
    """The ``SearchOptions`` of ``onmt_lite_translate``'s options; contradictions are a UserError."""
    sampling = opt.random_sampling_topk != 1
    if opt.n_best > opt.beam_size:
        raise UserError(f"-n_best {opt.n_best} is larger than -beam_size {opt.beam_size}")
    if sampling and opt.beam_size > 1:
        raise UserError("random sampling (-random_sampling_topk other than 1) needs -beam_size 1")
    return SearchOptions(
        beam_size=opt.beam_size, n_best=opt.n_best, min_length=opt.min_length, max_length=opt.max_length,
        ratio=opt.ratio, length_penalty=opt.length_penalty, alpha=opt.alpha, coverage_penalty=opt.coverage_penalty,
        beta=opt.beta, stepwise_penalty=opt.stepwise_penalty, block_ngram_repeat=opt.block_ngram_repeat,
        ignore_when_blocking=tuple(tgt_vocab.lookup(w) for w in opt.ignore_when_blocking),
        sampling_topk=max(opt.random_sampling_topk, 0), sampling_temp=opt.random_sampling_temp, sampling=sampling,
        attention=bool(opt.replace_unk or opt.attn_debug or opt.attn_plot))  # else no use for it: not kept


def read_phrase_table(path):
    """``{source word: target}`` from a file of ``source|||target`` lines (``-phrase_table``)."""
    table = {}
    for lineno, line in enumerate(read_file_lines(path), 1):
        source, sep, target = line.rstrip("\n").partition("|||")
        if not sep:
            raise UserError(f"{path}:{lineno}: expected 'source|||target'")
        table[source.strip()] = target.strip()
    return table


class Translator:
    """Translate with one model or an ensemble.

    Args:
        models: NMTModels on ``device``, in eval mode (``load_models``). vocabs: ``{"src", "tgt"}`` Vocabs.
        preprocess: the checkpoint's ``preprocess`` record (tokenization: ``lower``, sentencepiece models).
        search: ``SearchOptions`` (default: beam 5). replace_unk, phrase_table (a dict), batch_size,
        batch_type, avg_raw_probs, src_spm, tgt_spm: as the options of ``onmt_lite_translate``.
        report_align: give each Result the alignments of its hypotheses (Transformer decoders only).
        device: where the models are. fork_streams: on a CPU with 2 or more threads, decode the
        streams in forked processes (Linux) instead of threads (see ``fast_paths.decoding_streams``).
        tgt_prefix: ``translate``'s targets are prefixes that each line's translations start with
            (``-tgt_prefix``). dump_beam: record each line's search steps in ``Result.beam``.
    """

    def __init__(self, models: list, vocabs: dict, *, preprocess: dict = None, search: SearchOptions = None,
                 replace_unk: bool = False, phrase_table: dict = None, batch_size: int = 30,
                 batch_type: str = "sents", avg_raw_probs: bool = False, src_spm: str = "", tgt_spm: str = "",
                 device="cpu", fork_streams: bool = False, report_align: bool = False, tgt_prefix: bool = False,
                 dump_beam: bool = False):
        require_whole("batch_size", batch_size, 1)
        if report_align:
            check_alignment_models(models)
        if batch_type not in ("sents", "tokens"):
            raise UserError(f"batch_type must be sents or tokens (got {batch_type!r})")
        self.models, self.vocabs = models, vocabs
        self.search_options = search if search is not None else SearchOptions()
        require_attention(models, [name for name, given in (
            ("replace_unk", replace_unk), ("coverage_penalty", self.search_options.coverage_penalty != "none"))
            if given])
        self.copy = models[0].decoder.copy_attn
        self.tokenizers = build_tokenizers(preprocess or {}, src_spm, tgt_spm)
        if report_align and any(tokenizer.spm_model for tokenizer in self.tokenizers):
            raise UserError("-report_align with a sentencepiece model: the alignment would index the pieces, "
                            "not the words of the input and output lines")
        self.replace_unk, self.phrase_table = replace_unk, phrase_table or {}
        self.batch_size, self.batch_type, self.avg_raw_probs = batch_size, batch_type, avg_raw_probs
        self.device, self.fork_streams = torch.device(device), fork_streams
        self.report_align, self.tgt_prefix, self.dump_beam = report_align, tgt_prefix, dump_beam

    @classmethod
    def load(cls, paths, device="cpu", quantize: str = "none", **kwargs) -> "Translator":
        """A Translator of the checkpoints ``paths`` (a list: several make an ensemble; or one path).
        ``kwargs`` are ``SearchOptions`` fields (``beam_size=5``, ``n_best``, ...) and the keyword
        arguments of ``__init__``."""
        paths = [paths] if isinstance(paths, (str, bytes)) or hasattr(paths, "__fspath__") else list(paths)
        search_keys = {f.name for f in dataclasses.fields(SearchOptions)}
        search = SearchOptions(**{k: v for k, v in kwargs.items() if k in search_keys})
        rows = decoding_rows(kwargs.get("batch_size", 30), kwargs.get("batch_type", "sents"), search.beam_width)
        models, vocabs, preprocess = load_models(paths, torch.device(device), quantize, rows)
        rest = {k: v for k, v in kwargs.items() if k not in search_keys}
        return cls(models, vocabs, preprocess=preprocess, search=search, device=device, **rest)

    @classmethod
    def from_opt(cls, opt) -> "Translator":
        """The Translator of ``onmt_lite_translate``'s parsed options (models loaded, decoding streams
        in forked processes where the system allows)."""
        if opt.gpu >= 0 and not torch.cuda.is_available():
            raise UserError(f"-gpu {opt.gpu}: this machine has no CUDA device")
        device = torch.device("cpu") if opt.gpu < 0 else torch.device("cuda", opt.gpu)
        if device.type == "cuda":
            configure_cuda(seeded=True)  # IEEE float32, and the same output for the same input
        models, vocabs, preprocess = load_models(opt.model, device, opt.quantize,
                                                 decoding_rows(opt.batch_size, opt.batch_type, opt.beam_size))
        require_attention(models, attention_options(opt), opt.model)
        return cls(models, vocabs, preprocess=preprocess, search=search_options(opt, vocabs["tgt"]),
                   replace_unk=opt.replace_unk,
                   phrase_table=read_phrase_table(opt.phrase_table) if opt.phrase_table else None,
                   batch_size=opt.batch_size, batch_type=opt.batch_type, avg_raw_probs=opt.avg_raw_probs,
                   src_spm=opt.src_spm, tgt_spm=opt.tgt_spm, device=device, fork_streams=True,
                   report_align=opt.report_align or opt.align_debug, tgt_prefix=opt.tgt_prefix,
                   dump_beam=bool(opt.dump_beam))

    def translate(self, sources: list[str], targets: list[str] | None = None,
                  progress: Callable[[int], None] | None = None, where: tuple = ("the source", 1)) -> list[Result]:
        """Translate a list of strings; returns one ``Result`` per string, in order. ``targets``:
        references (gold scores), or the prefixes of the translations with ``tgt_prefix``. ``where``:
        ``(name, line number)`` of the first source, for errors naming a line (word features).

        ``progress``, if given, is called with the number of lines just finished: once with the
        empty lines (not decoded), then as lines finish; the numbers add up to ``len(sources)``.
        On a CPU with 2 or more threads (``torch.get_num_threads()``) several searches decode side
        by side, each over its share of the batches (``fast_paths.decoding_streams``); the results
        are the same.
        """
        for name, lines in (("sources", sources), ("targets", targets)):
            if isinstance(lines, str) or (lines is not None and not all(isinstance(x, str) for x in lines)):
                raise TypeError(f"translate: {name} must be a list of strings, one a line (got {type(lines).__name__})")
        if self.tgt_prefix and targets is None:
            raise UserError("-tgt_prefix needs -tgt: the target prefixes, one a line")
        inputs = TextBatches(sources, targets, self.vocabs, self.tokenizers, self.copy, prefixes=self.tgt_prefix,
                             where=where)
        results = [Result(tokens_src, [], [], [], [], []) for tokens_src in inputs.src_tokens]
        if progress is not None and inputs.n_lines > len(inputs.lines):
            progress(inputs.n_lines - len(inputs.lines))
        streams, in_processes = decoding_streams(torch.get_num_threads(), self.device, self.search_options.sampling,
                                                 inputs.count(self.batch_size, self.batch_type), self.fork_streams)

        def decode_stream(i):
            """The ``i``-th stream's share: ``(line, n-best, copy words, beam steps or None)`` each."""
            batches = inputs.batches(self.batch_size, self.batch_type, i, len(streams))
            feeder = RowFeeder(batches, self._stepper, self.search_options.beam_width, self.batch_size,
                               self.batch_type, self.device, inputs.prefixes)
            recorder = BeamRecorder() if self.dump_beam else None
            for example, nbest in Search(self.search_options, BOS_ID, EOS_ID, recorder).stream(feeder):
                line, ex_words = feeder.examples.pop(example)
                yield line, nbest, ex_words, recorder.pop(example) if recorder is not None else None

        hypothesis_ids = {}  # line: the token ids of its n-best, for the alignment pass

        def record(item):
            line, nbest, ex_words, steps = item
            self._record(results[line], nbest, ex_words)
            if self.report_align:
                hypothesis_ids[line] = [hyp.tokens for hyp in nbest]
            if steps is not None:
                results[line].beam = line_entry(steps, nbest, lambda token: self._word(token, ex_words))
            if progress is not None:
                progress(1)

        run_streams(streams, decode_stream, record, in_processes)
        with torch.no_grad():
            if inputs.has_target:
                for batch in inputs.batches(self.batch_size, self.batch_type):
                    self._gold(batch.to(self.device), results)
            if self.report_align:
                for batch in inputs.batches(self.batch_size, self.batch_type):
                    self._align(batch.to(self.device), hypothesis_ids, results)
        for result in results:
            if not result.hypotheses:  # an empty source line: n-best empty outputs, as for any line
                result.fill_empty(self.search_options.n_best)
                result.beam = empty_entry() if self.dump_beam else None
        return results

    def _stepper(self, batch):
        """The stepper of ``batch``: its examples encoded by every model, a row each."""
        vocab_size = len(self.vocabs["tgt"])
        options = self.search_options
        keep_attention = options.attention or options.coverage_penalty != "none"  # the penalty sums it
        steppers = [ModelStepper(m, batch, vocab_size, keep_attention) for m in self.models]
        return EnsembleStepper(steppers, self.avg_raw_probs)

    def decode_batch(self, batch: Batch, search: Search | None = None, sources: list | None = None) -> list[list]:
        """n-best ``(words, Hypothesis)`` lists of the examples of ``batch``, in batch order."""
        search = search or Search(self.search_options, BOS_ID, EOS_ID)
        nbest = search.run(self._stepper(batch), batch.batch_size, batch.src_lengths)
        out = []
        for b, hyps in enumerate(nbest):
            ex_words = batch.src_ex_vocab[b] if self.copy else None
            source = sources[int(batch.indices_cpu[b])] if sources is not None else None
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
        align = hyp.attention.get("copy" if self.copy else "std")
        words = []
        for position, token in enumerate(hyp.tokens):
            if token == UNK_ID and self.replace_unk and align is not None and src_tokens is not None:
                source_word = src_tokens[int(align[position, :len(src_tokens)].argmax())]
                words.append(self.phrase_table.get(source_word, source_word))
            else:
                words.append(self._word(token, ex_words))
        return words

    def _word(self, token, ex_words):
        """The word of a token id: the target vocabulary's, or a copied source word (``ex_words``)."""
        vocab_size = len(self.vocabs["tgt"])
        return self.vocabs["tgt"].itos[token] if token < vocab_size else ex_words[token - vocab_size]

    def detokenize(self, words: list[str]) -> str:
        """Output words as text (sentencepiece pieces decoded)."""
        sp = self.tokenizers[1]._sp
        return sp.decode(words) if sp is not None else " ".join(words)

    def _align(self, batch, hypothesis_ids, results):
        """Each hypothesis's alignment (one teacher-forced pass over all the n-best of ``batch``)."""
        lines = batch.indices_cpu.tolist()
        hypotheses = [(b, tokens) for b, line in enumerate(lines) for tokens in hypothesis_ids[line]]
        matrices = iter(alignment_matrices(self.models, batch, hypotheses, len(self.vocabs["tgt"])))
        for line in lines:
            results[line].alignment = [next(matrices) for _ in hypothesis_ids[line]]

    def _gold(self, batch, results):
        """Log-probability of each gold target (copy-aware), averaged over the ensemble."""
        totals = torch.zeros(batch.batch_size)
        target = batch.tgt[1:]
        for model in self.models:
            dec_out, attns = model(batch.src, batch.tgt, batch.src_lengths, batch.src_feats)
            rows = dec_out.size(0) * dec_out.size(1)
            if self.copy:
                log_probs = model.generator(dec_out.reshape(rows, -1), attns["copy"].reshape(rows, -1), batch.src_map)
                _, nll = CopyGeneratorLoss(len(self.vocabs["tgt"]))(log_probs, batch.alignment[1:].reshape(-1),
                                                                    target.reshape(-1))
            else:
                _, nll = NMTCriterion()(model.generator(dec_out.reshape(rows, -1)), target.reshape(-1))
            totals -= nll.view_as(target).sum(0).cpu() / len(self.models)
        words = (target != PAD_ID).sum(0).tolist()  # one read of the device, not one per example
        for b in range(batch.batch_size):
            line = int(batch.indices_cpu[b])
            results[line].gold_score, results[line].gold_words = float(totals[b]), words[b]
