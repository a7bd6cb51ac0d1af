"""Training speed and peak memory, onmt_lite against OpenNMT-py 3.5.1, side by side on toy-ende.

    .venv/bin/python bench/train_speed.py [-steps 200] [-warmup 20] [-rounds 2] \
        [-only standard copy ...]
    .venv/bin/python bench/train_speed.py -only transformer [-steps 60] [-warmup 10]

The configuration of the performance issue: vocabulary 20000, brnn encoder, 2+2 layers, hidden and
embeddings 256, general attention, Adam 0.001, batch 64, dropout 0.3; also with -copy_attn and with
-input_feed 0, and onmt_lite with -model_dtype bf16 against the peer's float32; ``cnn`` (run only
when named) the convolutional model at those sizes (kernel width 3). ``transformer``
(issue 32; run only when named with -only) is the small Transformer of quality.py's ``TRANSFORMER``:
2+2 layers, model size 256, 4 heads, feed-forward 1024, sinusoidal positions, dropout 0.1, Glorot
initialisation, batches of 4,096 tokens normalised by tokens, Adam (beta2 0.998) with the noam
schedule (2, 8,000 warm-up steps), label smoothing 0.1; a step of it is several times slower than
the RNNs' step of 64 sentences, so its default run is shorter (``DEFAULT_STEPS``). Both toolkits'
logs are checked to hold models of the same parameter count (and OpenNMT-py's log to show its
Transformer modules). Each round runs onmt_lite then OpenNMT-py (A B A B ...) for ``warmup + steps``
steps; the speed of a run is its target tokens per second over the reports after the warm-up (each
toolkit's own ``src/tgt tok/s`` figures, reported every 10 steps by default), the peak memory the
resident memory of its whole process tree (OpenNMT-py's data-loading workers included), sampled
every 0.2 s. The table quotes medians over the rounds and the ratios; figures go to
bench/results/train_speed.json. The peer is installed by ../shared/bench/install_opennmt_py.sh when
missing.
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from quality import (  # noqa: E402
    PEER_BUCKET_HELP,
    PEER_ENV,
    TRANSFORMER,
    TRANSFORMER_TRAINING,
    check_models,
    lite_args,
    machine,
    normalised_copy,
    peer_config,
    read_results,
    write_results,
)
from toolkits import SHARED, ensure_peer, lite  # noqa: E402
from toolkits import peer as peer_command  # noqa: E402

BASE = {
    "encoder_type": "brnn",
    "enc_layers": 2,
    "dec_layers": 2,
    "hidden_size": 256,
    "word_vec_size": 256,
    "global_attention": "general",
    "input_feed": 1,
    "dropout": 0.3,
}
RNN_TRAINING = {"optim": "adam", "learning_rate": 0.001, "batch_size": 64}
# 1.x's convolutional model at the RNNs' sizes and training (2+2 layers of 256, kernel width 3)
CNN = {
    "encoder_type": "cnn",
    "decoder_type": "cnn",
    "enc_layers": 2,
    "dec_layers": 2,
    "hidden_size": 256,
    "word_vec_size": 256,
    "cnn_kernel_width": 3,
    "dropout": 0.3,
}
# name: (model settings of both toolkits, their training settings, onmt_lite's extra options);
# "standard_bf16" sets onmt_lite's mixed precision against the peer's float32 (OpenNMT-py's fp16
# does not run on a CPU).
CONFIGS = {
    "standard": (BASE, RNN_TRAINING, []),
    "copy": ({**BASE, "copy_attn": True}, RNN_TRAINING, []),
    "no_input_feed": ({**BASE, "input_feed": 0}, RNN_TRAINING, []),
    "standard_bf16": (BASE, RNN_TRAINING, ["-model_dtype", "bf16"]),
    "transformer": (TRANSFORMER, TRANSFORMER_TRAINING, []),
    # 1.x's FAQ recipe shards the loss (-max_generator_batches 2); OpenNMT-py 3.x has no sharding
    "transformer_sharded": (TRANSFORMER, TRANSFORMER_TRAINING, ["-max_generator_batches", "2"]),
    "transformer_bf16": (TRANSFORMER, TRANSFORMER_TRAINING, ["-model_dtype", "bf16"]),
    "cnn": (CNN, RNN_TRAINING, []),
}
# run only when named with -only (not part of `make bench`'s RNN figures)
OPT_IN = ("transformer", "transformer_sharded", "transformer_bf16", "cnn")
# (steps, warm-up) without -steps/-warmup: a Transformer step of 4,096 tokens (about 2,700 target
# tokens, against about 1,500 in the RNNs' 64 sentences) took 3-8 s in dry runs on this 2-core
# machine shared with other work; 70 steps make a run of 4-10 minutes
DEFAULT_STEPS = dict.fromkeys(OPT_IN[:3], (60, 10))
# onmt_lite_preprocess's settings for every toy-ende run of the speed benchmarks
PREPROCESS = [
    "-src_vocab_size",
    20000,
    "-tgt_vocab_size",
    20000,
    "-src_seq_length",
    200,
    "-tgt_seq_length",
    200,
]
# OpenNMT-py 3.x pads the step number to the width of -train_steps ("Step  20/ 220"): reports before
# step 100 of a 220-step run were skipped for it alone
RATE = re.compile(r"Step +(\d+)/.*?(\d+(?:\.\d+)?)/ *(\d+(?:\.\d+)?) tok/s")


def processes():
    """``{pid: (parent pid, resident bytes)}`` of every process, from /proc."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        table[int(entry)] = (int(fields[1]), int(fields[21]) * os.sysconf("SC_PAGE_SIZE"))
    return table


