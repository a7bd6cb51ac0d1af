"""translate(opt): what ``onmt_lite_translate`` does: read, translate, write, score."""
import gc
import math
import time

import torch

from onmt_lite.translate.attn_plot import prepare_directory, write_attention_plots
from onmt_lite.translate.inputs import read_file_lines
from onmt_lite.translate.translator import Translator
from onmt_lite.utils.files import require_file_path, write_text
from onmt_lite.utils.logging import logger
from onmt_lite.utils.metrics import corpus_scores
from onmt_lite.utils.progress import Progress


def log_scores(name, total, words):
    average = total / max(words, 1)
    logger.info(f"{name} AVG SCORE: {average:.4f}, {name} PPL: {math.exp(min(-average, 100)):.4f}")


def translate(opt):
    """Translate ``opt.src`` into ``opt.output``; returns the list of Results."""
    output = "/dev/stdout" if opt.output == "-" else opt.output  # either writes to file descriptor 1
    require_file_path(output, "-output")  # before any work: not a directory, in one that exists
    if opt.attn_plot:
        prepare_directory(opt.attn_plot)
    torch.manual_seed(opt.seed)
    if opt.threads:
        torch.set_num_threads(opt.threads)
    sources = read_file_lines(opt.src)
    targets = read_file_lines(opt.tgt) if opt.tgt else None
    translator = Translator.from_opt(opt)
    # what is alive now (models, vocabularies, the interpreter's own objects) outlives the decoding:
    # frozen, Python's cycle collector does not walk it again and again meanwhile
    gc.freeze()
    start = time.time()
    try:
        with Progress(len(sources), "lines", "translate") as progress:
            results = translator.translate(sources, targets, progress.update)
    finally:
        gc.unfreeze()
    elapsed = time.time() - start
    write_text(output, "".join(h + "\n" for r in results for h in r.hypotheses))
    if opt.attn_plot:
        write_attention_plots(results, opt.attn_plot)
    report(opt, results, sources, targets, elapsed)
    return results


def report(opt, results, sources, targets, elapsed):
    translated = [r for r in results if r.source]  # empty lines are not decoded
    pred_total = sum(r.log_probs[0] for r in translated)
    pred_words = sum(len(r.tokens[0]) + 1 for r in translated)  # words and </s>
    for i, result in enumerate(results):
        if opt.verbose:
            logger.info(f"SENT {i + 1}: {result.source}")
            for hyp, score in zip(result.hypotheses, result.scores):
                logger.info(f"PRED {i + 1}: {hyp}\nPRED SCORE: {score:.4f}")
            if result.gold_score is not None:
                logger.info(f"GOLD {i + 1}: {targets[i].strip()}\nGOLD SCORE: {result.gold_score:.4f}")
        if opt.attn_debug and result.attention[0] is not None:
            rows = "\n".join(f"{w}\t" + " ".join(f"{a:.2f}" for a in row[: len(result.source)].tolist())
                             for w, row in zip(result.tokens[0] + ["</s>"], result.attention[0]))
            logger.info(f"ATTENTION {i + 1} ({' '.join(result.source)}):\n{rows}")
    log_scores("PRED", pred_total, pred_words)
    if targets is not None:
        log_scores("GOLD", sum(r.gold_score or 0.0 for r in results), sum(r.gold_words for r in results))
        scores = corpus_scores(("BLEU", "chrF"), [r.hypotheses[0] for r in results], [[t.strip() for t in targets]])
        logger.info("; ".join(str(score) for score in scores))
    if opt.report_time:
        logger.info(f"translated {len(results)} lines in {elapsed:.2f} s: {len(results) / max(elapsed, 1e-9):.1f} "
                    f"sentences/s, {pred_words / max(elapsed, 1e-9):.1f} tokens/s")
