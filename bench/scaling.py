"""How onmt_lite's cost grows: training speed against batch size and sentence length, translation
time against beam size, the memory of a training step against vocabulary size with and without
sharding.

    .venv/bin/python bench/scaling.py [-steps 5] [-lines 200]

Training: the performance issue's standard model (brnn 2+2 layers, hidden and embeddings 256,
general attention, input feed, Adam, dropout 0.3) on random sentences of a 20,000-word vocabulary,
one fixed batch shape per row, in this process on 2 threads: target tokens per second over
``-steps`` steps after 2 warm-up steps. Batch sizes 16 to 128 at length 25 (toy-ende's mean), then
lengths 10 to 80 at batch 64. Translation: the first ``-lines`` lines of toy-ende's src-val.txt with
the model of ``bench/quality.sh ende`` (trained first when missing), batch 32, beam 1 to 10, the
decoding time that ``-report_time`` gives. Memory: bench/shard_memory.py's measurement (one step in
a fresh process, batch 64, length 60, hidden 512) at vocabularies of 10,000 to 100,000 words, with
``-max_generator_batches`` 0 and 8. Each table is printed, drawn to bench/results/scaling_*.png when
matplotlib is installed, and written to bench/results/scaling.json.
"""

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from quality import REPO, SHARED, normalised_copy, write_results  # noqa: E402
from translate_speed import decode_seconds, ensure_models, translate  # noqa: E402

BATCH_SIZES = (16, 32, 64, 128)
LENGTHS = (10, 20, 40, 80)
BEAMS = (1, 2, 5, 10)
VOCABS = (10000, 20000, 50000, 100000)


def training_rate(batch_size, length, steps, vocab_size=20000):
    """Target tokens per second of training steps on one random batch of ``batch_size x length``."""
    import torch

    from onmt_lite.data.batch import ShardView
    from onmt_lite.data.example import make_example
    from onmt_lite.data.shards import make_shard
    from onmt_lite.data.vocab import Vocab
    from onmt_lite.loss import build_loss_compute
    from onmt_lite.models.builder import build_model
    from onmt_lite.opts import build_parser, model_opts, parse, train_opts
    from onmt_lite.train.optim import Optimizer
    from onmt_lite.train.trainer import Trainer

    torch.manual_seed(0)
    vocab = Vocab([f"w{i}" for i in range(vocab_size - 4)])
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
            "256",
            "-word_vec_size",
            "256",
            "-global_attention",
            "general",
            "-input_feed",
            "1",
            "-dropout",
            "0.3",
            "-optim",
            "adam",
            "-learning_rate",
            "0.001",
        ],
    )
    model = build_model(opt, {"src": vocab, "tgt": vocab})
    words = vocab.itos[4:]
    draw = torch.Generator().manual_seed(1)

    def sentence():
        return [words[j] for j in torch.randint(len(words), (length,), generator=draw)]

    examples = [
        make_example(i, sentence(), sentence(), vocab, vocab, False) for i in range(batch_size)
    ]
    batch = ShardView(make_shard(examples)).batch(list(range(batch_size)))
    trainer = Trainer(
        model,
        loss_compute=build_loss_compute(model, vocab, opt),
        optim=Optimizer(model, opt, 256),
        shard_size=opt.max_generator_batches,
    )
    for _ in range(2):
        trainer.train_step([batch])
    start = time.perf_counter()
    for _ in range(steps):
        trainer.train_step([batch])
    # targets: the words and </s>
    return batch_size * (length + 1) * steps / (time.perf_counter() - start)


def translation_seconds(model, src, beam, work):
    """onmt_lite_translate's own decoding time of ``src`` (batch 32, beam ``beam``)."""
    log = os.path.join(work, f"beam{beam}.log")
    translate("onmt_lite", model, src, os.path.join(work, f"beam{beam}.txt"), beam, None, log)
    with open(src, encoding="utf-8") as f:
        return decode_seconds("onmt_lite", log, sum(1 for _ in f))


def step_memory(vocab, shard, work):
    """bench/shard_memory.py's figures of one step (fresh process)."""
    from shard_memory import run_config

    args = argparse.Namespace(vocab=vocab, batch=64, length=60, hidden=512)
    return run_config(args, shard, 0, 1, os.path.join(work, f"grads_{vocab}_{shard}.pt"))


