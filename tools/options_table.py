#!/usr/bin/env python
"""Write docs/options.md: the table of OpenNMT-py 1.x options and their status in onmt_lite.

    python tools/options_table.py -output docs/options.md

``onmt_lite/opts/opennmt_py_1x_options.txt`` lists every option of OpenNMT-py 1.x's
``preprocess.py``, ``train.py`` and ``translate.py``. The status of each is derived from onmt_lite's
own parser of the same command (built with the option groups of ``onmt_lite/bin/*.py``):

- **same**: the parser accepts the option (a few words from ``NOTES`` may follow);
- **changed**: the parser accepts it, but it behaves differently: ``CHANGED`` below says how;
- **not supported**: the parser refuses it by name; the note is its reason in
  ``UNSUPPORTED_OPTIONS`` (``onmt_lite/opts/parser.py``), the same text the command prints;
- **new**: an option of the onmt_lite command that 1.x's command lacks, with its help text.

A 1.x option that onmt_lite neither accepts nor lists in ``UNSUPPORTED_OPTIONS``, or an entry of
``CHANGED``/``NOTES`` that names no accepted 1.x option, is an error (exit status 2) naming them.

With ``-output FILE`` the whole page (a title, a line on how it is made, then the tables) is written
to FILE, unless FILE already holds it; ``tests/unit/test_options_table.py`` fails while
``docs/options.md`` differs from it. With ``-readme FILE`` the tables alone replace the text between
the lines ``<!-- options-table:begin -->`` and ``<!-- options-table:end -->`` of FILE. With neither,
the page is printed.
"""

from __future__ import annotations

import collections
import os
import sys

from onmt_lite.opts import (
    UNSUPPORTED_OPTIONS,
    OptionParser,
    add,
    config_opts,
    model_opts,
    parse,
    preprocess_opts,
    train_opts,
    translate_opts,
)
from onmt_lite.opts import build_parser as build_command_parser
from onmt_lite.opts.opennmt_py_1x import REFERENCE, read_reference
from onmt_lite.utils.errors import UserError, run_command
from onmt_lite.utils.files import write_text
from onmt_lite.utils.output_paths import require_file_path

PROG = "options_table.py"
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join(REPO, "docs", "options.md")  # the page -output writes, in this checkout
TITLE = "# OpenNMT-py 1.x options in onmt_lite"
BEGIN = "<!-- options-table:begin -->"
END = "<!-- options-table:end -->"

# command: (onmt_lite command, its option groups as in onmt_lite/bin/*.py, the OpenNMT-py 1.x
# script)
COMMANDS = {
    "preprocess": ("onmt_lite_preprocess", (config_opts, preprocess_opts), "preprocess.py"),
    "train": ("onmt_lite_train", (config_opts, model_opts, train_opts), "train.py"),
    "translate": ("onmt_lite_translate", (config_opts, translate_opts), "translate.py"),
}

