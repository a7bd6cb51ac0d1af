"""translate(opt): what ``onmt_lite_translate`` does: read, translate, write, score."""
import gc
import math
import time

import torch

from onmt_lite.translate.attn_plot import prepare_directory, write_attention_plots
from onmt_lite.translate.inputs import read_file_lines
from onmt_lite.translate.search import SearchOptions
from onmt_lite.translate.translator import Translator, decoding_rows, load_models
from onmt_lite.utils.errors import UserError
from onmt_lite.utils.files import write_text
from onmt_lite.utils.logging import logger
from onmt_lite.utils.progress import Progress


def search_options(opt, vocab):
    sampling = opt.random_sampling_topk != 1
    if opt.n_best > opt.beam_size:
        raise UserError(f"-n_best {opt.n_best} is larger than -beam_size {opt.beam_size}")
    if sampling and opt.beam_size > 1:
        raise UserError("random sampling (-random_sampling_topk other than 1) needs -beam_size 1")
    return SearchOptions(
        beam_size=opt.beam_size, n_best=opt.n_best, min_length=opt.min_length, max_length=opt.max_length,
        ratio=opt.ratio, length_penalty=opt.length_penalty, alpha=opt.alpha, coverage_penalty=opt.coverage_penalty,
        beta=opt.beta, stepwise_penalty=opt.stepwise_penalty, block_ngram_repeat=opt.block_ngram_repeat,
        ignore_when_blocking=tuple(vocab.lookup(w) for w in opt.ignore_when_blocking),
        sampling_topk=max(opt.random_sampling_topk, 0), sampling_temp=opt.random_sampling_temp, sampling=sampling,
        attention=bool(opt.replace_unk or opt.attn_debug or opt.attn_plot))  # else no use for it: not kept


def read_phrase_table(path):
    table = {}
    for lineno, line in enumerate(read_file_lines(path), 1):
        source, sep, target = line.rstrip("\n").partition("|||")
        if not sep:
            raise UserError(f"{path}:{lineno}: expected 'source|||target'")
        table[source.strip()] = target.strip()
    return table


def bleu_and_chrf(hypotheses, references):
    """Corpus BLEU and chrF (sacrebleu) with their signatures, as a log line."""
    from sacrebleu.metrics import BLEU, CHRF

    bleu, chrf = BLEU(), CHRF()
    bleu_score, chrf_score = bleu.corpus_score(hypotheses, [references]), chrf.corpus_score(hypotheses, [references])
    return (f"{bleu_score} (signature {bleu.get_signature()}); "
            f"{chrf_score} (signature {chrf.get_signature()})"), bleu_score.score, chrf_score.score


def log_scores(name, total, words):
    average = total / max(words, 1)
    logger.info(f"{name} AVG SCORE: {average:.4f}, {name} PPL: {math.exp(min(-average, 100)):.4f}")


def translate(opt):
    """Translate ``opt.src`` into ``opt.output``; returns the list of Results."""
    device = "cpu" if opt.gpu < 0 else f"cuda:{opt.gpu}"
    if opt.gpu >= 0 and not torch.cuda.is_available():
        raise UserError(f"-gpu {opt.gpu}: this machine has no CUDA device")
    if opt.attn_plot:
        prepare_directory(opt.attn_plot)
    torch.manual_seed(opt.seed)
    if opt.threads:
        torch.set_num_threads(opt.threads)
    sources = read_file_lines(opt.src)
    targets = read_file_lines(opt.tgt) if opt.tgt else None
    models, vocabs, preprocess = load_models(opt.model, torch.device(device), opt.quantize,
                                             decoding_rows(opt.batch_size, opt.batch_type, opt.beam_size))
    translator = Translator(models, vocabs, preprocess, search_options(opt, vocabs["tgt"]), opt.replace_unk,
                            read_phrase_table(opt.phrase_table) if opt.phrase_table else None, opt.batch_size,
                            opt.batch_type, opt.avg_raw_probs, opt.src_spm, opt.tgt_spm, device)
    # what is alive now (models, vocabularies, the interpreter's own objects) outlives the decoding:
    # frozen, Python's cycle collector does not walk it meanwhile (a full pass took 90 ms here, once
    # per 500 lines of beam search)
    gc.freeze()
    start = time.time()
    try:
        with Progress(len(sources), "lines", "translate") as progress:
            results = translator.translate(sources, targets, progress.update)
    finally:
        gc.unfreeze()
    elapsed = time.time() - start
    write_text(opt.output, "".join(h + "\n" for r in results for h in r.hypotheses))
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
        line, _, _ = bleu_and_chrf([r.hypotheses[0] for r in results], [t.strip() for t in targets])
        logger.info(line)
    if opt.report_time:
        logger.info(f"translated {len(results)} lines in {elapsed:.2f} s: {len(results) / max(elapsed, 1e-9):.1f} "
                    f"sentences/s, {pred_words / max(elapsed, 1e-9):.1f} tokens/s")
