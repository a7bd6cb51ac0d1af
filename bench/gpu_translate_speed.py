"""GPU translation speed, onmt_lite against OpenNMT-py 3.5.1 on one CUDA device, in one run.

    python bench/gpu_translate_speed.py [-lines 2000] [-rounds 2] [-only transformer rnn]
                                        [-precisions fp32 fp16 bf16] [-dry_run]

The models, trained here on the device on toy-ende (vocabularies of 20,000):
- ``transformer``: onmt_lite's small Transformer (2+2 layers of 256, 4 heads, quality.py's
  settings, -train_steps 800), converted by onmt_lite_convert into an OpenNMT-py 3.5.1
  checkpoint of the same weights (the peer trains nothing), so that both toolkits decode ONE
  model: their sentences/s compare, and their lines should be identical;
- ``rnn``: the standard RNN (brnn encoder, 2+2 layers of 256, input feed), trained alike by each
  toolkit (the same settings, 600 steps): two models, outputs of other lengths, so the ratio is of
  output tokens/s.

The searches: beam 5 at batches of 32 and 256 sentences, greedy at 256, at most 100 tokens, and
the SAME search in both toolkits (translate_speed.py's ``SEARCH`` and ``PEER_SEARCH``: no length
penalty, no cut at 1.25 x the source + 5, which OpenNMT-py 3.x does by default; the GPU figures
of 2026-11-26 ran the peer with its defaults, which is why its outputs were shorter). Precisions:
``fp32`` and ``fp16`` in both toolkits (``-precision``), ``bf16`` in onmt_lite alone (OpenNMT-py
3.5.1 has none). Each run's time is its toolkit's own timer (model loading excluded); the table
gives the medians over ``-rounds``: sentences/s, output tokens/s (words and ``</s>``), the ratio
to the peer at the same precision, the lines identical to the peer's (same weights) and to
onmt_lite's float32 output (half precision), and BLEU against tgt-val.txt. Each row has a
third line, ``lite+graphs``: onmt_lite with ``-cuda_graphs`` (each search step one replayed CUDA
graph), its ``=peer`` column the lines identical to onmt_lite's without graphs (``-no_graphs``:
none).

Without CUDA the script says so in one line and exits 2. ``-dry_run`` runs onmt_lite's commands on
the CPU instead (small models trained a few steps, 50 lines, float32 and bf16, no peer): a check
of the script, not a figure. ``-reuse_models`` decodes the checkpoints an earlier run left in
``-work`` instead of training again. The table goes to standard output, the figures (not a dry
run's) to bench/results/gpu_translate_speed.json. The peer is installed by
../shared/bench/install_opennmt_py.sh when missing. Each command's wall seconds go to standard
error.
"""

import argparse
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from quality import (  # noqa: E402
    PEER_ENV,
    TRANSFORMER,
    TRANSFORMER_TRAINING,
    lite_args,
    normalised_copy,
    run,
    write_results,
)
from toolkits import ensure_peer, lite  # noqa: E402
from toolkits import peer as peer_command  # noqa: E402
from train_speed import BASE, RNN_TRAINING, prepare, toy_ende  # noqa: E402
from translate_speed import PEER_SEARCH, SEARCH, bleu, decode_seconds, lines_differ  # noqa: E402

# name: (model settings of both toolkits, their training settings, steps, both decode one model)
MODELS = {
    "transformer": (TRANSFORMER, {**TRANSFORMER_TRAINING, "warmup_steps": 400}, 800, True),
    "rnn": (BASE, RNN_TRAINING, 600, False),
}
SEARCHES = {
    "beam 5, batch 32": (5, 32),
    "beam 5, batch 256": (5, 256),
    "greedy, batch 256": (1, 256),
}
PRECISIONS = {
    "fp32": ("onmt_lite", "OpenNMT-py"),
    "fp16": ("onmt_lite", "OpenNMT-py"),
    "bf16": ("onmt_lite",),
}
# onmt_lite with -cuda_graphs (on CUDA): a line of its own in each row, beside onmt_lite's
GRAPHED = "lite+graphs"


