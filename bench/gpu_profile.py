"""Where onmt_lite's time goes on a GPU: training steps and decoding under torch.profiler.

    python bench/gpu_profile.py [-only [transformer rnn64 ...]] [-dtypes fp32 bf16]
                                [-skip 30] [-steps 20] [-translate MODEL] [-dry_run]

Training: each configuration of ``gpu_speed.py`` (toy-ende, its settings) and ``-model_dtype``
trains in a process of its own; after ``-skip`` optimizer steps (the CUDA libraries' first calls,
the caching allocator's growth), the next ``-steps`` run under ``torch.profiler``. Per step the
table gives the wall milliseconds from one step's start to the next (batch making included), the
host's milliseconds inside ``Trainer.train_step`` (until it returns, without waiting for the
device), the device's kernel milliseconds, its busy share (kernel time over wall time: where it is
far below 100%, the host sets the pace), the kernel launches and the host-device syncs
(``cudaStreamSynchronize``, ``cudaDeviceSynchronize`` and blocking copies, as the profiler records
them). ``-translate MODEL`` profiles ``onmt_lite_translate`` of MODEL (2,000 toy-ende lines,
beam 5 at batch 32 and greedy at batch 256, as ``gpu_translate_speed.py``), the model's loading
and a first batch of 256 lines left out: per line instead of per step. Then the kernels that take
the device's time and the operations that take the host's, the top ``-top`` of each.

The figures go to bench/results/gpu_profile.json (the tables to standard output). Without CUDA
the script says so in one line and exits 2; ``-dry_run`` profiles the CPU instead (3 steps after
2, small batches): a check of the script, not a figure.
"""

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from toolkits import REPO  # noqa: E402

TRANSLATE_SEARCHES = {"beam 5, batch 32": (5, 32), "greedy, batch 256": (1, 256)}
SYNC_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")
LAUNCH_CALLS = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx")


def summary(profiler, wall_s: float, units: int, top: int) -> dict:
    """Per-unit figures (a unit: a step, or a line) of a profile that ran ``wall_s`` seconds."""
    events = profiler.key_averages()
    device_us = sum(getattr(e, "self_device_time_total", 0) or 0 for e in events)
    launches = sum(e.count for e in events if e.key in LAUNCH_CALLS)
    syncs = sum(e.count for e in events if e.key in SYNC_CALLS)
    by_device = sorted(events, key=lambda e: -(getattr(e, "self_device_time_total", 0) or 0))
    by_host = sorted(events, key=lambda e: -e.self_cpu_time_total)
    return {
        "wall_ms": 1000 * wall_s / units,
        "device_ms": device_us / 1000 / units,
        "busy": device_us / 1e6 / wall_s,
        "launches": launches / units,
        "syncs": syncs / units,
        "top_device": [
            [e.key, (getattr(e, "self_device_time_total", 0) or 0) / 1000 / units, e.count / units]
            for e in by_device[:top]
        ],
        "top_host": [
            [e.key, e.self_cpu_time_total / 1000 / units, e.count / units] for e in by_host[:top]
        ],
    }


def activities(dry_run: bool) -> list:
    from torch.profiler import ProfilerActivity

    return [ProfilerActivity.CPU] if dry_run else [ProfilerActivity.CPU, ProfilerActivity.CUDA]


