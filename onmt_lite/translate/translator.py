"""Translator: load checkpoints once, translate lists of strings, with scores and attention.

from onmt_lite import Translator
translator = Translator.load(["model_step_1000.pt"], beam_size=5)
for result in translator.translate(["h e l l o"]):
    print(result.hypotheses[0], result.scores[0])
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from typing import Callable

import torch

from onmt_lite.data.batch import Batch
from onmt_lite.data.vocab import BOS_ID, EOS_ID
from onmt_lite.translate.alignment import align_results, check_alignment_models
from onmt_lite.translate.beam_dump import BeamRecorder, empty_entry, line_entry
from onmt_lite.translate.fast_paths import decoding_rows, decoding_streams
from onmt_lite.translate.feeder import RowFeeder
from onmt_lite.translate.finished import Hypothesis
from onmt_lite.translate.gold import gold_scores
from onmt_lite.translate.graphed import GraphedStepper, graphing_problem
from onmt_lite.translate.inputs import TextBatches, build_tokenizers
from onmt_lite.translate.loading import (
    attention_options,
    load_models,
    read_phrase_table,
    require_attention,
    search_options,
)
from onmt_lite.translate.result import Result
from onmt_lite.translate.search import Search, SearchOptions, require_whole
from onmt_lite.translate.stepper import EnsembleStepper, ModelStepper
from onmt_lite.translate.streams import run_streams
from onmt_lite.translate.words import OutputWords
from onmt_lite.utils.cuda import configure_cuda
from onmt_lite.utils.errors import UserError

__all__ = ["Translator", "Result", "load_models", "search_options"]


# -batch_size's defaults: 1.x's on the CPU; on a GPU, where a small model's step takes about as
# long for 256 rows as for 32, a batch that keeps it busy (bench/README.md, "Translation on a CUDA
# device")
CPU_BATCH_SIZE = 30
GPU_BATCH_SIZE = {"sents": 256, "tokens": 8192}


def default_batch_size(device: torch.device, batch_type: str) -> int:
    """-batch_size when not given: ``CPU_BATCH_SIZE``, or ``GPU_BATCH_SIZE`` on a CUDA device."""
    if device.type == "cuda":
        return GPU_BATCH_SIZE[batch_type]
    return CPU_BATCH_SIZE


class Translator:
    """Translate with one model or an ensemble.

    Args:
        models: NMTModels on ``device``, in eval mode (``load_models``). vocabs: ``{"src", "tgt"}``
            Vocabs.
        preprocess: the checkpoint's ``preprocess`` record (tokenization: ``lower``, sentencepiece
            models).
        search: ``SearchOptions`` (default: beam 5). replace_unk, phrase_table (a dict), batch_size,
        batch_type, avg_raw_probs, src_spm, tgt_spm: as the options of ``onmt_lite_translate``.
        report_align: give each Result the alignments of its hypotheses (Transformer decoders only).
        device: where the models are. fork_streams: on a CPU with 2 or more threads, decode the
        streams in forked processes (Linux) instead of threads (see
        ``fast_paths.decoding_streams``).
        tgt_prefix: ``translate``'s targets are prefixes that each line's translations start with
            (``-tgt_prefix``). dump_beam: record each line's search steps in ``Result.beam``.
    """

    def __init__(
        self,
        models: list,
        vocabs: dict,
        *,
        preprocess: dict = None,
        search: SearchOptions = None,
        replace_unk: bool = False,
        phrase_table: dict = None,
        batch_size: int = 30,
        batch_type: str = "sents",
        avg_raw_probs: bool = False,
        src_spm: str = "",
        tgt_spm: str = "",
        device="cpu",
        fork_streams: bool = False,
        report_align: bool = False,
        tgt_prefix: bool = False,
        dump_beam: bool = False,
        cuda_graphs: bool = False,
    ):
        require_whole("batch_size", batch_size, 1)
        if report_align:
            check_alignment_models(models)
        if batch_type not in ("sents", "tokens"):
            raise UserError(f"batch_type must be sents or tokens (got {batch_type!r})")
        self.models = models
        self.vocabs = vocabs
        self.search_options = search if search is not None else SearchOptions()
        require_attention(
            models,
            [
                name
                for name, given in (
                    ("replace_unk", replace_unk),
                    ("coverage_penalty", self.search_options.coverage_penalty != "none"),
                )
                if given
            ],
        )
        self.copy = models[0].decoder.copy_attn
        self.tokenizers = build_tokenizers(preprocess or {}, src_spm, tgt_spm)
        if report_align and any(tokenizer.spm_model for tokenizer in self.tokenizers):
            raise UserError(
                "-report_align with a sentencepiece model: the alignment would index the pieces, "
                "not the words of the input and output lines"
            )
        self.words = OutputWords(
            vocabs["tgt"], self.tokenizers[1], self.copy, replace_unk, phrase_table
        )
        self.batch_size = batch_size
        self.batch_type = batch_type
        self.avg_raw_probs = avg_raw_probs
        self.device = torch.device(device)
        self.fork_streams = fork_streams
        self.report_align = report_align
        self.tgt_prefix = tgt_prefix
        self.dump_beam = dump_beam
        self.cuda_graphs = cuda_graphs
        # each decoding thread's GraphedStepper, kept from one search to the next (its recordings)
        self._graphed = threading.local()
        if cuda_graphs:
            problem = graphing_problem(models, self._keeps_attention())
            if problem:
                raise UserError(f"-cuda_graphs is not for a search with {problem}: leave it out")

    @classmethod
    def load(
        cls, paths, device="cpu", quantize: str = "none", precision: str = "fp32", **kwargs
    ) -> "Translator":
        """A Translator of the checkpoints ``paths`` (a list: several make an ensemble; or one
        path). ``quantize`` and ``precision``: as -quantize and -precision
        (``fast_paths.prepare_model``). ``kwargs`` are ``SearchOptions`` fields (``beam_size=5``,
        ``n_best``, ...) and the keyword arguments of ``__init__``."""
        paths = (
            [paths]
            if isinstance(paths, (str, bytes)) or hasattr(paths, "__fspath__")
            else list(paths)
        )
        search_keys = {f.name for f in dataclasses.fields(SearchOptions)}
        search = SearchOptions(**{k: v for k, v in kwargs.items() if k in search_keys})
        rows = decoding_rows(
            kwargs.get("batch_size", 30), kwargs.get("batch_type", "sents"), search.beam_width
        )
        models, vocabs, preprocess = load_models(
            paths, torch.device(device), quantize, rows, precision
        )
        rest = {k: v for k, v in kwargs.items() if k not in search_keys}
        return cls(models, vocabs, preprocess=preprocess, search=search, device=device, **rest)

    @classmethod
    def from_opt(cls, opt) -> "Translator":
        """The Translator of ``onmt_lite_translate``'s parsed options (models loaded, decoding
        streams in forked processes where the system allows)."""
        if opt.gpu >= 0 and not torch.cuda.is_available():
            raise UserError(f"-gpu {opt.gpu}: this machine has no CUDA device")
        device = torch.device("cpu") if opt.gpu < 0 else torch.device("cuda", opt.gpu)
        if device.type == "cuda":
            configure_cuda(seeded=True)  # IEEE float32, and the same output for the same input
        if opt.cuda_graphs and device.type != "cuda":
            raise UserError("-cuda_graphs needs -gpu: graphs are recorded on a CUDA device")
        if opt.fp32 and opt.precision != "fp32":  # 1.x's -fp32: decode in float32
            raise UserError(f"-fp32 and -precision {opt.precision} contradict each other")
        batch_size = opt.batch_size or default_batch_size(device, opt.batch_type)
        rows = decoding_rows(batch_size, opt.batch_type, opt.beam_size)
        models, vocabs, preprocess = load_models(
            opt.model, device, opt.quantize, rows, opt.precision
        )
        require_attention(models, attention_options(opt), opt.model)
        return cls(
            models,
            vocabs,
            preprocess=preprocess,
            search=search_options(opt, vocabs["tgt"]),
            replace_unk=opt.replace_unk,
            phrase_table=read_phrase_table(opt.phrase_table) if opt.phrase_table else None,
            batch_size=batch_size,
            batch_type=opt.batch_type,
            avg_raw_probs=opt.avg_raw_probs,
            src_spm=opt.src_spm,
            tgt_spm=opt.tgt_spm,
            device=device,
            fork_streams=True,
            report_align=opt.report_align or opt.align_debug,
            tgt_prefix=opt.tgt_prefix,
            dump_beam=bool(opt.dump_beam),
            cuda_graphs=opt.cuda_graphs,
        )

    def translate(
        self,
        sources: list[str],
        targets: list[str] | None = None,
        progress: Callable[[int], None] | None = None,
        where: tuple = ("the source", 1),
    ) -> list[Result]:
        """Translate a list of strings; returns one ``Result`` per string, in order. ``targets``:
        references (gold scores), or the prefixes of the translations with ``tgt_prefix``.
        ``where``: ``(name, line number)`` of the first source, for errors naming a line (word
        features).

        ``progress``, if given, is called with the number of lines just finished: once with the
        empty lines (not decoded), then as lines finish; the numbers add up to ``len(sources)``.
        On a CPU with 2 or more threads (``torch.get_num_threads()``) several searches decode side
        by side, each over its share of the batches (``fast_paths.decoding_streams``); the results
        are the same.
        """
        self._check_inputs(sources, targets)
        inputs = TextBatches(
            sources,
            targets,
            self.vocabs,
            self.tokenizers,
            self.copy,
            prefixes=self.tgt_prefix,
            where=where,
        )
        results = [Result(tokens_src) for tokens_src in inputs.src_tokens]
        if progress is not None and inputs.n_lines > len(inputs.lines):
            progress(inputs.n_lines - len(inputs.lines))
        streams, in_processes = decoding_streams(
            torch.get_num_threads(),
            self.device,
            self.search_options.sampling,
            inputs.count(self.batch_size, self.batch_type),
            self.fork_streams,
        )

        def decode_stream(i):
            return self._decode_stream(inputs, i, len(streams))

        hypothesis_ids = {}  # line: the token ids of its n-best, for the alignment pass

        def record(item):
            line, nbest, ex_words, steps = item
            self.words.fill(results[line], nbest, ex_words)
            if self.report_align:
                hypothesis_ids[line] = [hyp.tokens for hyp in nbest]
            if steps is not None:
                word = functools.partial(self.words.word, ex_words=ex_words)
                results[line].beam = line_entry(steps, nbest, word)
            if progress is not None:
                progress(1)

        run_streams(streams, decode_stream, record, in_processes)
        self._teacher_forced(inputs, results, hypothesis_ids)
        for result in results:
            if not result.hypotheses:  # an empty source line: n-best empty outputs, as for any line
                result.fill_empty(self.search_options.n_best)
                result.beam = empty_entry() if self.dump_beam else None
        return results

    def _check_inputs(self, sources: list[str], targets: list[str] | None) -> None:
        """A TypeError unless ``sources`` (and ``targets``, if given) are lists of strings; a
        UserError for ``tgt_prefix`` without targets."""
        for name, lines in (("sources", sources), ("targets", targets)):
            if isinstance(lines, str) or (
                lines is not None and not all(isinstance(x, str) for x in lines)
            ):
                raise TypeError(
                    f"translate: {name} must be a list of strings, one a line (got "
                    f"{type(lines).__name__})"
                )
        if self.tgt_prefix and targets is None:
            raise UserError("-tgt_prefix needs -tgt: the target prefixes, one a line")

    def _decode_stream(self, inputs: TextBatches, index: int, n_streams: int):
        """The ``index``-th of ``n_streams`` streams' share of ``inputs``, decoded: ``(line,
        n-best, copy words, beam steps or None)`` for each line, as its search finishes it."""
        batches = inputs.batches(self.batch_size, self.batch_type, index, n_streams)
        feeder = RowFeeder(
            batches,
            self.make_stepper,
            self.search_options.beam_width,
            self.batch_size,
            self.batch_type,
            self.device,
            inputs.prefixes,
            self.running_stepper,
        )
        recorder = BeamRecorder() if self.dump_beam else None
        search = Search(self.search_options, BOS_ID, EOS_ID, recorder)
        for example, nbest in search.stream(feeder):
            line, ex_words = feeder.examples.pop(example)
            steps = recorder.pop(example) if recorder is not None else None
            yield line, nbest, ex_words, steps

    @torch.no_grad()
    def _teacher_forced(
        self, inputs: TextBatches, results: list[Result], hypothesis_ids: dict
    ) -> None:
        """The passes after the search: gold scores of the targets, alignments of the n-best
        (``hypothesis_ids``: ``{line: token ids of its n-best}``), into ``results``."""
        vocab_size = len(self.vocabs["tgt"])
        if inputs.has_target:
            for batch in inputs.batches(self.batch_size, self.batch_type):
                gold_scores(self.models, batch.to(self.device), results, vocab_size)
        if self.report_align:
            for batch in inputs.batches(self.batch_size, self.batch_type):
                align_results(
                    self.models, batch.to(self.device), hypothesis_ids, results, vocab_size
                )

    def make_stepper(self, batch: Batch) -> EnsembleStepper:
        """The stepper of ``batch`` (on the device): its examples encoded by every model, a row
        each (what a search's feeder calls for each batch it lets in)."""
        vocab_size = len(self.vocabs["tgt"])
        keep_attention = self._keeps_attention()
        steppers = [ModelStepper(m, batch, vocab_size, keep_attention) for m in self.models]
        return EnsembleStepper(steppers, self.avg_raw_probs)

    def running_stepper(self, first):
        """The stepper a search runs on, from ``first``, the stepper of its first batch's examples
        (``make_stepper``'s): with ``cuda_graphs`` a ``GraphedStepper`` (its step recorded as a
        CUDA graph on a CUDA device, run as is elsewhere; the calling thread's, kept for its next
        search), else ``first`` itself."""
        if not self.cuda_graphs:
            return first
        kept = getattr(self._graphed, "stepper", None)
        if kept is not None:  # this thread's last search's: its buffers and recorded step
            return kept.restart(first)
        # a beam search holds at most its sentences' beams (tokens batches: no fixed count)
        beam = self.search_options.beam_width
        rows = self.batch_size * beam
        held = rows if self.batch_type == "sents" else None
        record = self.device.type == "cuda"
        stepper = GraphedStepper(first, record=record, rows=held, beam=beam)
        self._graphed.stepper = stepper
        return stepper

    def _keeps_attention(self) -> bool:
        """Whether the search keeps the attention (the coverage penalty sums it)."""
        options = self.search_options
        return options.attention or options.coverage_penalty != "none"

    def decode_batch(
        self, batch: Batch, search: Search | None = None, sources: list | None = None
    ) -> list[list]:
        """n-best ``(words, Hypothesis)`` lists of the examples of ``batch``, in batch order."""
        search = search or Search(self.search_options, BOS_ID, EOS_ID)
        nbest = search.run(
            self.make_stepper(batch),
            batch.batch_size,
            batch.src_lengths_cpu.tolist(),
            device=batch.src.device,
        )
        out = []
        for b, hyps in enumerate(nbest):
            ex_words = batch.src_ex_vocab[b] if self.copy else None
            source = sources[int(batch.indices_cpu[b])] if sources is not None else None
            out.append([(self.words.words(hyp, source, ex_words), hyp) for hyp in hyps])
        return out

    def record(self, result: Result, nbest: list[Hypothesis], ex_words: list | None) -> None:
        """Put an example's n-best hypotheses (a search's) into its Result, as words and text
        (``ex_words``: the example's own source words, which a copy model's ids past the
        vocabulary name)."""
        self.words.fill(result, nbest, ex_words)

    def detokenize(self, words: list[str]) -> str:
        """Output words as text (sentencepiece pieces decoded)."""
        return self.words.detokenize(words)