def plot(name, title, xlabel, ylabel, series):
    """bench/results/scaling_NAME.png of ``series`` {label: (xs, ys)}, when matplotlib is
    installed."""
    try:
        from onmt_lite.utils.plotting import new_figure, save_png

        figure = new_figure(640, 400, "the scaling plots")
    except Exception as err:  # matplotlib is optional
        print(f"(no plot: {err})")
        return
    axes = figure.add_subplot(1, 1, 1)
    for label, (xs, ys) in series.items():
        axes.plot(xs, ys, marker="o", label=label)
    axes.set(title=title, xlabel=xlabel, ylabel=ylabel)
    axes.set_xticks(list(next(iter(series.values()))[0]))
    axes.legend()
    figure.tight_layout()
    save_png(figure, os.path.join(REPO, "bench", "results", f"scaling_{name}.png"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-steps", type=int, default=5)
    parser.add_argument("-lines", type=int, default=200)
    parser.add_argument(
        "-quality_work", default="/tmp/onmt_lite_quality", help="quality.py's work directory"
    )
    opt = parser.parse_args()
    import torch

    from onmt_lite.utils.memory import reuse_freed_memory

    reuse_freed_memory()  # as onmt_lite_train does
    torch.set_num_threads(2)
    results = {}

    rates = [training_rate(b, 25, opt.steps) for b in BATCH_SIZES]
    results["train_by_batch"] = dict(zip(BATCH_SIZES, rates))
    print("\nTraining, length 25: target tokens/s by batch size")
    for b, r in zip(BATCH_SIZES, rates):
        print(f"batch {b:>4}: {r:>7.0f}")
    plot(
        "train_batch",
        "Training speed, length 25",
        "batch size",
        "target tokens/s",
        {"onmt_lite": (BATCH_SIZES, rates)},
    )

    rates = [training_rate(64, n, opt.steps) for n in LENGTHS]
    results["train_by_length"] = dict(zip(LENGTHS, rates))
    print("\nTraining, batch 64: target tokens/s by sentence length")
    for n, r in zip(LENGTHS, rates):
        print(f"length {n:>3}: {r:>7.0f}")
    plot(
        "train_length",
        "Training speed, batch 64",
        "sentence length",
        "target tokens/s",
        {"onmt_lite": (LENGTHS, rates)},
    )
    write_results("scaling", results)

    model = ensure_models(opt.quality_work, "no copy")["onmt_lite"]
    with tempfile.TemporaryDirectory() as work:
        with open(
            normalised_copy(os.path.join(SHARED, "data", "toy-ende", "src-val.txt"), work)
        ) as f:
            lines = f.readlines()[: opt.lines]
        src = os.path.join(work, "src.txt")
        with open(src, "w") as f:
            f.writelines(lines)
        seconds = [translation_seconds(model, src, k, work) for k in BEAMS]
        results["translate_seconds_by_beam"] = dict(zip(BEAMS, seconds))
        print(f"\nTranslation of {opt.lines} lines, batch 32: seconds by beam size")
        for k, s in zip(BEAMS, seconds):
            print(f"beam {k:>2}: {s:>6.2f} s ({opt.lines / s:.0f} sentences/s)")
        plot(
            "beam",
            f"Translation of {opt.lines} lines",
            "beam size",
            "seconds",
            {"onmt_lite": (BEAMS, seconds)},
        )

        memory = {
            shard: [step_memory(v, shard, work)["step_mib"] for v in VOCABS] for shard in (0, 8)
        }
    results["step_mib_by_vocab"] = {
        f"max_generator_batches {s}": dict(zip(VOCABS, m)) for s, m in memory.items()
    }
    print("\nOne training step (batch 64, length 60, hidden 512): peak MiB by vocabulary size")
    print(f"{'vocabulary':>10} {'unsharded':>10} {'shards of 8':>12}")
    for i, v in enumerate(VOCABS):
        print(f"{v:>10} {memory[0][i]:>10.0f} {memory[8][i]:>12.0f}")
    plot(
        "memory",
        "Memory of one training step",
        "vocabulary size",
        "MiB",
        {
            "-max_generator_batches 0": (VOCABS, memory[0]),
            "-max_generator_batches 8": (VOCABS, memory[8]),
        },
    )
    write_results("scaling", results)


if __name__ == "__main__":
    main()
