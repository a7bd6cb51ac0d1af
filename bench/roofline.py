"""How close training comes to this machine's limit: the model's floating-point operations per
target token times the measured target tokens per second, over the measured float32 matrix-multiply
rate.

    .venv/bin/python bench/roofline.py [-steps 100] [-warmup 20] [-threads 2]

The model is the performance issue's standard configuration on toy-ende (vocabulary 20,000, brnn
encoder, 2+2 layers, hidden and embeddings 256, general attention, input feed). Its matrix
products, counted from the shapes (a multiply-add is 2 operations; training does each product three
times: forward, gradient of the input, gradient of the weight):

    encoder, per source token   layer 1: 2 directions x 4(H/2) x (E + H/2);
                                layer 2: 2 x 4(H/2) x (H + H/2)
    decoder, per target token   layer 1: 4H x (E + H + H)  (embedding, input feed, recurrent)
                                layer 2: 4H x (H + H)
                                attention: H x H (query projection) + 2 S H (scores, context)
                                           + 2H x H (output)
    generator, per target token H x V

with S the mean source length and the source side counted per target token by the corpus's ratio of
source to target tokens. Element-wise work (activations, softmax, optimizer) is left out, so the
fraction is an upper bound of the useful work done. The speed is onmt_lite_train's own target tok/s
over ``-steps`` steps after ``-warmup``; the limit is torch.mm on 2048 x 2048 float32 matrices with
the same thread count. Figures go to bench/results/roofline.json.
"""

import argparse
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from quality import LITE_BIN, SHARED, write_results  # noqa: E402
from train_speed import target_rate  # noqa: E402

E = 256
H = 256
V = 20000


def mean_length(path):
    with open(path, encoding="utf-8") as f:
        lengths = [len(line.split()) for line in f]
    return sum(lengths) / len(lengths)


def training_flops_per_target_token(src_len, tgt_len):
    """Multiply-adds of the matrix products per target token, times 2 (operations) and 3
    (training)."""
    per_target = {
        "encoder": (2 * 4 * (H // 2) * (E + H // 2) + 2 * 4 * (H // 2) * (H + H // 2))
        * src_len
        / tgt_len,
        "decoder RNN": 4 * H * (E + H + H) + 4 * H * (H + H),
        "attention": H * H + 2 * src_len * H + 2 * H * H,
        "generator": H * V,
    }
    return {part: 2 * 3 * macs for part, macs in per_target.items()}


def matmul_rate(size=2048, repeats=5):
    """float32 operations per second of torch.mm on ``size x size`` matrices, best of
    ``repeats``."""
    import torch

    a = torch.randn(size, size)
    b = torch.randn(size, size)
    torch.mm(a, b)
    best = min(_timed(lambda: torch.mm(a, b)) for _ in range(repeats))
    return 2 * size**3 / best


def _timed(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measured_training_rate(work, steps, warmup):
    d = os.path.join(SHARED, "data", "toy-ende")
    os.makedirs(work, exist_ok=True)
    if not os.path.exists(f"{work}/lite.vocab.pt"):
        subprocess.run(
            [
                f"{LITE_BIN}/onmt_lite_preprocess",
                "-train_src",
                f"{d}/src-train.txt",
                "-train_tgt",
                f"{d}/tgt-train.txt",
                "-save_data",
                f"{work}/lite",
                "-overwrite",
                "-src_vocab_size",
                "20000",
                "-tgt_vocab_size",
                "20000",
                "-src_seq_length",
                "200",
                "-tgt_seq_length",
                "200",
            ],
            check=True,
            capture_output=True,
        )
    log = f"{work}/train.log"
    with open(log, "w") as out:
        subprocess.run(
            [
                f"{LITE_BIN}/onmt_lite_train",
                "-data",
                f"{work}/lite",
                "-save_model",
                f"{work}/model",
                "-overwrite",  # an earlier run's checkpoints: only the log is read
                "-encoder_type",
                "brnn",
                "-enc_layers",
                "2",
                "-dec_layers",
                "2",
                "-rnn_size",
                str(H),
                "-word_vec_size",
                str(E),
                "-global_attention",
                "general",
                "-input_feed",
                "1",
                "-optim",
                "adam",
                "-learning_rate",
                "0.001",
                "-batch_size",
                "64",
                "-dropout",
                "0.3",
                "-seed",
                "1",
                "-report_every",
                "10",
                "-train_steps",
                str(warmup + steps),
                "-save_checkpoint_steps",
                "1000000",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            check=True,
        )
    return target_rate(log, warmup)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-steps", type=int, default=100)
    parser.add_argument("-warmup", type=int, default=20)
    parser.add_argument("-threads", type=int, default=2)
    parser.add_argument("-work", default="/tmp/onmt_lite_roofline")
    opt = parser.parse_args()
    import torch

    torch.set_num_threads(opt.threads)
    d = os.path.join(SHARED, "data", "toy-ende")
    # + </s>
    src_len = mean_length(f"{d}/src-train.txt")
    tgt_len = mean_length(f"{d}/tgt-train.txt") + 1
    flops = training_flops_per_target_token(src_len, tgt_len)
    total = sum(flops.values())
    peak = statistics.median(matmul_rate() for _ in range(3))
    rate = measured_training_rate(opt.work, opt.steps, opt.warmup)
    achieved = total * rate
    print(
        f"Training FLOPs per target token (mean lengths: source {src_len:.1f}, target "
        f"{tgt_len:.1f}):"
    )
    for part, value in flops.items():
        print(f"  {part:<12} {value / 1e6:>7.2f} MFLOP ({value / total:.0%})")
    print(f"  {'total':<12} {total / 1e6:>7.2f} MFLOP")
    print(
        f"float32 matrix multiply, {opt.threads} threads: {peak / 1e9:.0f} GFLOP/s "
        f"-> limit {peak / total:.0f} target tokens/s"
    )
    print(
        f"onmt_lite_train: {rate:.0f} target tokens/s = {achieved / 1e9:.0f} GFLOP/s "
        f"= {achieved / peak:.0%} of the limit"
    )
    write_results(
        "roofline",
        {
            "mflop_per_target_token": {k: v / 1e6 for k, v in flops.items()},
            "total_mflop_per_target_token": total / 1e6,
            "matmul_gflop_s": peak / 1e9,
            "threads": opt.threads,
            "limit_tgt_tok_s": peak / total,
            "tgt_tok_s": rate,
            "fraction_of_limit": achieved / peak,
        },
    )


if __name__ == "__main__":
    main()