# 1.x options that onmt_lite accepts but that behave differently, and how. A key is an option name
# (for every command that accepts it) or "command:name" (for that command only, tried first).
CHANGED = {
    "brnn": "sets `-encoder_type brnn` (1.2.0 refused the deprecated flag)",
    "feat_vec_exponent": "N, a feature's vocabulary size, counts its four specials `<unk> <blank> "
    "<s> </s>` (1.x's feature vocabularies had `<unk> <blank>`), as every "
    "onmt_lite vocabulary",
    "features_vocabs_prefix": "feature i's vocabulary is read from PREFIX.source_feature_i.dict "
    "(i from 1; Lua OpenNMT's names), one word a line as -src_vocab "
    "(1.x declared it and never read it)",
    "exp": "names the TensorBoard run: scalars go to -tensorboard_log_dir/EXP (1.x declared it "
    "for Crayon and never read it)",
    "batch_size_multiple": "default 1 (1.x: 8 with `-model_dtype fp16`); a batch that cannot hold "
    "that many sentences is kept (1.x dropped it)",
    "max_sent_length": "the same as `-max_length` (1.2.0 refused the deprecated flag)",
    "translate:shard_size": "default 0, the whole file at once (1.x: 10,000 lines)",
    "translate:ratio": "1.x's early stop, with each example's own source length and steps (1.x "
    "read another example's length for all but a batch's first, and checked at any beam's end in "
    "the batch) and a stop at least as early where no live beam can change the n-best list (the "
    "same outputs); onmt_lite's `-ratio` was until 2026-11-29 what is now `-max_length_ratio`",
    "translate:batch_size": "default 30 on the CPU as in 1.x; with -gpu 256 sentences (8,192 "
    "tokens with -batch_type tokens)",
    "epochs": "stops after N passes over the data (1.2.0 refused the deprecated option)",
    "src_noise": "sen_shuffling and infilling (1.x's mask never ran on batches: refused); each "
    "batch's noise is drawn from a generator seeded by its place in its corpus; "
    "refused with `-copy_attn`",
    "data_to_noise": "needs `-src_noise` and the reverse (1.x noised nothing then); ids of this "
    "run's `-data_ids`",
    "subword_prefix": "used by `-src_noise infilling` only, which is refused when no source word "
    "has the prefix (word tokens: `-subword_prefix ''`)",
    "num_threads": "processes tokenize and numericalise chunks of lines side by side, the output "
    "the same as one process's (1.x: built that many shards side by side)",
    "gpu_verbose_level": "1 or more: every training process logs to the console, its rank first "
    "(1.x: more per-GPU log lines)",
    "gpuid": "accepted without a value, as 1.x accepted it (1.x refused any value: deprecated, "
    "use -gpu_ranks)",
    "max_shard_size": "accepted as 0, its default, as 1.x accepted it (1.x refused any other "
    "value: deprecated, use -shard_size)",
    "loss_scale": "accepted as 0, its default: dynamic scaling, which `-model_dtype fp16` does "
    "(1.x's apex); a fixed scale is refused",
    "apex_opt_level": "accepted as O1, its default: float32 weights, operations cast to float16, "
    "which `-model_dtype fp16` does (1.x's apex); O0, O2 and O3 are refused",
    "queue_size": "accepted, no effect: each training process reads its own batches (1.x: one "
    "producer filled a queue for all)",
    "tgt_prefix": "BLEU and chrF against the prefixes are not logged; a prefix longer than "
    "-max_length is output whole; a copy model copies a prefix word that only the "
    "source has (docs/usage.md)",
    "dump_beam": "one JSON object per input line, in input order, with the tokens as strings and "
    "where each n-best hypothesis ended; dead places are null (docs/usage.md)",
    # preprocess
    "data_type": "only `text`; `img`, `audio` and `vec` are refused",
    "train_ids": "an id is letters, digits, `-` and `_` (it names the shard files "
    "`PREFIX.train_ID.N.pt`)",
    "src_vocab": "a word list, or an earlier run's PREFIX.vocab.pt (onmt_lite's or 1.x's), whose "
    "vocabularies are all taken as they are (as 1.x)",
    "tgt_vocab": "a word list only (as 1.x); idle when -src_vocab names an earlier run's "
    "PREFIX.vocab.pt",
    "shuffle": "1 shuffles the training examples with -seed before they are written (no effect in "
    "1.x)",
    "train_align": "a malformed line or an index outside its sentence pair is an error naming the "
    "file and line; truncation drops the links it cuts off; refused with "
    "-src_spm/-tgt_spm",
    "valid_align": "checked and stored as -train_align; validation reports the NLL alone (1.x "
    "added the alignment loss to it)",
    # model
    "model_type": "only `text`; `img`, `audio` and `vec` are refused",
    "encoder_type": "`rnn`, `brnn`, `mean` (needs -src_word_vec_size equal to -rnn_size), "
    "`transformer` (an RNN decoder starts from the mean of its output) or `cnn` (with a CNN "
    "decoder only: 1.x also paired it with a Transformer decoder; padding is zeros in every "
    "convolution, where 1.x convolved the padding's embeddings); `ggnn` is refused",
    "decoder_type": "`rnn`, `transformer` or `cnn` (with a CNN encoder only; its attention masks "
    "the source's padding, which 1.x's did not; no copy attention, coverage or -bridge, as in "
    "1.x); a CNN translates with its weights, where 1.x read Polyak averages of them that its "
    "training and translation updated at every call",
    "cnn_kernel_width": "odd (1.x's CNN encoder failed with an even width)",
    "self_attn_type": "adds OpenNMT-py 3.x's `scaled-dot-flash` (attention dropout on the fused "
    "kernel on a GPU); `average`, a Transformer decoder's, as in 1.x (OpenNMT-py 3.5.1's "
    "onmt_translate needs `-self_attn_type average` for such a model; CTranslate2 has none)",
    "position_encoding": "the source's embeddings and a Transformer decoder's; an RNN decoder's "
    "get none (1.x added them in training but gave every translation step "
    "position 0)",
    "copy_attn": "a Transformer decoder copies with its top layer's source attention averaged "
    "over the heads (1.x: the first head's)",
    "rnn_type": "`LSTM` or `GRU`; `SRU` is refused",
    "global_attention": "`none` (RNN decoders only) refuses the options that need attention: copy "
    "and coverage attention, and in translation -replace_unk, -attn_debug, "
    "-attn_plot and -coverage_penalty (1.x ignored -global_attention with a "
    "Transformer decoder)",
    "global_attention_function": "RNN decoders only (refused with a Transformer decoder, where "
    "1.x ignored it)",
    "generator_function": "`sparsemax` is refused with -copy_attn and -label_smoothing (1.x "
    "smoothed the log of sparsemax, infinite); the logged perplexity is exp "
    "of the sparsemax loss",
    "context_gate": "RNN decoders only (refused with a Transformer decoder, where 1.x ignored it)",
    "copy_attn_type": "`dot`, `general` or `mlp` (default: as -global_attention); "
    "`none` is refused",
    "lambda_align": "the logged xent and perplexity are the NLL's, without the alignment term "
    "(1.x added it); also with copy attention; refused without -train_align data "
    "or a Transformer decoder",
    "alignment_layer": "a layer the decoder lacks is refused (with -lambda_align, or at "
    "-report_align) where 1.x failed with an IndexError",
    "alignment_heads": "more than -heads is refused (1.x then averaged all heads)",
    "full_context_alignment": "only the alignment layer runs a second time (1.x ran every layer "
    "twice and kept one); the same alignment",
    # train
    "data_weights": "mixes batches, not examples: a round robin of WEIGHT whole batches from each "
    "corpus in turn, each batch from one corpus (1.x drew WEIGHT examples from "
    "each corpus in turn into shared batches); one weight per -data_ids corpus",
    "data_ids": "several corpora cannot be combined with -single_pass or -epochs (each corpus "
    "starts its next epoch on its own)",
    "gpu_ranks": "the devices of this machine's processes, as many as -world_size (several "
    "machines: torchrun)",
    "world_size": "also on CPUs (gloo processes, no -gpu_ranks); under torchrun, torchrun's count",
    "gpu_backend": "default `auto`: `nccl` on CUDA devices, `gloo` on CPUs (1.x: always `nccl`)",
    "optim": "adds `adamw`; `fusedadam` (apex's in 1.x) is Adam with apex's epsilon, 1e-8, "
    "on every device; `adafactor` is 1.x's (its betas 0.9 and 0.999, no weight decay) and reads "
    "nothing on the host; `sparseadam` gives the word and feature embeddings' tables (1.x: "
    "every parameter named `embed`) sparse gradients and SparseAdam, and is refused with "
    "-share_decoder_embeddings (1.x failed there), several processes and -cuda_graphs",
    "decay_method": "adds `plateau` (decay when validation stops improving)",
    "early_stopping_criteria": "also `BLEU` and `chrF` (with -valid_metrics); the first criterion "
    "also picks SAVE_MODEL_best.pt",
    "model_dtype": "adds `bf16` (mixed precision that runs on CPUs); `fp16` needs a CUDA device "
    "and keeps loss sharding on (1.x switched it off under fp16)",
    "label_smoothing": "also applied to copy models (1.x ignores it there); the logged loss and "
    "perplexity stay the unsmoothed NLL (1.x logs the smoothed loss)",
    "average_decay": "the checkpoint also keeps the raw weights, and `-train_from` trains on from "
    "them with the average continued (1.x kept only the average, trained on from "
    "it and started a new one)",
    "average_every": "counts the steps from the first of the whole training, so a resumed run "
    "averages at the steps the uninterrupted one does (1.x counted from the "
    "first step of each run)",
    # translate
    "report_align": "every hypothesis is teacher-forced over `<s> w1 .. wn` (1.x also fed `</s>` "
    "to the shorter ones of a batch); ensembles average their alignment heads; "
    "refused with sentencepiece models (the pairs would count pieces)",
    "align_debug": "also without -report_align (1.x needed it)",
}