def wall(what: str, seconds: float) -> None:
    """A command's wall seconds, start-up included, to standard error: what a device session's
    plan (``device_session.sh``) is sized from."""
    print(f"# {what}: {seconds:.0f} s", file=sys.stderr, flush=True)


def model_paths(work, steps, peer, same_weights) -> dict:
    """``{toolkit: checkpoint}`` that ``train_models`` leaves in ``work``."""
    models = {"onmt_lite": f"{work}/lite_step_{steps}.pt"}
    if peer is not None:
        peer_model = "peer_same.pt" if same_weights else f"peer_model_step_{steps}.pt"
        models["OpenNMT-py"] = f"{work}/{peer_model}"
    return models


def train_models(kind, work, opt):
    """``{toolkit: checkpoint}`` of ``kind``: onmt_lite's trained here, the peer's trained alike or
    (same weights) converted from onmt_lite's."""
    model_args, training, steps, same_weights = MODELS[kind]
    if opt.dry_run:  # a check of the commands: small batches, a few steps
        small = 512 if training.get("batch_type") == "tokens" else 16
        training = {**training, "batch_size": small}
        steps = 4
    peer = None if opt.dry_run else opt.peer
    models = model_paths(work, steps, peer, same_weights)
    if opt.reuse_models and all(os.path.exists(path) for path in models.values()):
        return models
    # the peer trains only a model of its own: with the same weights its checkpoint is onmt_lite's,
    # converted (no vocabulary of its own, no training start-up on the device)
    trainer_peer = None if same_weights else peer
    # the peer's default bucket_size reads the corpus 26 times before its first step
    prepared = prepare(
        kind, model_args, training, work, trainer_peer, toy_ende(), peer_bucket_size=20000
    )
    train_args = {**prepared, "train_steps": steps, "save_checkpoint_steps": steps}
    device = [] if opt.dry_run else ["-gpu_ranks", 0]
    seconds = run(
        [
            *lite("train"),
            "-data",
            f"{work}/lite",
            "-save_model",
            f"{work}/lite",
            "-overwrite",
            *lite_args(model_args, train_args),
            *device,
        ],
        f"{work}/lite_train.log",
    )
    wall(f"onmt_lite trains {kind} ({steps} steps)", seconds)
    if peer is None:
        return models
    if same_weights:
        seconds = run(
            [*lite("convert"), "-model", models["onmt_lite"]]
            + ["-to", "opennmt-py", "-output", models["OpenNMT-py"], "-overwrite"],
            f"{work}/peer_checkpoint.log",
        )
        wall("onmt_lite_convert to OpenNMT-py", seconds)
    else:
        with open(f"{work}/peer.yaml", encoding="utf-8") as f:
            config = f.read() + f"world_size: 1\ngpu_ranks: [0]\nsave_checkpoint_steps: {steps}\n"
        with open(f"{work}/peer_gpu.yaml", "w", encoding="utf-8") as f:
            f.write(config)
        seconds = run(
            [*peer_command(peer, "train"), "-config", f"{work}/peer_gpu.yaml"]
            + ["-train_steps", steps],
            f"{work}/peer_train.log",
        )
        wall(f"OpenNMT-py trains {kind} ({steps} steps)", seconds)
    for toolkit, path in models.items():
        if not os.path.exists(path):
            raise SystemExit(f"{toolkit}'s checkpoint {path} is missing: see the logs in {work}")
    return models


