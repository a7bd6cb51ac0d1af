"""Translation speed, onmt_lite against OpenNMT-py 3.5.1, and onmt_lite's int8 against its float32.

    .venv/bin/python bench/translate_speed.py [-rounds 2] [-lines 500] [-threads N] \
        [-src FILE [-tgt FILE]]
        [-only 'no copy'|copy|g2p|transformer|transformer_same_weights [-lite_model PATH]
         [-peer_template PATH]]

Models: the toy-ende checkpoints that ``bench/quality.sh ende`` trains for each toolkit with the
same settings and the same number of steps (1,000), without and with copy attention; they are
trained first when missing. ``-only transformer`` (issue 32; not run without -only) decodes the
small Transformers of ``bench/quality.sh ende -model transformer`` instead, each toolkit's trained
with the same settings (quality.py's ``TRANSFORMER``) for the same wall-clock time
(``-train_minutes`` when they are missing, default 10: a short training, far from converged;
sentences/s depends on how long the outputs are, generated tokens/s less). Input: the first
``-lines`` lines of src-val.txt, batch 32, beam 5 and greedy, the machine's default thread count (2
here) for both, and the same search for both: onmt_lite's defaults (no length penalty, at most 100
tokens), given to OpenNMT-py explicitly, since its 3.x defaults are another search (an average
length penalty, outputs cut at 1.25 x the batch's longest source + 5). OpenNMT-py also runs with its
own defaults, for reference. Each round runs onmt_lite, onmt_lite with ``-quantize int8``,
OpenNMT-py and OpenNMT-py with its defaults one after the other (A B C D A B C D); a run's time is
the decoding time its toolkit reports with ``-report_time`` (model loading excluded), and the table
quotes the
medians: sentences/s, generated tokens/s (words of the output plus the end of each sentence), the
ratios of the medians and the medians of the ratios within each round, and BLEU of each output
against tgt-val.txt, with the float32 matrix-multiply rate measured before each round (this VM's
speed drifts, and not alike for both toolkits). int8 is also scored where accuracy means
something: exact match on g2p-sr's src.valid with the g2p model of ``bench/quality.sh g2p``.
Each RNN row also gives the least time onmt_lite's matrix products take at the machine's float32
rate (``bench/decoding_floor.py``: the rows and source tokens of the same search, counted, times
the model's weight shapes), the fraction of that limit onmt_lite reaches, and the fraction that 2x
OpenNMT-py's sentences/s would need (decoding_floor.py counts an RNN's products, not a
Transformer's).
``-only transformer_same_weights`` (not run without -only) decodes ONE model with both toolkits:
an onmt_lite checkpoint (``-lite_model``, default the newest Transformer of ``-only transformer``;
any model onmt_lite_convert writes for OpenNMT-py, a CNN say: the row says which, ``layers``)
and that checkpoint converted by onmt_lite_convert -to opennmt-py into an OpenNMT-py 3.5.1
checkpoint of the same weights and vocabularies (``-peer_template``, an OpenNMT-py checkpoint the
conversion once took its options from, is no longer read; it is recorded with the figures). Two
models trained apart write outputs of different lengths, so only this setting's sentences/s
compare the toolkits' decoding; their float32 outputs must be identical (the number of lines
that differ is printed and kept). Rounds of onmt_lite,
onmt_lite int8 and OpenNMT-py with the same search (A B C A B C); ``-src``/``-tgt`` give other lines
to decode and their references (a g2p Transformer's src.valid, say; no -tgt: no BLEU).
``-threads N`` sets OMP_NUM_THREADS and MKL_NUM_THREADS for both toolkits and for the
matrix-multiply probe (default: unset, the machine's default).
Figures go to bench/results/translate_speed.json (with ``-only``, the other figures there are kept),
each row with the CPU it was measured on.
"""