def process_tree(root, table=None):
    """Process ``root`` and all its descendants (OpenNMT-py trains with data-loading worker
    processes): a set of pids."""
    table = processes() if table is None else table
    tree = {root}
    frontier = [root]
    while frontier:
        children = [
            pid for pid, (parent, _) in table.items() if parent in frontier and pid not in tree
        ]
        tree.update(children)
        frontier = children
    return tree


def tree_rss_mib(root):
    """Resident memory of process ``root`` and all its descendants, in MiB."""
    table = processes()
    return sum(table[pid][1] for pid in process_tree(root, table) if pid in table) / 2**20


def run_measured(command, log, env=None):
    """Run ``command`` with output to ``log``; returns the peak resident memory of its process tree
    in MiB, sampled every 0.2 s."""
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [str(c) for c in command], stdout=out, stderr=subprocess.STDOUT, env=env
        )
        peak = 0.0
        while proc.poll() is None:
            peak = max(peak, tree_rss_mib(proc.pid))
            time.sleep(0.2)
    if proc.returncode != 0:
        raise SystemExit(f"{command[0]} failed: see {log}")
    return peak


def target_rate(log, warmup):
    """Mean target tokens/s of the reports after ``warmup`` steps."""
    with open(log, encoding="utf-8", errors="replace") as f:
        rates = [float(m.group(3)) for m in map(RATE.search, f) if m and int(m.group(1)) > warmup]
    if not rates:
        raise SystemExit(f"{log}: no Step lines after step {warmup}")
    return statistics.mean(rates)


def toy_ende():
    """The toy-ende files in ../shared/data."""
    d = os.path.join(SHARED, "data", "toy-ende")
    return {
        "src_train": f"{d}/src-train.txt",
        "tgt_train": f"{d}/tgt-train.txt",
        "src_valid": f"{d}/src-val.txt",
        "tgt_valid": f"{d}/tgt-val.txt",
    }


def earlier_rows(only):
    """With -only, the rows of the other configurations from bench/results/train_speed.json (so that
    configurations measured at different times share one file)."""
    earlier = read_results("train_speed") if only else None
    return [row for row in earlier or [] if row["config"] not in only]


