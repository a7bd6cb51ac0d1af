"""Mixed precision against float32: onmt_lite's loss curve and speed with -model_dtype bf16 and
fp32.

    .venv/bin/python bench/precision_curve.py [-steps 1000] [-report_every 50] [-valid_steps 250]

train_speed.py's standard configuration on toy-ende (vocabulary 20000, brnn encoder, 2+2 layers of
256, general attention, input feed, Adam 0.001, batch 64, dropout 0.3), trained twice from the same
seed: float32, then bfloat16 under autocast (float32 weights, gradients and optimizer). The table
gives each report's training perplexity and each validation's perplexity side by side, with the
ratio bf16 / fp32, and each run's target tokens/s (its reports after the first). Figures go to
bench/results/precision_curve.json; with matplotlib, tools/plot_training.py draws both logs into
bench/results/precision_curve.png. (fp16 runs on CUDA devices only: not measured on this machine.)
"""

import argparse
import os
import subprocess
import sys

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)
sys.path.insert(0, os.path.join(os.path.dirname(BENCH), "tools"))
from plot_training import read_log  # noqa: E402
from quality import LITE_BIN, lite_args, results_path, run, write_results  # noqa: E402
from train_speed import BASE, PREPROCESS, target_rate, toy_ende  # noqa: E402

DTYPES = ("fp32", "bf16")


def curves(log):
    """``(training perplexity {step: ppl}, validation perplexity {step: ppl})`` of a training
    log."""
    found = read_log(log)
    return found[("train", "ppl")], found.get(("valid", "ppl"), {})


def side_by_side(a, b):
    """Rows ``(step, a, b, b / a)`` for the steps both curves have."""
    return [(step, a[step], b[step], b[step] / a[step]) for step in sorted(a.keys() & b.keys())]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-steps", type=int, default=1000)
    parser.add_argument("-report_every", type=int, default=50)
    parser.add_argument("-valid_steps", type=int, default=250)
    parser.add_argument("-work", default="/tmp/onmt_lite_precision_curve")
    opt = parser.parse_args()
    os.makedirs(opt.work, exist_ok=True)
    data = toy_ende()
    run(
        [
            f"{LITE_BIN}/onmt_lite_preprocess",
            "-train_src",
            data["src_train"],
            "-train_tgt",
            data["tgt_train"],
            "-valid_src",
            data["src_valid"],
            "-valid_tgt",
            data["tgt_valid"],
            "-save_data",
            f"{opt.work}/data",
            "-overwrite",
            *PREPROCESS,
        ],
        f"{opt.work}/preprocess.log",
    )
    train_args = {
        "optim": "adam",
        "learning_rate": 0.001,
        "batch_size": 64,
        "seed": 1,
        "report_every": opt.report_every,
        "valid_steps": opt.valid_steps,
        "save_checkpoint_steps": opt.steps,
        "train_steps": opt.steps,
    }
    figures = {"settings": {**BASE, **train_args}, "runs": {}}
    for dtype in DTYPES:
        log = f"{opt.work}/{dtype}.log"
        if os.path.exists(log):
            os.remove(log)  # -log_file appends
        run(
            [
                f"{LITE_BIN}/onmt_lite_train",
                "-data",
                f"{opt.work}/data",
                "-save_model",
                f"{opt.work}/{dtype}",
                "-overwrite",  # an earlier run's checkpoints: only the log is read
                *lite_args(BASE, train_args),
                "-model_dtype",
                dtype,
                "-log_file",
                log,
            ],
            f"{opt.work}/{dtype}.out",
        )
        train, valid = curves(log)
        figures["runs"][dtype] = {
            "tgt_tok_s": target_rate(log, opt.report_every),
            "train_ppl": train,
            "valid_ppl": valid,
        }
    fp32, bf16 = (figures["runs"][dtype] for dtype in DTYPES)
    train_rows = side_by_side(fp32["train_ppl"], bf16["train_ppl"])
    valid_rows = side_by_side(fp32["valid_ppl"], bf16["valid_ppl"])
    figures["train_ppl_ratio_range"] = [
        min(r[3] for r in train_rows),
        max(r[3] for r in train_rows),
    ]
    figures["valid_ppl_ratio"] = {step: ratio for step, _, _, ratio in valid_rows}
    figures["speed_ratio"] = bf16["tgt_tok_s"] / fp32["tgt_tok_s"]
    write_results("precision_curve", figures)

    print(
        f"\ntoy-ende, standard configuration, seed 1, {opt.steps} steps: perplexity, bf16 against "
        "fp32"
    )
    print(f"{'step':>10} {'fp32':>9} {'bf16':>9} {'bf16/fp32':>10}")
    for label, rows in (("", train_rows), ("valid ", valid_rows)):
        for step, a, b, ratio in rows:
            print(f"{label + str(step):>10} {a:>9.2f} {b:>9.2f} {ratio:>10.3f}")
    print(
        f"training perplexity bf16/fp32 {figures['train_ppl_ratio_range'][0]:.3f}-"
        f"{figures['train_ppl_ratio_range'][1]:.3f}; target tokens/s fp32 {fp32['tgt_tok_s']:.0f}, "
        f"bf16 {bf16['tgt_tok_s']:.0f} ({figures['speed_ratio']:.2f}x)"
    )
    plot = os.path.join(os.path.dirname(results_path("precision_curve")), "precision_curve.png")
    drawn = subprocess.run(
        [
            sys.executable,
            os.path.join(os.path.dirname(BENCH), "tools", "plot_training.py"),
            "-log",
            f"{opt.work}/fp32.log",
            f"{opt.work}/bf16.log",
            "-output",
            plot,
        ]
    )
    print(f"plot: {plot}" if drawn.returncode == 0 else "plot: skipped (see the message above)")


if __name__ == "__main__":
    main()