# A few words on options that are the same.
NOTES = {
    "train:seed": "-1 draws a seed and logs it",
    "translate:tgt": "also logs BLEU and chrF",
    "translate:model": "several make an ensemble",
    "translate:dynamic_dict": "accepted; not needed (copy models always build their source "
    "vocabularies)",
    "translate:share_vocab": "accepted; not needed (the vocabularies come from the model)",
}


def build_parser():
    """The option parser of options_table.py."""
    parser = OptionParser(
        PROG, "Write the table of OpenNMT-py 1.x options and their status in onmt_lite."
    )
    group = parser.add_argument_group("Table")
    add(
        group,
        "reference",
        default="",
        help="The list of OpenNMT-py 1.x options, one 'COMMAND NAME' a line "
        "(default: onmt_lite/opts/opennmt_py_1x_options.txt)",
    )
    add(
        group,
        "output",
        default="",
        help="Write the whole page to this file (this checkout's is docs/options.md)",
    )
    add(
        group,
        "readme",
        default="",
        help=f"Replace the text between the lines {BEGIN} and {END} of this file with the tables "
        "(without the page's title)",
    )
    return parser


def command_parser(command):
    """onmt_lite's option parser of ``command`` (preprocess, train or translate)."""
    prog, groups, _ = COMMANDS[command]
    return build_command_parser(prog, list(groups))