import argparse
import glob
import json
import os
import re
import statistics
import subprocess
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from quality import (  # noqa: E402
    LITE_BIN,
    PEER_ENV,
    PEER_TRANSLATE_WITH_COPY_DATA,
    REPAIR_PEER_COPY_CHECKPOINT,
    SHARED,
    machine,
    newest_checkpoint,
    normalised_copy,
    read_results,
    results_path,
    run,
    write_results,
)
from roofline import matmul_rate  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# setting: (quality.py's work directory of its models, the step of the checkpoints wanted ("*": the
# newest), quality.py's arguments that train them)
MODELS = {
    "no copy": ("ende/no_copy_BLEU_beam_5", "1000", ["ende", "-only", "nocopy"]),
    "copy": ("ende/copy_attn_BLEU_beam_5", "1000", ["ende", "-only", "copy"]),
    "transformer": ("ende/transformer_BLEU_beam_5", "*", ["ende", "-model", "transformer"]),
}
SAME_WEIGHTS = (
    "transformer_same_weights"  # -only transformer's onmt_lite model, decoded by both toolkits
)
MODELS[SAME_WEIGHTS] = MODELS["transformer"]
OPT_IN = ("transformer", SAME_WEIGHTS)  # measured only when named with -only
MODES = {"beam 5": 5, "greedy": 1}
LITE_TIME = re.compile(r"translated (\d+) lines in ([\d.]+) s")
PEER_TIME = re.compile(r"Average translation time \(ms\): ([\d.]+)")
# the same search for both toolkits: onmt_lite's defaults (OpenNMT-py 1.x's), which OpenNMT-py 3.5.1
# changed to an average length penalty (alpha 1) and outputs cut at 1.25 x the batch's longest
# source + 5
# decoding_floor.py's too
SEARCH_OPTIONS = {
    "length_penalty": "none",
    "alpha": 0.0,
    "max_length": 100,
}
SEARCH = [arg for name, value in SEARCH_OPTIONS.items() for arg in (f"-{name}", value)]
PEER_SEARCH = ["-max_length_ratio", 0]
PEER_DEFAULTS = (
    "OpenNMT-py defaults"  # the peer with its own defaults, a different search: for reference
)
TOOLKITS = ("onmt_lite", "onmt_lite int8", "OpenNMT-py", PEER_DEFAULTS)
# the same model and the same search: the peer's defaults search another
SAME_WEIGHTS_TOOLKITS = TOOLKITS[:3]


def ensure_models(quality_work, setting, train_minutes=10.0):
    """The onmt_lite and OpenNMT-py checkpoints of ``setting``, trained by quality.py when missing
    (the Transformers for ``train_minutes`` each)."""
    directory, step, quality_args = MODELS[setting]
    work = os.path.join(quality_work, directory)
    pattern = {
        "onmt_lite": f"{work}/lite_model_step_*.pt",
        "OpenNMT-py": f"{work}/peer_model_step_*.pt",
    }
    if not all(glob.glob(p.replace("*", step)) for p in pattern.values()):
        minutes = ["-minutes", str(train_minutes)] if "transformer" in quality_args else []
        subprocess.run(
            [
                sys.executable,
                os.path.join(REPO, "bench", "quality.py"),
                *quality_args,
                *minutes,
                "-work",
                quality_work,
            ],
            check=True,
        )
    return {toolkit: newest_checkpoint(p)[0] for toolkit, p in pattern.items()}


def decode_seconds(toolkit, log, n_lines):
    with open(log, encoding="utf-8", errors="replace") as f:
        text = f.read()
    if toolkit.startswith("OpenNMT-py"):
        found = PEER_TIME.findall(text)
        if not found:
            raise SystemExit(f"{log}: no 'Average translation time' line")
        return float(found[-1]) * n_lines / 1000
    found = LITE_TIME.findall(text)
    if not found:
        raise SystemExit(f"{log}: no 'translated N lines in S s' line")
    return float(found[-1][1])


def translate(toolkit, model, src, out, beam, peer, log):
    common = [
        "-model",
        model,
        "-src",
        src,
        "-output",
        out,
        "-beam_size",
        beam,
        "-batch_size",
        32,
        "-report_time",
    ]
    if toolkit.startswith("OpenNMT-py"):
        command = [f"{peer}/bin/python", "-c", PEER_TRANSLATE_WITH_COPY_DATA, *common] + (
            [] if toolkit == PEER_DEFAULTS else SEARCH + PEER_SEARCH
        )
    else:
        command = (
            [f"{LITE_BIN}/onmt_lite_translate", *common]
            + (["-quantize", "int8"] if toolkit == "onmt_lite int8" else [])
            + SEARCH
        )
    run(command, log)
    with open(out, encoding="utf-8") as f:
        hyps = [" ".join(line.split()) for line in f]
    return hyps