def training_worker(out: str, skip: int, steps: int, dry_run: bool, top: int, arguments: list):
    """Train with ``arguments`` in this process, profiling steps skip+1 .. skip+steps."""
    import torch
    from torch.profiler import profile

    from onmt_lite.bin.train import main
    from onmt_lite.train import trainer

    plain_step = trainer.Trainer.train_step
    record = {"calls": 0, "host_s": 0.0}

    def profiled_step(self, batches):
        record["calls"] += 1
        if record["calls"] == skip + 1:
            if not dry_run:
                torch.cuda.synchronize()
            record["profiler"] = profile(activities=activities(dry_run))
            record["profiler"].__enter__()
            record["start"] = time.perf_counter()
        start = time.perf_counter()
        stats = plain_step(self, batches)
        if skip < record["calls"] <= skip + steps:
            record["host_s"] += time.perf_counter() - start
        if record["calls"] == skip + steps:
            if not dry_run:
                torch.cuda.synchronize()
            record["wall_s"] = time.perf_counter() - record["start"]
            record["profiler"].__exit__(None, None, None)
        return stats

    trainer.Trainer.train_step = profiled_step
    sys.argv = ["onmt_lite_train", *arguments, "-train_steps", str(skip + steps)]
    try:
        main()
    except SystemExit as stop:
        if stop.code not in (None, 0):
            raise
    if "wall_s" not in record:
        raise SystemExit(
            f"gpu_profile: training ended after {record['calls']} steps, before the "
            f"{skip + steps}th"
        )
    result = summary(record["profiler"], record["wall_s"], steps, top)
    result["host_ms"] = 1000 * record["host_s"] / steps
    with open(out, "w", encoding="utf-8") as f:
        json.dump(result, f)


def translation_worker(out: str, dry_run: bool, top: int, arguments: list):
    """Translate with ``arguments`` in this process, profiling ``Translator.translate``."""
    import torch
    from torch.profiler import profile

    from onmt_lite.bin.translate import main
    from onmt_lite.translate import translator

    plain_translate = translator.Translator.translate
    record = {}

    def profiled_translate(self, sources, targets=None, *args, **kwargs):
        # a first batch's kernels load and its libraries start outside the profile
        plain_translate(self, sources[:256], targets[:256] if targets else None)
        with profile(activities=activities(dry_run)) as profiler:
            start = time.perf_counter()
            result = plain_translate(self, sources, targets, *args, **kwargs)
            if not dry_run:
                torch.cuda.synchronize()
            record["wall_s"] = time.perf_counter() - start
        record["profiler"] = profiler
        return result

    translator.Translator.translate = profiled_translate
    sys.argv = ["onmt_lite_translate", *arguments]
    main()
    with open(arguments[arguments.index("-src") + 1], encoding="utf-8") as f:
        lines = sum(1 for _ in f)
    with open(out, "w", encoding="utf-8") as f:
        json.dump(summary(record["profiler"], record["wall_s"], lines, top), f)


