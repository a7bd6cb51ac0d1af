"""GPU training speed and peak memory, onmt_lite against OpenNMT-py 3.5.1 on one device, in one run.

    python bench/gpu_speed.py [-steps 100] [-warmup 20] [-only rnn64 transformer ...]
                              [-precisions fp32 mixed] [-levers [-lever_names none graphs ...]
                              [-dtypes fp32 bf16 fp16]] [-dry_run]

The configurations (toy-ende, vocabularies of 20,000 words, padded to multiples of 8 as the
peer pads its own: ``VOCAB_MULTIPLE``):
- ``rnn64``, ``rnn256``: the standard RNN (brnn encoder, 2+2 layers of 256, general attention,
  input feed, dropout 0.3, Adam 0.001) at batches of 64 and 256 sentences;
- ``rnn_copy``: the same with ``-copy_attn``, batch 64;
- ``transformer``: the small Transformer (2+2 layers of 256, 4 heads, feed-forward 1,024,
  4,096-token batches, noam schedule, label smoothing 0.1);
- ``faq_transformer``: OpenNMT-py 1.x's FAQ Transformer (6+6 layers of 512, 8 heads,
  feed-forward 2,048, 8,192-token batches), trained as the small one;
- ``faq_transformer_ckpt``: the same with activation checkpointing (``-use_ckpting ffn mha``, in
  both toolkits: OpenNMT-py 3.x has the option), for its memory against ``faq_transformer``'s.

Each in float32 (``fp32``, both toolkits) and in mixed precision (``mixed``: onmt_lite's bf16 and
fp16 against the peer's fp16; OpenNMT-py 3.5.1 has no bf16). The speed of a run is the mean of its
own target tokens/s reports after ``-warmup`` steps. Its peak memory is the largest device memory
``nvidia-smi`` showed for the run's processes (sampled every 0.2 s, the same for both toolkits),
and for onmt_lite also ``torch.cuda.max_memory_allocated``, which its log ends with. Both
toolkits' logs are checked to hold models of the same parameter count.

``-levers`` runs onmt_lite alone instead, fp32 and bf16 (``-dtypes``: fp16 too on request), without
and with each of its speed options (``LEVERS``: ``-num_workers 1``, ``-self_attn_type
scaled-dot-flash``, ``-torch_compile``, all three, the last three for Transformers only;
``-cuda_graphs``, which records its buckets of batch shapes in a run's first hundred or so steps:
give it a ``-warmup`` past them; ``each_step``, no option but ``bench/train_each_step.py``: each
step's checks read before its update, as before 2026-11-28, against every few steps now): what
each pays, before a default is changed; ``-lever_names`` and ``-dtypes`` choose some. Figures to
bench/results/gpu_levers.json.

Without CUDA the script says so in one line and exits 2. ``-dry_run`` runs onmt_lite's commands
on the CPU instead (float32 and bf16, 3 steps of small batches, no peer): a check of the script,
not a figure.
The table goes to standard output, the figures (not a dry run's) to bench/results/gpu_speed.json.
The peer is installed by ../shared/bench/install_opennmt_py.sh when missing; on a lent GPU
machine ``-peer python3`` and ``ONMT_LITE_SHARED`` (bench/toolkits.py, bench/device_session.sh).
"""

import argparse
import os
import re
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from quality import (  # noqa: E402
    PEER_ENV,
    TRANSFORMER,
    TRANSFORMER_TRAINING,
    check_models,
    lite_args,
    write_results,
)
from train_speed import (  # noqa: E402
    BASE,
    RNN_TRAINING,
    prepare,
    process_tree,
    target_rate,
    toy_ende,
)
from toolkits import ensure_peer, lite, peer  # noqa: E402