def bleu(hyps, refs):
    from sacrebleu.metrics import BLEU

    # toy-ende is tokenized: no warning about it
    return BLEU(force=True).corpus_score(hyps, [refs]).score


def measure(
    models, src, refs, beam, rounds, work, peer, tag, toolkits=TOOLKITS, same_weights=False
):
    """Medians over ``rounds`` of each toolkit's decoding speed; BLEU of the (deterministic) output.
    ``same_weights``: both toolkits decode one model; count the lines where their outputs differ."""
    runs = {toolkit: [] for toolkit in toolkits}
    scores = {}
    host_rates = []
    differ = []
    int8_differ = []
    for r in range(rounds):
        # the host's float32 rate before each round: this VM's second core comes and goes, which
        # moves onmt_lite (bound by the products) more than OpenNMT-py (bound by Python)
        host_rates.append(matmul_rate(1024, 3) / 1e9)
        outputs = {}
        for toolkit in runs:
            name = re.sub(r"\W+", "_", f"{toolkit}_{tag}_{r}")
            model = models["onmt_lite" if toolkit.startswith("onmt_lite") else "OpenNMT-py"]
            hyps = translate(
                toolkit, model, src, f"{work}/{name}.pred", beam, peer, f"{work}/{name}.log"
            )
            seconds = decode_seconds(toolkit, f"{work}/{name}.log", len(hyps))
            words = sum(len(h.split()) + 1 for h in hyps)
            runs[toolkit].append(
                {"seconds": seconds, "sents_s": len(hyps) / seconds, "tok_s": words / seconds}
            )
            scores[toolkit] = bleu(hyps, refs) if refs is not None else None
            outputs[toolkit] = hyps
        if same_weights:
            differ.append(lines_differ(outputs["onmt_lite"], outputs["OpenNMT-py"]))
            int8_differ.append(lines_differ(outputs["onmt_lite int8"], outputs["onmt_lite"]))
    row = {"host_gflops": host_rates}
    for toolkit, values in runs.items():
        row[toolkit] = {
            "sents_s": statistics.median(v["sents_s"] for v in values),
            "tok_s": statistics.median(v["tok_s"] for v in values),
            "bleu": scores[toolkit],
            "runs": values,
        }
    row["speed_ratio"] = row["onmt_lite"]["sents_s"] / row["OpenNMT-py"]["sents_s"]
    row["int8_speedup"] = row["onmt_lite int8"]["sents_s"] / row["onmt_lite"]["sents_s"]
    # the same ratios within each round (runs minutes apart share this VM's slow and fast phases
    # less)
    row["speed_ratio_paired"] = paired_median(runs["onmt_lite"], runs["OpenNMT-py"])
    row["int8_speedup_paired"] = paired_median(runs["onmt_lite int8"], runs["onmt_lite"])
    if PEER_DEFAULTS in runs:
        row["speed_ratio_peer_defaults"] = (
            row["onmt_lite"]["sents_s"] / row[PEER_DEFAULTS]["sents_s"]
        )
        row["speed_ratio_peer_defaults_paired"] = paired_median(
            runs["onmt_lite"], runs[PEER_DEFAULTS]
        )
    if same_weights:
        # the most lines that differed in any round (each toolkit's output is deterministic: the
        # same each round)
        row["lines_differ_onmt_lite_OpenNMT-py"] = max(differ)
        row["lines_differ_int8_float32"] = max(int8_differ)
    return row


def lines_differ(hyps, other):
    """How many lines of two outputs differ (an output of another length: every line)."""
    if len(hyps) != len(other):
        return max(len(hyps), len(other))
    return sum(a != b for a, b in zip(hyps, other))