def option_actions(parser):
    """``{name: argparse action}`` of every ``-name`` the parser accepts (not ``-h``), in parser
    order."""
    actions = {}
    for action in parser._actions:
        for string in action.option_strings:
            if not string.startswith("--") and string != "-h":
                actions[string[1:]] = action
    return actions


def _lookup(table, command, name):
    """``(key, text)`` of the entry of ``table`` for ``name`` in ``command``, or
    ``(None, None)``."""
    for key in (f"{command}:{name}", name):
        if key in table:
            return key, table[key]
    return None, None


def _one_line(text):
    return " ".join(str(text or "").split())


def command_rows(command, names):
    """``(rows, unknown, used)`` for one command: rows ``(option, status, note)``, the 1.x options
    that onmt_lite neither accepts nor refuses by name, and the CHANGED/NOTES keys used."""
    actions = option_actions(command_parser(command))
    rows = []
    unknown = []
    used = set()
    for name in names:
        if name in actions:
            key, changed = _lookup(CHANGED, command, name)
            if changed:
                used.add(("CHANGED", key))
                rows.append((f"-{name}", "changed", changed))
                continue
            key, note = _lookup(NOTES, command, name)
            if note:
                used.add(("NOTES", key))
            rows.append((f"-{name}", "same", note or ""))
        elif name in UNSUPPORTED_OPTIONS:
            rows.append((f"-{name}", "not supported", UNSUPPORTED_OPTIONS[name]))
        else:
            unknown.append(name)
    listed = set(names)
    for name, action in actions.items():
        if name in listed:
            continue
        aliases = [
            s[1:]
            for s in action.option_strings
            if not s.startswith("--") and s != f"-{name}" and s[1:] in listed
        ]
        note = f"another spelling of -{aliases[0]}" if aliases else _one_line(action.help)
        rows.append((f"-{name}", "new", note))
    return rows, unknown, used


def table_rows(reference):
    """``{command: rows}`` for every command; a UserError if an option is unaccounted for."""
    tables = {}
    unknown = []
    used = set()
    for command, names in reference.items():
        rows, missing, keys = command_rows(command, names)
        tables[command] = rows
        unknown += [f"{command} -{name}" for name in missing]
        used |= keys
    if unknown:
        raise UserError(
            f"{len(unknown)} OpenNMT-py 1.x option(s) are neither accepted by onmt_lite nor "
            f"refused by name (add them to UNSUPPORTED_OPTIONS in onmt_lite/opts/parser.py "
            f"with the reason): {', '.join(unknown)}"
        )
    stale = [
        f"{kind}[{key!r}]"
        for kind, table in (("CHANGED", CHANGED), ("NOTES", NOTES))
        for key in table
        if (kind, key) not in used
    ]
    if stale:
        raise UserError(
            f"these entries of {PROG} name no OpenNMT-py 1.x option that onmt_lite accepts: "
            f"{', '.join(stale)}"
        )
    return tables


def _cell(text):
    return text.replace("|", "\\|")