FAQ_TRANSFORMER = {
    **TRANSFORMER,
    "layers": 6,
    "hidden_size": 512,
    "word_vec_size": 512,
    "transformer_ff": 2048,
    "heads": 8,
}
FAQ_TRAINING = {**TRANSFORMER_TRAINING, "batch_size": 8192}
# name: (model settings of both toolkits, their training settings)
CONFIGS = {
    "rnn64": (BASE, RNN_TRAINING),
    "rnn256": (BASE, {**RNN_TRAINING, "batch_size": 256}),
    "rnn_copy": ({**BASE, "copy_attn": True}, RNN_TRAINING),
    "transformer": (TRANSFORMER, TRANSFORMER_TRAINING),
    "faq_transformer": (FAQ_TRANSFORMER, FAQ_TRAINING),
    "faq_transformer_ckpt": (FAQ_TRANSFORMER, FAQ_TRAINING),
}
# the configurations that recompute activations: onmt_lite's options and the peer's config line
CHECKPOINTING = {
    "faq_transformer_ckpt": (["-use_ckpting", "ffn", "mha"], "use_ckpting: [ffn, mha]"),
}
# precision: [(toolkit, its -model_dtype)]
RUNS = {
    "fp32": [("onmt_lite", "fp32"), ("OpenNMT-py", "fp32")],
    "mixed": [("onmt_lite", "bf16"), ("onmt_lite", "fp16"), ("OpenNMT-py", "fp16")],
}
ALLOCATED = re.compile(r"peak GPU memory allocated: (\d+) MiB")
# -levers: onmt_lite's speed options, each alone and all together, against none ("")
LEVERS = {
    "": [],
    "workers": ["-num_workers", 1],
    "flash": ["-self_attn_type", "scaled-dot-flash"],
    "compile": ["-torch_compile"],
    "all": ["-num_workers", 1, "-self_attn_type", "scaled-dot-flash", "-torch_compile"],
    "graphs": ["-cuda_graphs"],
    # no option: bench/train_each_step.py, the step's checks read at each step as before 2026-11-28
    "each_step": [],
}
TRANSFORMER_ONLY = {"flash", "compile", "all"}  # the RNN has no layers they change
VOCAB_MULTIPLE = 8  # onmt_lite's -vocab_size_multiple here (since 2026-11-28; was 1)


class DeviceMemory:
    """The largest device memory (MiB) that ``nvidia-smi`` shows for the processes of a tree,
    sampled every 0.2 s in a thread while the tree runs."""

    def __init__(self, root: int):
        self.root, self.peak, self._done = root, 0.0, threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self):
        while not self._done.wait(0.2):
            used = compute_apps()
            tree = process_tree(self.root)
            self.peak = max(self.peak, sum(mib for pid, mib in used.items() if pid in tree))

    def stop(self) -> float:
        self._done.set()
        self._thread.join()
        return self.peak


def compute_apps() -> dict[int, float]:
    """``{pid: MiB}`` of the processes using a GPU, from nvidia-smi (empty where it cannot say)."""
    query = ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"]
    try:
        text = subprocess.run(query, capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    used = {}
    for line in text.splitlines():
        pid, _, mib = line.partition(",")
        if pid.strip().isdigit() and mib.strip().replace(".", "", 1).isdigit():
            used[int(pid)] = float(mib)
    return used


class RunFailed(SystemExit):
    """A training run that exited with an error: its log and the log's last lines (uncaught, it
    ends the script as a SystemExit does; ``levers`` goes on to the next run)."""

    def __init__(self, command, log):
        with open(log, encoding="utf-8", errors="replace") as f:
            last = [line.rstrip() for line in f.readlines()[-3:]]
        super().__init__(f"{command[0]} failed: see {log}: " + " | ".join(last))


def run_on_device(command, log, env=None) -> tuple[float, float]:
    """Run ``command`` with its output in ``log``; returns its peak device memory in MiB and its
    wall seconds (start-up included: what a device session's plan needs)."""
    start = time.perf_counter()
    with open(log, "w") as out:
        args = [str(c) for c in command]
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env)
        memory = DeviceMemory(proc.pid)
        proc.wait()
        peak = memory.stop()
    if proc.returncode != 0:
        raise RunFailed(command, log)
    return peak, time.perf_counter() - start


def allocated_mib(log) -> float | None:
    """onmt_lite's ``torch.cuda.max_memory_allocated`` as its log reports it, or None."""
    with open(log, encoding="utf-8", errors="replace") as f:
        found = [float(m.group(1)) for m in map(ALLOCATED.search, f) if m]
    return found[-1] if found else None


def peer_gpu_config(path, dtype, config):
    """The peer's config of ``prepare`` (``peer.yaml``) on GPU 0 in ``dtype``, written to
    ``path``."""
    with open(os.path.join(os.path.dirname(path), "peer.yaml"), encoding="utf-8") as f:
        lines = f.read().splitlines()
    lines += ["world_size: 1", "gpu_ranks: [0]", f"model_dtype: {dtype}"]
    if config in CHECKPOINTING:
        lines.append(CHECKPOINTING[config][1])
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return path