def decoding_floor(model, src, n_lines, beam, row):
    """decoding_floor.py's count of onmt_lite's products on the ``n_lines`` lines of ``src`` and the
    least time they take on this machine; the fraction of that limit onmt_lite reaches, and the
    fraction 2x of OpenNMT-py's speed needs."""
    found = subprocess.run(
        [
            sys.executable,
            os.path.join(REPO, "bench", "decoding_floor.py"),
            "-model",
            model,
            "-src",
            src,
            "-beam_size",
            str(beam),
            "-batch_size",
            "32",
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    floor = json.loads(found.stdout.splitlines()[-1])
    lite_seconds = n_lines / row["onmt_lite"]["sents_s"]
    budget = n_lines / (2 * row["OpenNMT-py"]["sents_s"])
    return {
        **floor,
        "onmt_lite_seconds": lite_seconds,
        "fraction_of_limit": floor["seconds"] / lite_seconds,
        "seconds_for_2x": budget,
        "fraction_needed_for_2x": floor["seconds"] / budget,
    }


def paired_median(runs, baseline_runs):
    """The median over rounds of the speed ratio of two toolkits' runs of the same round."""
    return statistics.median(a["sents_s"] / b["sents_s"] for a, b in zip(runs, baseline_runs))


def print_row(title, row):
    print(
        f"\n{title}; float32 matrix multiply before each round: "
        + ", ".join(f"{rate:.0f}" for rate in row.get("host_gflops", []))
        + " GFLOP/s"
    )
    print(f"{'toolkit':<20} {'sents/s':>8} {'tok/s':>8} {'BLEU':>6}")
    for toolkit in [t for t in TOOLKITS if t in row]:
        v = row[toolkit]
        print(f"{toolkit:<20} {v['sents_s']:>8.1f} {v['tok_s']:>8.1f} {fixed(v['bleu']):>6}")
    defaults = (
        f"; against OpenNMT-py's defaults: {row['speed_ratio_peer_defaults']:.2f}x "
        f"({row['speed_ratio_peer_defaults_paired']:.2f}x)"
        if PEER_DEFAULTS in row
        else ""
    )
    bleu_change = (
        None
        if row["onmt_lite"]["bleu"] is None
        else row["onmt_lite int8"]["bleu"] - row["onmt_lite"]["bleu"]
    )
    print(
        f"onmt_lite / OpenNMT-py, the same search: {row['speed_ratio']:.2f}x sentences/s (round by "
        f"round: {row['speed_ratio_paired']:.2f}x){defaults}; int8 / float32: "
        f"{row['int8_speedup']:.2f}x (round by round: {row['int8_speedup_paired']:.2f}x), BLEU "
        f"{fixed(bleu_change, '+.2f')}"
    )
    if "lines_differ_onmt_lite_OpenNMT-py" in row:
        print(
            f"the same weights: {row['lines_differ_onmt_lite_OpenNMT-py']} of {row['lines']} lines "
            "differ between onmt_lite's and OpenNMT-py's float32 outputs (0: the same "
            f"translations); int8's differ from float32's on {row['lines_differ_int8_float32']}"
        )
    floor = row.get("floor")
    if floor:
        print(
            f"onmt_lite's matrix products ({floor['rows']:,} rows, {floor['gflop']:.0f} GFLOP) at "
            f"the float32 rate ({floor['matmul_gflop_s']:.0f} GFLOP/s): {floor['seconds']:.2f} s; "
            f"onmt_lite took {floor['onmt_lite_seconds']:.2f} s ({floor['fraction_of_limit']:.0%} "
            f"of that limit); 2x OpenNMT-py's speed means {floor['seconds_for_2x']:.2f} s "
            f"({floor['fraction_needed_for_2x']:.0%} of it)"
        )


def fixed(value, spec=".2f"):
    return "n/a" if value is None else format(value, spec)


def g2p_int8(quality_work, rounds, work):
    """Exact match and speed of the g2p model in float32 and int8 on src.valid (beam 5)."""
    model_dir = os.path.join(quality_work, "g2p", "beam_5_exact_match")
    if not os.path.isdir(model_dir):
        subprocess.run(
            [
                sys.executable,
                os.path.join(REPO, "bench", "quality.py"),
                "g2p",
                "-work",
                quality_work,
            ],
            check=True,
        )
    model = newest_checkpoint(f"{model_dir}/lite_model_step_*.pt")[0]
    d = os.path.join(SHARED, "data", "g2p-sr")
    with open(f"{d}/tgt.valid", encoding="utf-8") as f:
        refs = [" ".join(line.split()) for line in f]
    row = {}
    for toolkit in ("onmt_lite", "onmt_lite int8"):
        speeds = []
        match = 0.0
        for r in range(rounds):
            name = re.sub(r"\W+", "_", f"g2p_{toolkit}_{r}")
            hyps = translate(
                toolkit,
                model,
                f"{d}/src.valid",
                f"{work}/{name}.pred",
                5,
                None,
                f"{work}/{name}.log",
            )
            speeds.append(len(hyps) / decode_seconds(toolkit, f"{work}/{name}.log", len(hyps)))
            match = 100.0 * sum(h == r for h, r in zip(hyps, refs)) / len(refs)
        row[toolkit] = {"sents_s": statistics.median(speeds), "exact_match": match, "runs": speeds}
    print("\ng2p-sr src.valid, beam 5, batch 32: int8 against float32")
    print(f"{'onmt_lite':<16} {'sents/s':>8} {'exact %':>8}")
    for toolkit, v in row.items():
        print(f"{toolkit:<16} {v['sents_s']:>8.1f} {v['exact_match']:>8.2f}")
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-rounds", type=int, default=2)
    parser.add_argument("-lines", type=int, default=500)
    parser.add_argument(
        "-threads",
        type=int,
        default=0,
        help="OMP_NUM_THREADS and MKL_NUM_THREADS of both toolkits (0: unset, the machine's "
        "default)",
    )
    parser.add_argument("-peer", default="/tmp/peer-opennmt")
    parser.add_argument(
        "-quality_work", default="/tmp/onmt_lite_quality", help="quality.py's work directory"
    )
    parser.add_argument(
        "-train_minutes",
        type=float,
        default=10.0,
        help="-only transformer: each toolkit's training time when quality.py's models are missing",
    )
    parser.add_argument("-work", default="/tmp/onmt_lite_translate_speed")
    parser.add_argument(
        "-only",
        choices=list(MODELS) + ["g2p"],
        help="Measure this alone; the other figures stay as "
        "bench/results/translate_speed.json has them",
    )
    parser.add_argument(
        "-lite_model",
        help=f"-only {SAME_WEIGHTS}: the onmt_lite Transformer checkpoint (default: "
        "the newest of -only transformer's)",
    )
    parser.add_argument(
        "-peer_template",
        help=f"-only {SAME_WEIGHTS}: an OpenNMT-py 3.5.1 checkpoint whose options "
        "the converted one starts from (default: the newest "
        "peer_model_step_*.pt beside -lite_model)",
    )
    parser.add_argument("-src", help="the lines to decode (default: toy-ende's src-val.txt)")
    parser.add_argument(
        "-tgt",
        help="their references, for BLEU (default: toy-ende's tgt-val.txt without -src, "
        "none with it)",
    )
    opt = parser.parse_args()
    if (opt.lite_model or opt.peer_template) and opt.only != SAME_WEIGHTS:
        parser.error(f"-lite_model and -peer_template are for -only {SAME_WEIGHTS}")
    # both toolkits' subprocesses (the peer's environment is a copy) and this one's probe
    if opt.threads > 0:
        threads = {"OMP_NUM_THREADS": str(opt.threads), "MKL_NUM_THREADS": str(opt.threads)}
        os.environ.update(threads)
        PEER_ENV.update(threads)
        import torch

        torch.set_num_threads(opt.threads)
    if not os.path.exists(f"{opt.peer}/bin/onmt_translate"):
        subprocess.run(
            ["bash", os.path.join(SHARED, "bench", "install_opennmt_py.sh"), opt.peer], check=True
        )
    os.makedirs(opt.work, exist_ok=True)
    d = os.path.join(SHARED, "data", "toy-ende")
    src_path, tgt_path = (
        (opt.src, opt.tgt) if opt.src else (f"{d}/src-val.txt", opt.tgt or f"{d}/tgt-val.txt")
    )
    src = os.path.join(opt.work, "src.txt")
    with open(normalised_copy(src_path, opt.work), encoding="utf-8") as f:
        lines = f.readlines()[: opt.lines]
    with open(src, "w", encoding="utf-8") as f:
        f.writelines(lines)
    refs = None
    if tgt_path:
        with open(tgt_path, encoding="utf-8") as f:
            refs = [" ".join(line.split()) for line in f][: opt.lines]
    results = {"lines": opt.lines, "rows": []}
    if opt.only:
        layers = model_kind(opt.lite_model) if opt.lite_model else TRANSFORMERS
        results = earlier_results(opt.only, src_path, layers)
    for setting in (
        [s for s in MODELS if s == opt.only] if opt.only else [s for s in MODELS if s not in OPT_IN]
    ):
        toolkits = TOOLKITS
        if setting == SAME_WEIGHTS:
            models = same_weights_models(opt)
            toolkits = SAME_WEIGHTS_TOOLKITS
        else:
            models = ensure_models(opt.quality_work, setting, opt.train_minutes)
            # loadable by the peer (see quality.py)
            repaired = f"{opt.work}/peer_{setting.replace(' ', '_')}.pt"
            run(
                [
                    f"{opt.peer}/bin/python",
                    "-c",
                    REPAIR_PEER_COPY_CHECKPOINT,
                    models["OpenNMT-py"],
                    repaired,
                ],
                f"{opt.work}/peer_repair.log",
            )
            models["OpenNMT-py"] = repaired
        for mode, beam in MODES.items():
            row = measure(
                models,
                src,
                refs,
                beam,
                opt.rounds,
                opt.work,
                opt.peer,
                f"{setting}_{mode}",
                toolkits,
                same_weights=setting == SAME_WEIGHTS,
            )
            row["lines"] = len(lines)
            if setting not in ("transformer", SAME_WEIGHTS):
                row["floor"] = decoding_floor(models["onmt_lite"], src, len(lines), beam, row)
            if setting == SAME_WEIGHTS:
                row.update(
                    {
                        "lite_model": models["onmt_lite"],
                        "layers": model_kind(models["onmt_lite"]),
                        "peer_template": models["template"],
                        "src": src_path,
                        "threads": opt.threads or None,
                    }
                )
            row.update({"setting": setting, "mode": mode, "machine": machine()})
            results["rows"].append(row)
            print_row(
                f"{setting}, {mode}, first {len(lines)} lines of {os.path.basename(src_path)}, "
                f"batch 32, medians of {opt.rounds} rounds",
                row,
            )
            write_results("translate_speed", results)
    if opt.only in (None, "g2p"):
        results["g2p_int8"] = {
            **g2p_int8(opt.quality_work, opt.rounds, opt.work),
            "machine": machine(),
        }
    write_results("translate_speed", results)


def same_weights_models(opt):
    """The onmt_lite checkpoint of -only transformer_same_weights and its conversion into an
    OpenNMT-py checkpoint (onmt_lite_convert): {"onmt_lite": path, "OpenNMT-py": path,
    "template": path}."""
    lite = opt.lite_model
    if lite is None:
        lite = ensure_models(opt.quality_work, "transformer", opt.train_minutes)["onmt_lite"]
    template = opt.peer_template
    converted = f"{opt.work}/peer_same_weights.pt"
    log = f"{opt.work}/peer_checkpoint.log"
    try:
        run(
            [sys.executable, "-m", "onmt_lite.bin.convert", "-model", lite, "-to", "opennmt-py"]
            + ["-output", converted, "-overwrite"],
            log,
        )
    finally:
        with open(log, encoding="utf-8", errors="replace") as f:
            print(f.read().strip())
    return {"onmt_lite": lite, "OpenNMT-py": converted, "template": template}


TRANSFORMERS = "transformer/transformer"  # the model of rows from before ``layers`` was kept


def model_kind(checkpoint: str) -> str:
    """``encoder/decoder`` of an onmt_lite checkpoint (``transformer/transformer``, ``cnn/cnn``)."""
    opt = torch.load(checkpoint, map_location="cpu", weights_only=True)["opt"]
    return f"{opt['encoder_type']}/{opt['decoder_type']}"


def earlier_results(only, src=None, layers=TRANSFORMERS):
    """The figures of bench/results/translate_speed.json, but for those of ``only`` (on the lines of
    ``src`` with a model of ``layers``, for the same-weights setting, whose rows on other lines or
    of other models are kept)."""
    results = read_results("translate_speed")
    if results is None:
        raise SystemExit(
            f"-only {only} keeps the other figures of {results_path('translate_speed')}, which "
            "does not exist: run without -only"
        )
    results["rows"] = [
        r
        for r in results["rows"]
        if r["setting"] != only
        or r.get("src", src) != src
        or r.get("layers", TRANSFORMERS) != layers
    ]
    return results


if __name__ == "__main__":
    main()
