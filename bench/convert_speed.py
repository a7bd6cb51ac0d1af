"""onmt_lite's translation against CTranslate2's on the same weights (onmt_lite_convert -to
ctranslate2): sentences per second, identical lines and BLEU, float32 and int8, greedy and beam 5.

    .venv/bin/python bench/convert_speed.py -model TRANSFORMER.pt \\
        [-src ../shared/data/toy-ende/src-val.txt -tgt ../shared/data/toy-ende/tgt-val.txt] \\
        [-lines 2000] [-rounds 2] [-dry_run]

The model is an onmt_lite Transformer checkpoint (what bench/README.md says trained it). Both
engines decode the first ``-lines`` lines with the same search: batches of 32 sentences, no length
penalty, at most 100 tokens, the machine's default thread count (onmt_lite's decoding streams,
CTranslate2 as batches side by side, one thread each, and as one batch at a time on every thread).
Each run is a process of its own; its time is the decoding alone (models loaded and one batch
decoded before), best of ``-rounds``. "same" is the share of lines identical to onmt_lite
float32's; BLEU is sacrebleu's corpus BLEU on the tokenized lines against ``-tgt``. Needs
ctranslate2 (pip install 'onmt_lite[ctranslate2]'); ``-dry_run`` takes 20 lines and one round.
``-device cuda`` measures float16 (onmt_lite's -precision fp16) instead of int8, one batch at a
time.
Figures go to bench/results/convert_speed.json.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import sacrebleu
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from onmt_lite import Translator  # noqa: E402
from onmt_lite.bin import convert  # noqa: E402
from quality import write_results  # noqa: E402
from toolkits import SHARED  # noqa: E402

BATCH = 32
MAX_LENGTH = 100


def lite_run(model, sources, beam, setting, device):
    """``setting``: none, int8 (-quantize) or fp16 (-precision)."""
    translator = Translator.load(
        [model],
        device=device,
        beam_size=beam,
        batch_size=BATCH,
        max_length=MAX_LENGTH,
        quantize="int8" if setting == "int8" else "none",
        precision="fp16" if setting == "fp16" else "fp32",
    )
    translator.translate(sources[:BATCH])  # warm-up: first-call costs are not decoding
    start = time.perf_counter()
    results = translator.translate(sources)
    return [r.hypotheses[0] for r in results], time.perf_counter() - start


def ctranslate2_run(directory, sources, beam, layout, device):
    """``layout``: ``(inter_threads, intra_threads)``: batches side by side, threads a batch."""
    import ctranslate2

    translator = ctranslate2.Translator(
        directory, device=device, inter_threads=layout[0], intra_threads=layout[1]
    )
    tokens = [line.split() for line in sources]
    translator.translate_batch(tokens[:BATCH], beam_size=beam, max_decoding_length=MAX_LENGTH)
    start = time.perf_counter()
    results = translator.translate_batch(
        tokens,
        beam_size=beam,
        max_batch_size=BATCH,
        max_decoding_length=MAX_LENGTH,
        length_penalty=0,
    )
    return [" ".join(r.hypotheses[0]) for r in results], time.perf_counter() - start


def best_of(rounds, run):
    outputs, seconds = run()
    for _ in range(rounds - 1):
        seconds = min(seconds, run()[1])
    return outputs, seconds


def worker(spec, sources, rounds, out, device):
    """One engine's run in this process (a fresh one: the previous engine's threads, spinning
    after their work, would take the cores from the next); writes outputs and seconds as JSON."""
    engine, model, beam, setting = spec
    if engine == "onmt_lite":
        outputs, seconds = best_of(rounds, lambda: lite_run(model, sources, beam, setting, device))
    else:
        layout = tuple(int(n) for n in setting.split("x"))
        outputs, seconds = best_of(
            rounds, lambda: ctranslate2_run(model, sources, beam, layout, device)
        )
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"outputs": outputs, "seconds": seconds}, f)


def run_in_process(spec, opt, lines, rounds, work):
    out = os.path.join(work, "run.json")
    command = [sys.executable, os.path.abspath(__file__), "-model", opt.model, "-src", opt.src]
    command += [
        "-lines",
        str(lines),
        "-rounds",
        str(rounds),
        "-out",
        out,
        "-device",
        opt.device,
        "-worker",
        *map(str, spec),
    ]
    subprocess.run(command, check=True)
    with open(out, encoding="utf-8") as f:
        done = json.load(f)
    return done["outputs"], done["seconds"]


LOW = {"cpu": "int8", "cuda": "float16"}  # the reduced precision each device is measured in


def quantizations(device):
    """``{CTranslate2 -quantization: its name in the table}``."""
    return {"none": "float32", LOW[device]: LOW[device]}


def engines(model, directories, beam, device):
    """``{row name: (engine, model, beam, setting)}`` of one search."""
    threads = torch.get_num_threads()
    low = LOW[device]
    runs = {
        "onmt_lite float32": ("onmt_lite", model, beam, "none"),
        f"onmt_lite {low}": ("onmt_lite", model, beam, "fp16" if low == "float16" else low),
    }
    layouts = ["1x1"] if device == "cuda" else [f"1x{threads}", f"{threads}x1"]
    for quantization, name in quantizations(device).items():
        for layout in layouts:
            engine = f"CTranslate2 {name} ({layout} threads)"
            runs[engine] = ("ctranslate2", directories[quantization], beam, layout)
    return runs


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-model", required=True, help="onmt_lite Transformer checkpoint")
    parser.add_argument("-src", default=os.path.join(SHARED, "data", "toy-ende", "src-val.txt"))
    parser.add_argument("-tgt", default=os.path.join(SHARED, "data", "toy-ende", "tgt-val.txt"))
    parser.add_argument("-lines", type=int, default=2000)
    parser.add_argument("-rounds", type=int, default=2)
    parser.add_argument("-dry_run", action="store_true", help="20 lines, one round")
    parser.add_argument(
        "-device", default="cpu", choices=("cpu", "cuda"), help="cuda: float16, not int8"
    )
    parser.add_argument("-worker", nargs=4, help=argparse.SUPPRESS)
    parser.add_argument("-out", help=argparse.SUPPRESS)
    opt = parser.parse_args(argv)
    lines = 20 if opt.dry_run else opt.lines
    rounds = 1 if opt.dry_run else opt.rounds
    with open(opt.src, encoding="utf-8") as f:
        sources = [line.strip() for line in f][:lines]
    if opt.worker:
        engine, model, beam, setting = opt.worker
        worker((engine, model, int(beam), setting), sources, rounds, opt.out, opt.device)
        return
    with open(opt.tgt, encoding="utf-8") as f:
        references = [line.strip() for line in f][:lines]
    work = tempfile.mkdtemp(prefix="convert_speed.")
    directories = {}
    for quantization in quantizations(opt.device):
        directories[quantization] = os.path.join(work, f"ct2_{quantization}")
        convert.main(
            ["-model", opt.model, "-to", "ctranslate2", "-output", directories[quantization]]
            + ["-quantization", quantization]
        )
    rows = []
    for beam in (5, 1):
        outputs = {}
        for name, spec in engines(opt.model, directories, beam, opt.device).items():
            outputs[name], seconds = run_in_process(spec, opt, lines, rounds, work)
            same = sum(a == b for a, b in zip(outputs[name], outputs["onmt_lite float32"]))
            bleu = sacrebleu.corpus_bleu(outputs[name], [references], force=True).score
            rows.append(
                {
                    "search": "greedy" if beam == 1 else f"beam {beam}",
                    "engine": name,
                    "sentences_per_s": len(sources) / seconds,
                    "seconds": seconds,
                    "same_as_onmt_lite_float32": same / len(sources),
                    "bleu": bleu,
                }
            )
    print(
        f"{len(sources)} lines, batch {BATCH}, {torch.get_num_threads()} threads, best of {rounds}"
    )
    print("| search | engine | sentences/s | x onmt_lite float32 | same lines | BLEU |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for row in rows:
        base = next(
            r for r in rows if r["search"] == row["search"] and r["engine"] == "onmt_lite float32"
        )
        ratio = row["sentences_per_s"] / base["sentences_per_s"]
        print(
            f"| {row['search']} | {row['engine']} | {row['sentences_per_s']:.1f} | {ratio:.2f} | "
            f"{100 * row['same_as_onmt_lite_float32']:.1f}% | {row['bleu']:.2f} |"
        )
    if not opt.dry_run:
        write_results("convert_speed", {"lines": len(sources), "rows": rows})


if __name__ == "__main__":
    main()
