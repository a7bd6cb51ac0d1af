"""translate(opt): what ``onmt_lite_translate`` does: read, translate, write, score.

With ``-shard_size N`` the source (and ``-tgt``) is read, translated and written N lines at a time,
so a huge file is never held whole; the output is the same (an example's translation does not
depend on what it is decoded with). A -dump_beam file is written once, when all pieces are done:
it gathers the beams of every piece (and of every decoding stream: they travel with the results),
so those are held in memory until the end.

The files a run writes (-output, -dump_beam, the -attn_plot PNGs) are checked before any work
(each path, and no two of them one file) and staged in one ``StagedOutputs``: they appear together
when the run succeeds, or none does. Standard output, devices and FIFOs are written into as the
translations come (nothing there can be taken back). A killed run's temporaries are removed by the
next run on the same files; a live run's are locked, and kept.
"""

import gc
import glob
import itertools
import math
import os
import re
import time
from collections.abc import Callable, Iterator

import torch

from onmt_lite.data.corpus import STDIN, line_passes, read_lines, same_stream
from onmt_lite.translate.alignment import pharaoh
from onmt_lite.translate.attn_plot import check_directory, write_attention_plots
from onmt_lite.translate.beam_dump import dump_text
from onmt_lite.translate.loading import idle_translation_options
from onmt_lite.translate.translator import Translator
from onmt_lite.utils.errors import UserError
from onmt_lite.utils.files import StagedOutputs
from onmt_lite.utils.locks import remove_stale_temporaries
from onmt_lite.utils.logging import logger
from onmt_lite.utils.metrics import corpus_scores
from onmt_lite.utils.output_paths import (
    require_distinct_outputs,
    require_file_path,
    require_outputs_not_inputs,
)
from onmt_lite.utils.progress import Progress


def log_scores(name, total, words):
    average = total / max(words, 1)
    logger.info(f"{name} AVG SCORE: {average:.4f}, {name} PPL: {math.exp(min(-average, 100)):.4f}")


def pieces(src_lines, tgt, size):
    """Yield ``(first line index, sources, targets or None)`` of ``size`` lines at a time (0: all at
    once), the sources from a pass of ``src_lines`` (``line_passes``); a UserError when -src and
    -tgt have different line counts."""
    sources = (text for _, text in src_lines())
    targets = (text for _, text in read_lines(tgt)) if tgt else None
    first = 0
    while True:
        piece = list(itertools.islice(sources, size or None))
        piece_targets = list(itertools.islice(targets, len(piece))) if targets is not None else None
        if piece_targets is not None and len(piece_targets) < len(piece):
            raise UserError(
                f"-src has {first + len(piece) + sum(1 for _ in sources)} lines but -tgt has "
                f"{first + len(piece_targets)}"
            )
        if not piece:
            if targets is not None and next(targets, None) is not None:
                raise UserError(
                    f"-src has {first} lines but -tgt has {first + 1 + sum(1 for _ in targets)}"
                )
            return
        yield first, piece, piece_targets
        first += len(piece)


def output_lines(result, report_align=False):
    """The output lines of one Result: its n-best, each followed by `` ||| `` and its alignment with
    ``report_align`` (OpenNMT-py 1.x's format)."""
    if not report_align:
        return result.hypotheses
    return [
        f"{hyp} ||| {pharaoh(align)}" for hyp, align in zip(result.hypotheses, result.alignment)
    ]


PLOT_NAME = re.compile(r"\d{5,}\.png")  # attn_plot.plot_path's names: DIR/00001.png for line 1