def one_run(toolkit, dtype, config, train_args, work, opt, steps, lever=""):
    """One training run (onmt_lite's with the options of ``LEVERS[lever]`` added); returns
    ``{"tgt_tok_s", "peak_mib", "allocated_mib", "log", "wall_s"}``."""
    model_args = CONFIGS[config][0]
    tag = f"_{lever}" if lever else ""
    log = f"{work}/{toolkit}_{dtype}{tag}.log"
    if toolkit == "onmt_lite":
        device = [] if opt.dry_run else ["-gpu_ranks", 0]
        extra = CHECKPOINTING.get(config, ([], None))[0]
        runner = lite("train")
        if lever == "each_step":
            runner = [sys.executable, os.path.join(os.path.dirname(__file__), "train_each_step.py")]
        command = [
            *runner,
            "-data",
            f"{work}/lite",
            "-save_model",
            f"{work}/lite_{dtype}{tag}",
            "-overwrite",
            *lite_args(model_args, train_args),
            "-model_dtype",
            dtype,
            "-train_steps",
            steps,
            *device,
            *extra,
            *LEVERS[lever],
        ]
        peak, seconds = run_on_device(command, log)
    else:
        config_path = peer_gpu_config(f"{work}/peer_{dtype}.yaml", dtype, config)
        command = [*peer(opt.peer, "train"), "-config", config_path, "-train_steps", steps]
        peak, seconds = run_on_device(command, log, PEER_ENV)
    return {
        "tgt_tok_s": target_rate(log, opt.warmup),
        "peak_mib": peak,
        "allocated_mib": allocated_mib(log),
        "log": log,
        "wall_s": seconds,
    }


def levers(opt, config, train_args, work):
    """-levers: onmt_lite alone, fp32 and bf16, without and with each of ``LEVERS``; prints a row a
    run (speed against the run without) and returns the rows."""
    rows = []
    for dtype in opt.dtypes:
        base = None
        for lever in opt.lever_names:
            if lever in TRANSFORMER_ONLY and "transformer" not in config:
                continue
            if opt.dry_run and (lever == "graphs" or dtype == "fp16"):
                continue  # -cuda_graphs and fp16 need CUDA
            steps = opt.warmup + opt.steps
            name = lever or "none"
            try:
                run = one_run("onmt_lite", dtype, config, train_args, work, opt, steps, lever)
            except RunFailed as failed:  # the other levers still measured (a first GPU run)
                print(f"{config:<20} {dtype:<5} {name:<8} {failed}")
                failure = {"config": config, "dtype": dtype, "lever": name, "failed": str(failed)}
                rows.append(failure)
                continue
            if not lever:
                base = run
            ratio = "-" if base is None else f"{run['tgt_tok_s'] / base['tgt_tok_s']:.2f}x"
            allocated = run["allocated_mib"]
            memory = f"{run['peak_mib']:.0f}" + (f" ({allocated:.0f})" if allocated else "")
            speed = f"{run['tgt_tok_s']:>10.0f}"
            row = f"{config:<20} {dtype:<5} {name:<8} {speed} {ratio:>7} {memory:>16}"
            print(f"{row} {run['wall_s']:>6.0f}")
            rows.append({"config": config, "dtype": dtype, "lever": name, "run": run})
    return rows


def print_row(config, precision, results):
    base = results.get(("OpenNMT-py", "fp16" if precision == "mixed" else "fp32"))
    for (toolkit, dtype), run in results.items():
        ratio = f"{run['tgt_tok_s'] / base['tgt_tok_s']:.2f}x" if base else "-"
        memory = f"{run['peak_mib']:.0f}"
        if run["allocated_mib"] is not None:
            memory += f" ({run['allocated_mib']:.0f})"
        speed = f"{run['tgt_tok_s']:>10.0f}"
        row = f"{config:<20} {toolkit:<11} {dtype:<5} {speed} {ratio:>7} {memory:>14}"
        print(f"{row} {run['wall_s']:>6.0f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-steps", type=int, default=100, help="measured steps")
    parser.add_argument("-warmup", type=int, default=20, help="steps before them, not measured")
    parser.add_argument(
        "-only", nargs="+", choices=list(CONFIGS), help="configurations (default: all)"
    )
    parser.add_argument("-precisions", nargs="+", choices=list(RUNS), default=list(RUNS))
    parser.add_argument(
        "-levers",
        action="store_true",
        help="onmt_lite alone, without and with each speed option (no peer)",
    )
    parser.add_argument(
        "-lever_names",
        nargs="+",
        choices=["none", *[name for name in LEVERS if name]],
        default=["none", *[name for name in LEVERS if name]],
        help="-levers: these levers only (none: the run without)",
    )
    parser.add_argument(
        "-dtypes",
        nargs="+",
        choices=["fp32", "bf16", "fp16"],
        default=["fp32", "bf16"],
        help="-levers'",
    )
    parser.add_argument(
        "-dry_run",
        action="store_true",
        help="onmt_lite's commands on the CPU, 3 steps each, no peer (no CUDA needed)",
    )
    parser.add_argument(
        "-peer",
        default="/tmp/peer-opennmt",
        help="OpenNMT-py 3.5.1: its venv directory (installed there when missing), or a Python "
        "that imports it (python3 on a lent GPU machine)",
    )
    parser.add_argument("-work", default="/tmp/onmt_lite_gpu_speed")
    opt = parser.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # a row as each configuration ends
    if not opt.dry_run:
        import torch

        if not torch.cuda.is_available():
            print(
                "gpu_speed: this machine has no CUDA device (-dry_run runs the commands on the CPU)"
            )
            return 2
    opt.lever_names = ["" if name == "none" else name for name in opt.lever_names]
    if opt.dry_run:
        opt.steps = 2
        opt.warmup = 1
    elif not opt.levers:
        ensure_peer(opt.peer)
    data = toy_ende()
    rows = lever_table(opt, data) if opt.levers else comparison(opt, data)
    if not opt.dry_run:  # a dry run's figures are no measurement
        name = "gpu_levers" if opt.levers else "gpu_speed"
        write_results(name, {"steps": opt.steps, "warmup": opt.warmup, "rows": rows})
    return 0