def translate(toolkit, model, src, precision, beam, batch, log, opt):
    """One toolkit's translation of ``src`` (``GRAPHED``: onmt_lite with -cuda_graphs): ``(output
    lines, seconds of decoding)``; None where ``GRAPHED`` failed (its log's end to standard error:
    new on a device, it must not cost the other rows)."""
    out = f"{log}.pred"
    device = [] if opt.dry_run else ["-gpu", 0]
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
        batch,
        "-precision",
        precision,
        "-report_time",
        *device,
        *SEARCH,
    ]
    if toolkit == "OpenNMT-py":
        command = [*peer_command(opt.peer, "translate"), *common, *PEER_SEARCH]
    else:
        graphs = ["-cuda_graphs"] if toolkit == GRAPHED else []
        command = [*lite("translate"), *common, *graphs]
    env = PEER_ENV if toolkit == "OpenNMT-py" else None
    start = time.perf_counter()
    with open(log, "w") as f:
        done = subprocess.run(
            [str(c) for c in command], stdout=f, stderr=subprocess.STDOUT, env=env
        )
    if done.returncode != 0 and toolkit == GRAPHED:
        with open(log, encoding="utf-8", errors="replace") as f:
            print(f"# {GRAPHED} failed ({log}):", *f.readlines()[-15:], sep="\n# ", file=sys.stderr)
        return None
    if done.returncode != 0:
        raise SystemExit(f"{command[0]} failed: see {log}")
    wall(f"{toolkit} translates ({os.path.basename(log)})", time.perf_counter() - start)
    with open(out, encoding="utf-8") as f:
        hyps = [" ".join(line.split()) for line in f]
    # logged to 0.01 s: a dry run's few empty lines may take "0.00 s"
    return hyps, max(decode_seconds(toolkit, log, len(hyps)), 0.01)


def measure(kind, models, src, refs, work, opt):
    """The rows of ``kind``: one per search and precision, each toolkit's medians."""
    rows = []
    for search, (beam, batch) in SEARCHES.items():
        reference = None  # onmt_lite's float32 output
        for precision in opt.precisions:
            toolkits = [t for t in PRECISIONS[precision] if t in models]
            if opt.graphs and not opt.dry_run:  # (-cuda_graphs needs CUDA)
                toolkits.insert(1, GRAPHED)
            runs = {toolkit: [] for toolkit in toolkits}
            outputs = {}
            for r in range(opt.rounds):
                for toolkit in toolkits:
                    tag = f"{kind}_{toolkit}_{precision}_b{beam}_n{batch}_{r}".replace("-", "")
                    lite_or_peer = "onmt_lite" if toolkit == GRAPHED else toolkit
                    done = translate(
                        toolkit,
                        models[lite_or_peer],
                        src[lite_or_peer],
                        precision,
                        beam,
                        batch,
                        f"{work}/{tag}.log",
                        opt,
                    )
                    if done is None:  # -cuda_graphs failed: no more of its runs
                        opt.graphs = False
                        continue
                    hyps, seconds = done
                    words = sum(len(h.split()) + 1 for h in hyps)
                    runs[toolkit].append({"sents_s": len(hyps) / seconds, "tok_s": words / seconds})
                    outputs[toolkit] = hyps
            if precision == "fp32":
                reference = outputs["onmt_lite"]
            row = {"model": kind, "search": search, "precision": precision}
            for toolkit, values in runs.items():
                if not values:  # (failed)
                    continue
                row[toolkit] = {
                    "sents_s": statistics.median(v["sents_s"] for v in values),
                    "tok_s": statistics.median(v["tok_s"] for v in values),
                    "bleu": bleu(outputs[toolkit], refs),
                    "runs": values,
                }
            lite = outputs["onmt_lite"]
            if "OpenNMT-py" in outputs:
                row["identical_with_peer"] = len(lite) - lines_differ(lite, outputs["OpenNMT-py"])
            if GRAPHED in outputs:  # the graphs' lines against onmt_lite's without them
                row["graphed_identical"] = len(lite) - lines_differ(lite, outputs[GRAPHED])
            if reference is not None and precision != "fp32":
                row["identical_with_fp32"] = len(lite) - lines_differ(lite, reference)
            print_row(row, MODELS[kind][3])
            rows.append(row)
    return rows