def in_process(kind: str, out: str, arguments: list, opt, log: str) -> dict:
    """Run this script's ``kind`` worker in a process of its own; returns its summary."""
    command = [sys.executable, os.path.abspath(__file__), "-worker", kind, out]
    command += ["-skip", str(opt.skip), "-steps", str(opt.steps), "-top", str(opt.top)]
    command += ["-dry_run"] * opt.dry_run + ["--", *map(str, arguments)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")])}
    with open(log, "w") as f:
        done = subprocess.run(command, stdout=f, stderr=subprocess.STDOUT, env=env)
    if done.returncode != 0:
        raise SystemExit(f"gpu_profile: the {kind} run failed: see {log}")
    with open(out, encoding="utf-8") as f:
        return json.load(f)


def training_profiles(opt) -> list:
    from gpu_speed import CONFIGS, prepared
    from quality import lite_args
    from train_speed import toy_ende

    rows = []
    data = toy_ende()
    for config in opt.only:
        work, train_args = prepared(opt, config, data, None)
        for dtype in opt.dtypes:
            device = [] if opt.dry_run else ["-gpu_ranks", "0"]
            arguments = ["-data", f"{work}/lite", "-save_model", f"{work}/profile", "-overwrite"]
            arguments += [*lite_args(CONFIGS[config][0], train_args), "-model_dtype", dtype]
            out = f"{work}/profile_{dtype}.json"
            log = f"{work}/profile_{dtype}.log"
            profiled = in_process("train", out, arguments + device, opt, log)
            rows.append({"what": f"train {config}", "dtype": dtype, "unit": "step", **profiled})
            print_row(rows[-1])
    return rows


def translation_profiles(opt) -> list:
    from train_speed import toy_ende

    from translate_speed import SEARCH

    rows = []
    work = os.path.join(opt.work, "translate")
    os.makedirs(work, exist_ok=True)
    with open(toy_ende()["src_valid"], encoding="utf-8") as f:
        lines = f.read().splitlines()[: 50 if opt.dry_run else 2000]
    source = f"{work}/src.txt"
    with open(source, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    for search, (beam, batch) in TRANSLATE_SEARCHES.items():
        device = [] if opt.dry_run else ["-gpu", "0"]
        arguments = ["-model", opt.translate, "-src", source, "-output", f"{work}/pred.txt"]
        arguments += ["-beam_size", str(beam), "-batch_size", str(batch), *SEARCH, *device]
        tag = f"b{beam}_n{batch}"
        out = f"{work}/profile_{tag}.json"
        profiled = in_process("translate", out, arguments, opt, f"{work}/profile_{tag}.log")
        rows.append({"what": f"translate {search}", "dtype": "fp32", "unit": "line", **profiled})
        print_row(rows[-1])
    return rows


def print_row(row: dict) -> None:
    host = f"{row['host_ms']:>9.2f}" if "host_ms" in row else f"{'-':>9}"
    print(
        f"{row['what']:<28} {row['dtype']:<5} {row['unit']:<5} {row['wall_ms']:>9.2f} {host} "
        f"{row['device_ms']:>9.2f} {100 * row['busy']:>5.0f}% {row['launches']:>9.0f} "
        f"{row['syncs']:>6.1f}"
    )


def print_tops(rows: list) -> None:
    for row in rows:
        for title, key in (("device", "top_device"), ("host", "top_host")):
            print(f"\n{row['what']} {row['dtype']}: the {title}'s ms a {row['unit']}, calls a unit")
            for name, ms, calls in row[key]:
                print(f"  {name[:60]:<60} {ms:>9.3f} {calls:>8.1f}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "-only",
        nargs="*",
        default=["transformer", "rnn64"],
        help="gpu_speed.py's configurations to train (none: translation alone)",
    )
    parser.add_argument("-dtypes", nargs="+", default=["fp32", "bf16"])
    parser.add_argument("-skip", type=int, default=30, help="training steps before the profile")
    parser.add_argument("-steps", type=int, default=20, help="training steps profiled")
    parser.add_argument("-top", type=int, default=15, help="kernels and operations listed")
    parser.add_argument("-translate", help="a checkpoint to profile onmt_lite_translate with")
    parser.add_argument("-dry_run", action="store_true", help="the CPU, a few steps: a check")
    parser.add_argument("-work", default="/tmp/onmt_lite_gpu_profile")
    parser.add_argument("-worker", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("arguments", nargs="*", help=argparse.SUPPRESS)
    opt = parser.parse_args(argv)
    if opt.worker:
        kind, out = opt.worker
        if kind == "train":
            training_worker(out, opt.skip, opt.steps, opt.dry_run, opt.top, opt.arguments)
        else:
            translation_worker(out, opt.dry_run, opt.top, opt.arguments)
        return 0
    sys.stdout.reconfigure(line_buffering=True)  # a row as each run ends
    if opt.dry_run:
        opt.skip = 2
        opt.steps = 3
    else:
        import torch

        if not torch.cuda.is_available():
            print("gpu_profile: this machine has no CUDA device (-dry_run profiles the CPU)")
            return 2
    os.makedirs(opt.work, exist_ok=True)
    print(
        f"{'what':<28} {'dtype':<5} {'unit':<5} {'wall ms':>9} {'host ms':>9} {'GPU ms':>9} "
        f"{'busy':>6} {'launches':>9} {'syncs':>6}"
    )
    rows = training_profiles(opt)
    if opt.translate:
        rows += translation_profiles(opt)
    print()
    if opt.only:
        print(
            f"training: {opt.steps} steps after {opt.skip}; wall ms: from a step's start to the "
            "next's; host ms: inside Trainer.train_step, not waiting for the device"
        )
    if opt.translate:
        print("translation: per line, the model's loading and a first batch of 256 lines left out")
    print("busy: the device's kernel time over the wall time")
    print_tops(rows)
    if not opt.dry_run:
        from quality import write_results

        write_results("gpu_profile", {"skip": opt.skip, "steps": opt.steps, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
