"""Peak memory of one training step under the memory options, and that sharding keeps the gradients.

    .venv/bin/python bench/shard_memory.py [-vocab 50000] [-batch 64] [-length 60] [-hidden 512]

Each configuration runs in a fresh process: it builds the model (brnn encoder, 2+2 layers, general
attention, input feed) and one random batch of ``-batch`` sentences of ``-length`` source and target
tokens, records the peak resident memory so far (``ru_maxrss``: the process with its model, batch
and optimizer), runs one step (forward, loss, backward) and records the peak again. The table gives
the step's own peak (the difference) and the whole process's peak. With ``-accum_count 2`` the batch
is split in two halves accumulated into one step. Gradients of every configuration are compared with
the unsharded step's (truncated ones with the unsharded truncated step's: truncation itself changes
the gradient). Figures go to bench/results/shard_memory.json.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from quality import write_results  # noqa: E402

# (name, max_generator_batches, truncated_decoder, accum_count, the row whose gradients it must
# equal)
CONFIGS = [
    ("-max_generator_batches 0 (no sharding)", 0, 0, 1, 0),
    ("-max_generator_batches 32 (default)", 32, 0, 1, 0),
    ("-max_generator_batches 8", 8, 0, 1, 0),
    ("-accum_count 2, half batches (and shards of 8)", 8, 0, 2, 0),
    ("-truncated_decoder 20 (no sharding)", 0, 20, 1, 4),
    ("-truncated_decoder 20 and shards of 8", 8, 20, 1, 4),
]


def peak_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child(args):
    """One configuration: returns its figures; saves the gradients to ``args.grads``."""
    import torch

    from onmt_lite.data.batch import ShardView
    from onmt_lite.data.example import make_example
    from onmt_lite.data.shards import make_shard
    from onmt_lite.data.vocab import Vocab
    from onmt_lite.loss import build_loss_compute
    from onmt_lite.models.builder import build_model
    from onmt_lite.opts import build_parser, model_opts, parse, train_opts
    from onmt_lite.train.trainer import Trainer, normalization
    from onmt_lite.utils.memory import reuse_freed_memory

    reuse_freed_memory()  # as onmt_lite_train does
    torch.manual_seed(0)
    torch.set_num_threads(2)
    vocab = Vocab([f"w{i}" for i in range(args.vocab - 4)])
    opt = parse(
        build_parser("bench", [model_opts, train_opts]),
        [
            "-data",
            "unused",
            "-encoder_type",
            "brnn",
            "-layers",
            "2",
            "-rnn_size",
            str(args.hidden),
            "-word_vec_size",
            str(args.hidden),
            "-global_attention",
            "general",
            "-dropout",
            "0",
        ],
    )
    model = build_model(opt, {"src": vocab, "tgt": vocab})
    generator = torch.Generator().manual_seed(1)
    words = vocab.itos[4:]
    examples = [
        make_example(
            i,
            [words[j] for j in torch.randint(len(words), (args.length,), generator=generator)],
            [words[j] for j in torch.randint(len(words), (args.length,), generator=generator)],
            vocab,
            vocab,
            False,
        )
        for i in range(args.batch)
    ]
    view = ShardView(make_shard(examples))
    ids = list(range(args.batch))
    half = args.batch // args.accum
    batches = [view.batch(ids[i * half : (i + 1) * half]) for i in range(args.accum)]
    trainer = Trainer(
        model,
        loss_compute=build_loss_compute(model, vocab, opt),
        accum_count=args.accum,
        shard_size=args.shard,
        trunc_size=args.trunc,
    )
    before = peak_mib()
    norm = normalization(batches, "sents")
    for batch in batches:
        trainer.forward_backward(batch, norm)
    after = peak_mib()
    torch.save({n: p.grad for n, p in model.named_parameters()}, args.grads)
    return {"before_step_mib": before, "peak_mib": after, "step_mib": after - before}


def run_config(args, shard, trunc, accum, grads_path):
    command = [
        sys.executable,
        __file__,
        "-child",
        "-vocab",
        args.vocab,
        "-batch",
        args.batch,
        "-length",
        args.length,
        "-hidden",
        args.hidden,
        "-shard",
        shard,
        "-trunc",
        trunc,
        "-accum",
        accum,
        "-grads",
        grads_path,
    ]
    result = subprocess.run(
        [str(c) for c in command], capture_output=True, text=True, check=True, cwd=REPO
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


def max_difference(path_a, path_b):
    import torch

    a = torch.load(path_a, weights_only=True)
    b = torch.load(path_b, weights_only=True)
    return max(float((a[n] - b[n]).abs().max() / (a[n].abs().max() + 1e-30)) for n in a)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for name, default in (
        ("vocab", 50000),
        ("batch", 64),
        ("length", 60),
        ("hidden", 512),
        ("shard", 0),
        ("trunc", 0),
        ("accum", 1),
    ):
        parser.add_argument(f"-{name}", type=int, default=default)
    parser.add_argument("-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("-grads", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args)))
        return
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, (name, shard, trunc, accum, reference) in enumerate(CONFIGS):
            grads = os.path.join(tmp, f"{i}.pt")
            figures = run_config(args, shard, trunc, accum, grads)
            figures["max_relative_grad_difference"] = max_difference(
                os.path.join(tmp, f"{reference}.pt"), grads
            )
            rows.append({"config": name, **figures})
    base = rows[0]["step_mib"]
    print(
        f"One training step: vocab {args.vocab}, batch {args.batch}, length {args.length}, hidden "
        f"{args.hidden}"
    )
    print(
        f"{'configuration':<48} {'step peak MiB':>14} {'vs unsharded':>13} {'process MiB':>12} "
        f"{'grad diff':>10}"
    )
    print(
        "(grad diff: the largest difference from the reference gradients, relative to each "
        "tensor's largest value)"
    )
    for row in rows:
        print(
            f"{row['config']:<48} {row['step_mib']:>14.0f} {row['step_mib'] / base:>12.0%} "
            f"{row['peak_mib']:>12.0f} {row['max_relative_grad_difference']:>10.1e}"
        )
    write_results(
        "shard_memory",
        {
            "settings": {k: getattr(args, k) for k in ("vocab", "batch", "length", "hidden")},
            "rows": rows,
        },
    )


if __name__ == "__main__":
    main()