def prepare(
    config,
    model_args,
    training,
    work,
    peer,
    data,
    report_every=10,
    peer_bucket_size=None,
    vocab_multiple=1,
):
    """Preprocess for onmt_lite and build the peer's vocabulary (once per configuration; no peer:
    ``peer`` None); returns the training settings of both toolkits. ``vocab_multiple``: onmt_lite's
    ``-vocab_size_multiple`` (OpenNMT-py 3.5.1 pads its own to 8 by itself)."""
    copy = ["-dynamic_dict"] if model_args.get("copy_attn") else []
    pre = [
        *lite("preprocess"),
        "-train_src",
        data["src_train"],
        "-train_tgt",
        data["tgt_train"],
        "-save_data",
        f"{work}/lite",
        "-overwrite",
        *PREPROCESS,
        "-vocab_size_multiple",
        vocab_multiple,
        *copy,
    ]
    run_measured(pre, f"{work}/lite_preprocess.log")
    train_args = {
        **training,
        "valid_steps": 1000000,
        "save_checkpoint_steps": 1000000,
        "report_every": report_every,
        "seed": 1,
        "src_vocab_size": 20000,
        "tgt_vocab_size": 20000,
    }
    if peer_bucket_size:
        train_args["bucket_size"] = peer_bucket_size
    if peer is None:
        return train_args
    peer_data = {k: normalised_copy(v, work) for k, v in data.items()}
    peer_config(f"{work}/peer.yaml", peer_data, model_args, train_args, work)
    run_measured(
        [*peer_command(peer, "build_vocab"), "-config", f"{work}/peer.yaml", "-n_sample", -1],
        f"{work}/peer_vocab.log",
        PEER_ENV,
    )
    return train_args


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "-steps", type=int, help="measured steps (default: 200; DEFAULT_STEPS for the Transformer)"
    )
    parser.add_argument(
        "-warmup", type=int, help="steps before them, not measured (default: 20; DEFAULT_STEPS)"
    )
    parser.add_argument("-rounds", type=int, default=2)
    parser.add_argument(
        "-report_every",
        type=int,
        default=10,
        help="both toolkits' report interval in steps: the speed is the mean of the reports "
        "after the warm-up (dry runs: a few steps, reported as often)",
    )
    parser.add_argument(
        "-only",
        nargs="+",
        choices=list(CONFIGS),
        help=f"configurations to run (default: all but {', '.join(OPT_IN)})",
    )
    parser.add_argument("-peer", default="/tmp/peer-opennmt")
    parser.add_argument("-peer_bucket_size", type=int, help=PEER_BUCKET_HELP)
    parser.add_argument("-work", default="/tmp/onmt_lite_train_speed")
    opt = parser.parse_args()
    ensure_peer(opt.peer)
    data = toy_ende()
    rows = earlier_rows(opt.only)
    for config, (model_args, training, lite_extra) in CONFIGS.items():
        if (config not in opt.only) if opt.only else config in OPT_IN:
            continue
        default_steps, default_warmup = DEFAULT_STEPS.get(config, (200, 20))
        steps = default_steps if opt.steps is None else opt.steps
        warmup = default_warmup if opt.warmup is None else opt.warmup
        total = warmup + steps
        work = os.path.join(opt.work, config)
        os.makedirs(work, exist_ok=True)
        train_args = prepare(
            config,
            model_args,
            training,
            work,
            opt.peer,
            data,
            opt.report_every,
            opt.peer_bucket_size,
        )
        runs = {"onmt_lite": [], "OpenNMT-py": []}
        for r in range(opt.rounds):  # A B A B: both toolkits see the same machine state
            for toolkit in runs:
                log = f"{work}/{'lite' if toolkit == 'onmt_lite' else 'peer'}_train_{r}.log"
                if toolkit == "onmt_lite":
                    args = lite_args(model_args, train_args)
                    command = [
                        *lite("train"),
                        "-data",
                        f"{work}/lite",
                        "-save_model",
                        f"{work}/lite_model",
                        "-overwrite",  # each round writes over the last one's checkpoints
                        *args,
                        *lite_extra,
                        "-train_steps",
                        total,
                    ]
                    memory = run_measured(command, log)
                else:
                    command = [
                        *peer_command(opt.peer, "train"),
                        "-config",
                        f"{work}/peer.yaml",
                        "-train_steps",
                        total,
                    ]
                    memory = run_measured(command, log, PEER_ENV)
                runs[toolkit].append({"tgt_tok_s": target_rate(log, warmup), "peak_mib": memory})
            params = check_models(
                f"{work}/lite_train_{r}.log", f"{work}/peer_train_{r}.log", model_args
            )
        # rows of several runs (-only) may differ in it
        row = {
            "config": config,
            "steps": steps,
            "warmup": warmup,
            "parameters": params,
            "peer_bucket_size": opt.peer_bucket_size,
            "machine": machine(),
        }
        for toolkit, values in runs.items():
            row[toolkit] = {
                "tgt_tok_s": statistics.median(v["tgt_tok_s"] for v in values),
                "peak_mib": statistics.median(v["peak_mib"] for v in values),
                "runs": values,
            }
        row["speed_ratio"] = row["onmt_lite"]["tgt_tok_s"] / row["OpenNMT-py"]["tgt_tok_s"]
        row["memory_ratio"] = row["onmt_lite"]["peak_mib"] / row["OpenNMT-py"]["peak_mib"]
        rows = [r for r in rows if r["config"] != config] + [row]
        print(
            f"\n{config}: {steps} steps after {warmup} warm-up, medians of {opt.rounds} rounds (A "
            "B A B)"
        )
        print(f"{'toolkit':<12} {'tgt tok/s':>10} {'peak MiB':>9} {'parameters':>11}")
        for toolkit in runs:
            print(
                f"{toolkit:<12} {row[toolkit]['tgt_tok_s']:>10.0f} "
                f"{row[toolkit]['peak_mib']:>9.0f} {params[toolkit] or 0:>11,}"
            )
        print(
            f"onmt_lite / OpenNMT-py: speed {row['speed_ratio']:.2f}x, memory "
            f"{row['memory_ratio']:.2f}x"
        )
        write_results("train_speed", rows)


if __name__ == "__main__":
    main()