def render(reference):
    """The markdown tables (every command) for the 1.x option list ``reference``."""
    tables = table_rows(reference)
    counts = {
        command: collections.Counter(status for _, status, _ in rows)
        for command, rows in tables.items()
    }
    out = [
        f"Generated by `tools/{PROG}` from `onmt_lite/opts/opennmt_py_1x_options.txt` (every "
        "option of OpenNMT-py 1.2.0, the last 1.x release) and onmt_lite's own option parsers. "
        "**same**: accepted with the same meaning; **changed**: accepted, but it behaves "
        "differently (the note says how); **not supported**: refused by name, with the reason "
        "shown, and exit status 2; **new**: onmt_lite only. Every option is also spelled "
        "`--name`. onmt_lite reads and writes its own data and checkpoint files, not OpenNMT-py's.",
        "",
        "| command | 1.x options | same | changed | not supported | new in onmt_lite |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for command, (prog, _, script) in COMMANDS.items():
        c = counts[command]
        out.append(
            f"| `{prog}` (1.x `{script}`) | {len(reference[command])} | {c['same']} | "
            f"{c['changed']} | {c['not supported']} | {c['new']} |"
        )
    for command, (prog, _, script) in COMMANDS.items():
        out += [
            "",
            f"### `{prog}` (OpenNMT-py 1.x `{script}`)",
            "",
            "| option | status | note |",
            "| --- | --- | --- |",
        ]
        out += [
            f"| `{option}` | {status} | {_cell(note)} |" for option, status, note in tables[command]
        ]
    return "\n".join(out) + "\n"


def page(reference):
    """The whole page docs/options.md: a title, one line on how it is made, then
    ``render(reference)``."""
    return (
        f"{TITLE}\n\nWhich options of OpenNMT-py 1.x each onmt_lite command accepts, changes, "
        "refuses or adds; after changing an option, regenerate this page with `python "
        f"tools/{PROG} -output docs/options.md` (`tests/unit/test_options_table.py` fails while it "
        "is out of date).\n\n" + render(reference)
    )


def _marker_line(lines, marker, path):
    found = [i for i, line in enumerate(lines) if line.strip() == marker]
    if len(found) != 1:
        raise UserError(f"{path}: expected one line {marker}, found {len(found)}")
    return found[0]


def readme_section(text, path="README"):
    """The text between the marker lines of ``text`` (a UserError naming ``path`` if they are
    missing)."""
    lines = text.splitlines(keepends=True)
    begin = _marker_line(lines, BEGIN, path)
    end = _marker_line(lines, END, path)
    if end < begin:
        raise UserError(f"{path}: the line {END} comes before {BEGIN}")
    return "".join(lines[begin + 1 : end])


def replace_section(text, table, path="README"):
    """``text`` with the section between its marker lines replaced by ``table`` (blank lines around
    it)."""
    readme_section(text, path)
    lines = text.splitlines(keepends=True)
    begin = _marker_line(lines, BEGIN, path)
    end = _marker_line(lines, END, path)
    if not lines[begin].endswith("\n"):
        lines[begin] += "\n"
    return "".join(lines[: begin + 1]) + "\n" + table + "\n" + "".join(lines[end:])


def _read_text(path):
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"{path}: cannot read ({getattr(err, 'strerror', None) or err})") from None


def _holds(path, text):
    """Whether the file at ``path`` exists and holds exactly ``text``."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read() == text
    except (OSError, UnicodeDecodeError):
        return False


@run_command(PROG)
def main(argv: list[str] | None = None) -> None:
    """Run options_table.py with ``argv`` (default: the command line)."""
    opt = parse(build_parser(), argv)
    if opt.output and opt.readme:
        raise UserError("give -output or -readme, not both")
    if opt.readme:
        text = _read_text(opt.readme)
        readme_section(text, opt.readme)  # the markers are checked before anything else is done
    reference = read_reference(opt.reference or REFERENCE)
    if opt.readme:
        updated = replace_section(text, render(reference), opt.readme)
        if updated == text:
            print(f"{opt.readme} is up to date")
        else:
            write_text(opt.readme, updated)
            print(f"updated the options table in {opt.readme}")
    elif opt.output:
        require_file_path(opt.output, "-output")
        text = page(reference)
        if _holds(opt.output, text):
            print(f"{opt.output} is up to date")
        else:
            write_text(opt.output, text)
            print(f"wrote the options page to {opt.output}")
    else:
        sys.stdout.write(page(reference))


if __name__ == "__main__":
    main()