def check_outputs(opt) -> list[tuple[str, str]]:
    """The ``(option, path)`` of each file the run writes, -output's first (``-``: /dev/stdout),
    checked before any work: each path can be written, no two (nor the log file) are one file, none
    (nor the log) is an input (-src, -tgt, -model, -phrase_table), none is -attn_plot's directory
    or one of its plots, and -attn_plot's directory can be made. A
    UserError otherwise. Nothing is made or opened: the command checks before it opens its log."""
    output = "/dev/stdout" if opt.output == "-" else opt.output  # either writes to descriptor 1
    if opt.tgt_prefix and not opt.tgt:
        raise UserError("-tgt_prefix needs -tgt: the file of target prefixes, one a line")
    outputs = [("-output", output)] + ([("-dump_beam", opt.dump_beam)] if opt.dump_beam else [])
    for option, path in outputs:
        require_file_path(path, option)  # not a directory, in one that exists and is writable
    log = [("-log_file", opt.log_file)] if opt.log_file else []
    require_distinct_outputs(outputs, log)
    inputs = [("-src", opt.src), ("-tgt", opt.tgt), ("-phrase_table", opt.phrase_table)]
    inputs += [("-model", path) for path in opt.model]
    require_outputs_not_inputs(outputs + log, [(o, p) for o, p in inputs if p and p != STDIN])
    if opt.attn_plot:
        plots = os.path.realpath(opt.attn_plot)
        for option, path in outputs:
            target = os.path.realpath(path)
            if target == plots or (
                os.path.dirname(target) == plots and PLOT_NAME.fullmatch(os.path.basename(target))
            ):
                raise UserError(
                    f"{option} {path}: -attn_plot {opt.attn_plot} writes there; give "
                    f"each output a file of its own"
                )
        check_directory(opt.attn_plot)
    return outputs


def remove_stale_outputs(outputs: list[tuple[str, str]], plots: str) -> None:
    """Remove the temporaries a killed translation left beside ``outputs`` (and in the directory
    ``plots``, if given), saying so; a running translation's are locked and kept."""
    patterns = []
    for _, path in outputs:
        target = os.path.realpath(path)
        if os.path.isfile(target) or not os.path.exists(target):  # written through a temporary
            name = glob.escape(os.path.basename(target))
            patterns.append(os.path.join(os.path.dirname(target), name))
    if plots:
        patterns.append(os.path.join(os.path.realpath(plots), StagedOutputs.STAGING))
    for pattern in patterns:
        for stale in remove_stale_temporaries(pattern):
            logger.info(f"removed {stale}, left by an interrupted translation")


def translate(opt):
    """Translate ``opt.src`` into ``opt.output``; returns a Summary of the run."""
    outputs = check_outputs(opt)
    output = outputs[0][1]
    remove_stale_outputs(outputs, opt.attn_plot)
    torch.manual_seed(opt.seed)
    if opt.threads:
        torch.set_num_threads(opt.threads)
    if opt.tgt and same_stream(opt.src, opt.tgt):
        stream = "standard input" if same_stream(opt.src, STDIN) else "the stream both name"
        raise UserError(f"-src {opt.src} and -tgt {opt.tgt}: only one of them can read {stream}")
    # a first pass checks and counts the lines before the model loads; the second translates them
    src_lines = line_passes(opt.src)
    total = sum(1 for _ in src_lines())
    for note in idle_translation_options(opt):
        logger.warning(note)
    translator = Translator.from_opt(opt)
    summary = Summary(opt)
    with StagedOutputs() as staged:  # every output appears at the end, or none does
        write = staged.open_text(output)
        plots = staged.stage_directory(opt.attn_plot) if opt.attn_plot else None
        beams = translate_pieces(opt, src_lines, translator, summary, write, plots, total)
        if opt.dump_beam:
            staged.open_text(opt.dump_beam)(dump_text(beams))
        staged.commit()
    summary.log()
    return summary