def print_row(row, same_weights):
    """One line per toolkit of a row; the ratio is of sentences/s with the same weights, else of
    output tokens/s."""
    unit = "sents_s" if same_weights else "tok_s"
    peer = row.get("OpenNMT-py")
    for toolkit in ("onmt_lite", GRAPHED, "OpenNMT-py"):
        if toolkit not in row:
            continue
        v = row[toolkit]
        ratio = f"{v[unit] / peer[unit]:.2f}x" if peer else "-"
        same = {"onmt_lite": row.get("identical_with_peer", "-")}.get(toolkit, "")
        if toolkit == GRAPHED:
            same = f"{row['graphed_identical']}=lite"
        fp32 = row.get("identical_with_fp32", "-") if toolkit == "onmt_lite" else ""
        print(
            f"{row['model']:<12} {row['search']:<18} {row['precision']:<5} {toolkit:<11} "
            f"{v['sents_s']:>9.1f} {v['tok_s']:>9.0f} {ratio:>7} {same!s:>9} {fp32!s:>9} "
            f"{v['bleu']:>6.2f}"
        )


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-lines", type=int, default=2000, help="lines of src-val.txt decoded")
    parser.add_argument("-rounds", type=int, default=2)
    parser.add_argument("-only", nargs="+", choices=list(MODELS), help="models (default: all)")
    parser.add_argument(
        "-precisions", nargs="+", choices=list(PRECISIONS), default=list(PRECISIONS)
    )
    parser.add_argument(
        "-dry_run",
        action="store_true",
        help="onmt_lite's commands on the CPU, small models, no peer (no CUDA needed)",
    )
    parser.add_argument(
        "-peer",
        default="/tmp/peer-opennmt",
        help="OpenNMT-py 3.5.1: its venv directory, or a Python that imports it",
    )
    parser.add_argument("-work", default="/tmp/onmt_lite_gpu_translate_speed")
    parser.add_argument(
        "-no_graphs",
        dest="graphs",
        action="store_false",
        help=f"no {GRAPHED} lines (onmt_lite with -cuda_graphs, on CUDA)",
    )
    parser.add_argument(
        "-reuse_models",
        action="store_true",
        help="decode the models an earlier run trained in -work, where they are all there "
        "(a device session's later call)",
    )
    opt = parser.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # a row as each run ends
    if opt.dry_run:
        opt.lines = min(opt.lines, 50)
        opt.rounds = 1
        opt.precisions = [p for p in opt.precisions if p != "fp16"]  # fp16 needs CUDA
    else:
        import torch

        if not torch.cuda.is_available():
            print(
                "gpu_translate_speed: this machine has no CUDA device "
                "(-dry_run runs the commands on the CPU)"
            )
            return 2
        ensure_peer(opt.peer)
    if "fp32" not in opt.precisions:
        opt.precisions.insert(0, "fp32")  # the reference of the half-precision outputs
    data = toy_ende()
    os.makedirs(opt.work, exist_ok=True)
    with open(data["src_valid"], encoding="utf-8") as f:
        lines = f.read().splitlines()[: opt.lines]
    with open(data["tgt_valid"], encoding="utf-8") as f:
        refs = [" ".join(line.split()) for line in f.read().splitlines()[: opt.lines]]
    source = os.path.join(opt.work, "src.txt")
    with open(source, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    peer_copy = os.path.join(opt.work, "peer")  # normalised_copy keeps the file's name
    os.makedirs(peer_copy, exist_ok=True)
    src = {"onmt_lite": source, "OpenNMT-py": normalised_copy(source, peer_copy)}
    print(
        f"{'model':<12} {'search':<18} {'prec.':<5} {'toolkit':<11} {'sents/s':>9} {'tok/s':>9} "
        f"{'ratio':>7} {'=peer':>9} {'=fp32':>9} {'BLEU':>6}"
    )
    rows = []
    for kind in opt.only or list(MODELS):
        work = os.path.join(opt.work, kind)
        os.makedirs(work, exist_ok=True)
        models = train_models(kind, work, opt)
        rows += measure(kind, models, src, refs, work, opt)
    print(
        f"\n{opt.lines} lines of toy-ende src-val.txt, medians of {opt.rounds} rounds; ratio: "
        "onmt_lite / OpenNMT-py at the same precision, of sentences/s (the Transformer: the same "
        "weights) or of output tokens/s (the RNN); =peer, =fp32: lines identical to the peer's "
        f"and to onmt_lite's float32 output ({GRAPHED}: to onmt_lite's)"
    )
    if not opt.dry_run:  # a dry run's figures are no measurement
        write_results(
            "gpu_translate_speed", {"lines": opt.lines, "rounds": opt.rounds, "rows": rows}
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