def prepared(opt, config, data, peer):
    """``(work directory, training settings)`` of ``config``, its data preprocessed."""
    work = os.path.join(opt.work, config)
    os.makedirs(work, exist_ok=True)
    model_args, training = CONFIGS[config]
    report_every = 1 if opt.dry_run else 10
    if opt.dry_run:  # a check of the commands: small batches
        small = 512 if training.get("batch_type") == "tokens" else 16
        training = {**training, "batch_size": small}
    # half-precision products want sizes of multiples of 8 (20,008 words, not 20,004), as the
    # peer's vocabularies have by its default
    return work, prepare(
        config, model_args, training, work, peer, data, report_every, vocab_multiple=VOCAB_MULTIPLE
    )


def lever_table(opt, data):
    """-levers: each configuration's rows of ``levers``."""
    print(
        f"{'configuration':<20} {'dtype':<5} {'lever':<8} {'tgt tok/s':>10} {'ratio':>7} "
        f"{'peak MiB (alloc.)':>16} {'wall s':>6}"
    )
    rows = []
    for config in opt.only or list(CONFIGS):
        work, train_args = prepared(opt, config, data, None)
        rows += levers(opt, config, train_args, work)
    print(f"\n{opt.steps} steps after {opt.warmup} warm-up; ratio: against the run without")
    return rows


def comparison(opt, data):
    """Both toolkits, each configuration and precision; prints the table, returns its rows."""
    rows = []
    print(
        f"{'configuration':<20} {'toolkit':<11} {'dtype':<5} {'tgt tok/s':>10} {'ratio':>7} "
        f"{'peak MiB (alloc.)':>14} {'wall s':>6}"
    )
    for config in opt.only or list(CONFIGS):
        model_args = CONFIGS[config][0]
        peer = None if opt.dry_run else opt.peer
        work, train_args = prepared(opt, config, data, peer)
        for precision in opt.precisions:
            results = {}
            for toolkit, dtype in RUNS[precision]:
                if opt.dry_run and (toolkit != "onmt_lite" or dtype == "fp16"):
                    continue  # the peer and fp16 need CUDA
                steps = opt.warmup + opt.steps
                run = one_run(toolkit, dtype, config, train_args, work, opt, steps)
                results[(toolkit, dtype)] = run
            lite_dtype = "fp32" if precision == "fp32" else "bf16"
            lite_log = results[("onmt_lite", lite_dtype)]["log"]
            peer_dtype = "fp16" if precision == "mixed" else "fp32"
            peer_run = results.get(("OpenNMT-py", peer_dtype))
            params = check_models(lite_log, peer_run["log"], model_args) if peer_run else None
            print_row(config, precision, results)
            rows.append(
                {
                    "config": config,
                    "precision": precision,
                    "parameters": params,
                    "runs": {f"{t} {d}": r for (t, d), r in results.items()},
                }
            )
    print(
        f"\n{opt.steps} steps after {opt.warmup} warm-up; ratio: against OpenNMT-py at the same "
        "precision (fp16 for mixed); memory: nvidia-smi's peak (onmt_lite's allocator peak); "
        "wall s: the run's seconds, start-up included"
    )
    return rows


if __name__ == "__main__":
    sys.exit(main())
