"""From checkpoints and options to what a Translator is built of: the models (prepared for
decoding), the search's options, the phrase table; and the checks that the models can do what is
asked."""

from __future__ import annotations

from onmt_lite.data.vocab import vocabs_from_plain
from onmt_lite.models.checkpoint import load_checkpoint, model_from_checkpoint, model_options
from onmt_lite.opts import option_defaults, translate_opts
from onmt_lite.translate.fast_paths import prepare_model
from onmt_lite.translate.inputs import read_file_lines
from onmt_lite.translate.search import SearchOptions
from onmt_lite.utils.errors import UserError


def load_models(
    paths: list[str],
    device,
    quantize: str = "none",
    rows: tuple | None = None,
    precision: str = "fp32",
) -> tuple[list, dict, dict]:
    """Models and vocabularies of the checkpoints; an ensemble must share its vocabularies. Each
    model is prepared for decoding on ``device`` by ``fast_paths.prepare_model`` (int8 with
    ``quantize``, cast to ``precision``, else packed for ``rows`` on the CPU)."""
    models = []
    first = None
    for path in paths:
        checkpoint = load_checkpoint(path)
        if first is None:
            first = checkpoint
        elif checkpoint["vocab"] != first["vocab"]:
            raise UserError(
                f"{path}: its vocabularies differ from those of {paths[0]}; an ensemble needs one"
            )
        vocabs = vocabs_from_plain(checkpoint["vocab"])
        options = model_options(checkpoint["opt"], path)
        model = model_from_checkpoint(options, vocabs, checkpoint, path)
        models.append(prepare_model(model.to(device).eval(), device, quantize, rows, precision))
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
            raise UserError(
                f"-{reading[0]} needs the model's attention, but {name} was trained "
                "with -global_attention none"
            )


def attention_options(opt):
    """The options of ``onmt_lite_translate`` given in ``opt`` that read the models' attention."""
    asked = {
        "replace_unk": opt.replace_unk,
        "attn_debug": opt.attn_debug,
        "attn_plot": opt.attn_plot,
        "coverage_penalty": opt.coverage_penalty != "none",
    }
    return [name for name, given in asked.items() if given]


def search_options(opt, tgt_vocab):
    """The ``SearchOptions`` of ``onmt_lite_translate``'s options; contradictions are a
    UserError."""
    sampling = opt.random_sampling_topk != 1
    if opt.n_best > opt.beam_size:
        raise UserError(f"-n_best {opt.n_best} is larger than -beam_size {opt.beam_size}")
    if sampling and opt.beam_size > 1:
        raise UserError("random sampling (-random_sampling_topk other than 1) needs -beam_size 1")
    return SearchOptions(
        beam_size=opt.beam_size,
        n_best=opt.n_best,
        min_length=opt.min_length,
        max_length=opt.max_length,
        max_length_ratio=opt.max_length_ratio,
        ratio=opt.ratio,
        length_penalty=opt.length_penalty,
        alpha=opt.alpha,
        coverage_penalty=opt.coverage_penalty,
        beta=opt.beta,
        stepwise_penalty=opt.stepwise_penalty,
        block_ngram_repeat=opt.block_ngram_repeat,
        ignore_when_blocking=tuple(tgt_vocab.lookup(w) for w in opt.ignore_when_blocking),
        sampling_topk=max(opt.random_sampling_topk, 0),
        sampling_temp=opt.random_sampling_temp,
        sampling=sampling,
        # only these read it: else not kept
        attention=bool(opt.replace_unk or opt.attn_debug or opt.attn_plot),
    )


def idle_translation_options(opt) -> list[str]:
    """A line for each translation option in ``opt`` whose value another option's makes idle (the
    command and the server log them, once, before any model loads): a
    penalty's weight without the penalty or the penalty with a weight of 0 (1.x warned of those
    four), a coverage penalty at each step without one, n-grams ignored without blocking, a
    temperature or a seed without sampling, a phrase table without -replace_unk, an ensemble's
    averaging with one model, -ratio without a beam, a minimum length above the maximum."""
    coverage = "-coverage_penalty wu or summary"
    notes = []
    if opt.alpha != 0 and opt.length_penalty != "wu":
        notes.append(f"-alpha {opt.alpha} has no effect: only -length_penalty wu reads it")
    if opt.alpha == 0 and opt.length_penalty == "wu":
        notes.append("-length_penalty wu has no effect with -alpha 0 (its penalty is 1)")
    if opt.beta != 0 and opt.coverage_penalty == "none":
        notes.append(f"-beta {opt.beta} has no effect without {coverage}")
    if opt.beta == 0 and opt.coverage_penalty != "none":
        notes.append(f"-coverage_penalty {opt.coverage_penalty} has no effect with -beta 0")
    if opt.stepwise_penalty and opt.coverage_penalty == "none":
        notes.append(f"-stepwise_penalty has no effect without {coverage}")
    if opt.ignore_when_blocking and opt.block_ngram_repeat == 0:
        notes.append("-ignore_when_blocking has no effect without -block_ngram_repeat")
    if opt.random_sampling_temp != 1 and opt.random_sampling_topk == 1:
        notes.append(
            f"-random_sampling_temp {opt.random_sampling_temp} has no effect: "
            "-random_sampling_topk 1 is greedy search, not sampling"
        )
    if opt.phrase_table and not opt.replace_unk:
        notes.append(f"-phrase_table {opt.phrase_table} has no effect: only -replace_unk reads it")
    if opt.avg_raw_probs and len(opt.model) == 1:
        notes.append("-avg_raw_probs has no effect: -model gives one model, not an ensemble")
    if opt.seed != option_defaults([translate_opts])["seed"] and opt.random_sampling_topk == 1:
        notes.append(
            f"-seed {opt.seed} has no effect: only random sampling (-random_sampling_topk other "
            "than 1) draws"
        )
    if opt.ratio > 0 and opt.beam_size == 1:
        notes.append(
            f"-ratio {opt.ratio} has no effect with -beam_size 1: it stops a beam search "
            "(greedy search and sampling stop at </s>)"
        )
    if opt.min_length > opt.max_length:
        notes.append(
            f"-min_length {opt.min_length} is above -max_length {opt.max_length}: every output "
            "stops at -max_length, without </s>"
        )
    return notes


def read_phrase_table(path):
    """``{source word: target}`` from a file of ``source|||target`` lines (``-phrase_table``)."""
    table = {}
    for lineno, line in enumerate(read_file_lines(path), 1):
        source, sep, target = line.rstrip("\n").partition("|||")
        if not sep:
            raise UserError(f"{path}:{lineno}: expected 'source|||target'")
        table[source.strip()] = target.strip()
    return table