def translate_pieces(
    opt,
    src_lines: Callable[[], Iterator[tuple[int, str]]],
    translator: Translator,
    summary: "Summary",
    write: Callable[[str], None],
    plots: str | None,
    total: int,
) -> list:
    """Translate -src (a pass of ``src_lines``) piece by piece (-shard_size), writing the output
    lines with ``write`` and the attention plots into ``plots``; returns the beam dumps of all lines
    (with -dump_beam)."""
    beams = []
    # what is alive now (models, vocabularies, the interpreter's own objects) outlives the decoding:
    # frozen, Python's cycle collector does not walk it again and again meanwhile
    gc.freeze()
    try:
        with Progress(total, "lines", "translate") as progress:
            for first, sources, targets in pieces(src_lines, opt.tgt, opt.shard_size):
                start = time.time()
                results = translator.translate(
                    sources, targets, progress.update, where=(opt.src, first + 1)
                )
                summary.elapsed += time.time() - start
                write(
                    "".join(
                        line + "\n" for r in results for line in output_lines(r, opt.report_align)
                    )
                )
                if plots is not None:
                    write_attention_plots(results, plots, first + 1)
                summary.add(results, targets, first)
                beams += [r.beam for r in results] if opt.dump_beam else []
    finally:
        gc.unfreeze()
    return beams


class Summary:
    """What the command logs of its translations, gathered piece by piece: per-line logs as they
    come (-verbose, -attn_debug), then the scores, BLEU and chrF against -tgt, and the speed."""

    def __init__(self, opt):
        self.opt = opt
        self.elapsed = 0.0
        self.lines = 0
        self.pred_total = 0.0
        self.gold_total = 0.0
        self.pred_words = 0
        self.gold_words = 0
        self.hypotheses = []
        self.references = []

    def add(self, results, targets, first):
        opt = self.opt
        for i, result in enumerate(results, first + 1):
            if result.source:  # empty lines are not decoded
                self.pred_total += result.log_probs[0]
                self.pred_words += len(result.tokens[0]) + 1  # words and </s>
            if opt.verbose:
                logger.info(f"SENT {i}: {result.source}")
                for hyp, score in zip(result.hypotheses, result.scores):
                    logger.info(f"PRED {i}: {hyp}\nPRED SCORE: {score:.4f}")
                if result.gold_score is not None:
                    logger.info(
                        f"GOLD {i}: {targets[i - first - 1].strip()}\nGOLD SCORE: "
                        f"{result.gold_score:.4f}"
                    )
            if opt.attn_debug and result.attention[0] is not None:
                rows = "\n".join(
                    f"{w}\t" + " ".join(f"{a:.2f}" for a in row[: len(result.source)].tolist())
                    for w, row in zip(result.tokens[0] + ["</s>"], result.attention[0])
                )
                logger.info(f"ATTENTION {i} ({' '.join(result.source)}):\n{rows}")
            if opt.align_debug and result.alignment[0] is not None:
                rows = "\n".join(
                    f"{w}\t" + " ".join(f"{a:.2f}" for a in row.tolist())
                    for w, row in zip(result.tokens[0], result.alignment[0])
                )
                logger.info(f"ALIGNMENT {i} ({' '.join(result.source)}):\n{rows}")
        self.lines += len(results)
        if targets is not None:
            self.gold_total += sum(r.gold_score or 0.0 for r in results)
            self.gold_words += sum(r.gold_words for r in results)
            self.hypotheses += [r.hypotheses[0] for r in results]
            self.references += [t.strip() for t in targets]

    def log(self):
        log_scores("PRED", self.pred_total, self.pred_words)
        if self.opt.tgt:
            log_scores("GOLD", self.gold_total, self.gold_words)
        if self.opt.tgt and not self.opt.tgt_prefix:  # prefixes are no references
            scores = corpus_scores(("BLEU", "chrF"), self.hypotheses, [self.references])
            logger.info("; ".join(str(score) for score in scores))
        if self.opt.report_time:
            elapsed = max(self.elapsed, 1e-9)
            logger.info(
                f"translated {self.lines} lines in {self.elapsed:.2f} s: "
                f"{self.lines / elapsed:.1f} sentences/s, {self.pred_words / elapsed:.1f} tokens/s"
            )
