"""The CUDA checks of issue 31 (part 2) in one run: a table with PASS, FAIL or SKIP per check.

    python bench/gpu_check.py [-device cuda|cpu] [-quick] [-steps 1000] [-checks abcdefghijk]
                              [-work DIR] [-toy_ende DIR]

(a) float32 on the CPU and on the device (TF32 off) give the same step-1 loss (relative 1e-5) and
    the same parameters after 3 SGD steps (1e-4): standard, copy, coverage and truncated
    configurations.
(b) On the device, in float64: sharded loss gradients (-max_generator_batches 2) equal unsharded
    ones, and -accum_count 2 over two batches equals one step over both batches together (1e-9).
(c) -model_dtype bf16 and fp16 against fp32, ``-steps`` steps of the standard configuration on
    toy-ende: each run's training perplexity falls, and its final validation perplexity is within 5%
    of fp32's.
(d) The fp32 checkpoint of (c), trained on the device, translates 200 lines greedily on the CPU
    (CUDA hidden) as on the device.
(e) On the device, beam search gives the same 200 translations at -batch_size 1 and 64.
(f) ``-world_size 1 -gpu_ranks 0`` and torchrun with one process train on the device.
(g) Exact resume with dropout (RNN, copy, coverage, truncated, Transformer), (h) ``-copy_attn
    -model_dtype fp16`` and (i) the same seed twice, the same losses (the Transformer on sentences
    over 128 words, the fused attention kernels in training, the batch thread):
    ``gpu_check_training.py`` says what each asserts.
(j) ``-cuda_graphs`` (each search step a replayed CUDA graph) on (c)'s fp32 checkpoint, an
    input-feeding RNN: the same 200 translations as without it, beam 5 at batch 64 and greedy at
    256 (CUDA only).
(k) ``-cuda_graphs`` in training: the losses of runs without it at dropout 0, exact resume with
    dropout (``gpu_check_training.py``; CUDA only).

(a) and (b) run in this process through the library, the rest through the commands
(``python -m onmt_lite.bin.*``). (d) and (e) pass at ``AGREEMENT`` identical lines, not only at all:
on a GPU the kernels (and their summation order) depend on the batch's shape, so a near-tie may
flip.
The data: a small corpus this script writes into ``-work`` (the target is the source reversed), and
toy-ende (``-toy_ende``, default ../shared/data/toy-ende) for (c) to (e) when present.

``-device cpu`` runs the same checks with the CPU on both sides (fp16 skipped): a dry run of the
script on a machine without CUDA. ``-quick`` trains (c) for 40 steps on the small corpus. Exit
status: 0 when nothing failed, 1 when a check failed, 2 with ``-device cuda`` on a machine without
CUDA.
"""

import argparse
import itertools
import os
import subprocess
import sys
import tempfile
import time
import traceback

BENCH = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(BENCH)
sys.path[:0] = [REPO, BENCH, os.path.join(REPO, "tools")]
import torch  # noqa: E402
from gpu_check_training import (  # noqa: E402
    LONG,
    copy_in_fp16,
    exact_resume,
    graphed_training,
    same_seed_twice,
)
from plot_training import read_log  # noqa: E402
from quality import lite_args  # noqa: E402
from toolkits import SHARED  # noqa: E402
from train_speed import BASE, PREPROCESS  # noqa: E402

from onmt_lite.data.batch import ShardView  # noqa: E402
from onmt_lite.data.shards import load_shard  # noqa: E402
from onmt_lite.models.builder import build_model, model_dims  # noqa: E402
from onmt_lite.opts import build_parser, model_opts, parse, train_opts  # noqa: E402
from onmt_lite.train.corpora import load_data  # noqa: E402
from onmt_lite.train.optim import Optimizer  # noqa: E402
from onmt_lite.train.trainer import Trainer  # noqa: E402
from onmt_lite.utils.cuda import configure_cuda  # noqa: E402

PROG = "gpu_check"
AGREEMENT = 0.99  # identical lines needed in (d) and (e)
LINES = 200
SMALL_MODEL = [
    "-encoder_type",
    "brnn",
    "-layers",
    "2",
    "-rnn_size",
    "32",
    "-word_vec_size",
    "16",
    "-global_attention",
    "general",
    "-dropout",
    "0",
    "-optim",
    "sgd",
    "-learning_rate",
    "0.5",
]
CONFIGS = {
    "standard": [],
    "copy": ["-copy_attn"],
    "coverage": ["-coverage_attn", "-lambda_coverage", "1"],
    "truncated": ["-truncated_decoder", "3"],
}


class Checks:
    """The rows of the table: ``(check, PASS|FAIL|SKIP, detail)``."""

    def __init__(self):
        self.rows = []

    def add(self, name, passed, detail=""):
        self.rows.append((name, "PASS" if passed else "FAIL", detail))

    def skip(self, name, why):
        self.rows.append((name, "SKIP", why))

    def guarded(self, name, function, *args):
        """``function(*args)``; an exception is one FAIL row, and the other checks go on."""
        try:
            return function(*args)
        except Exception as err:  # any failure of a check is that check's FAIL, not the script's
            traceback.print_exc()
            self.add(
                name,
                False,
                f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:160],
            )
            return None

    def print(self):
        width = max(len(row[0]) for row in self.rows)
        print(f"\n{'check':<{width}}  result  detail")
        for name, result, detail in self.rows:
            print(f"{name:<{width}}  {result:<6}  {detail}")

    @property
    def failed(self):
        return any(result == "FAIL" for _, result, _ in self.rows)


# -- commands --------------------------------------------------------------------------------------

ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")])),
}


def command(module, args, log, hide_cuda=False, launcher=()):
    """Run ``python -m onmt_lite.bin.MODULE args`` (behind ``launcher``) with its output in ``log``;
    returns the exit status. ``hide_cuda``: as a machine without CUDA sees it."""
    env = dict(ENV)
    if hide_cuda:
        env["CUDA_VISIBLE_DEVICES"] = ""
    with open(log, "w") as out:
        return subprocess.run(
            [sys.executable, *launcher, "-m", f"onmt_lite.bin.{module}", *map(str, args)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        ).returncode


def required(status, what, log):
    if status != 0:
        raise RuntimeError(f"{what} exited with {status}: see {log}")


def write_lines(path, lines):
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(line + "\n" for line in lines)
    return path


def small_corpus(work, n_train=3000, n_valid=LINES, seed=0, lengths=(2, 9), name="small"):
    """A corpus a model learns fast (the target is the source reversed), preprocessed with
    ``-dynamic_dict``, sentences of ``lengths`` words (inclusive); returns ``(-data prefix,
    validation source file)``."""
    import random

    rng = random.Random(seed)
    words = [f"w{i}" for i in range(30)]
    files = {}
    for split, n in (("train", n_train), ("valid", n_valid)):
        sources = [[rng.choice(words) for _ in range(rng.randint(*lengths))] for _ in range(n)]
        files[split] = (
            write_lines(f"{work}/{name}-src-{split}.txt", [" ".join(s) for s in sources]),
            write_lines(f"{work}/{name}-tgt-{split}.txt", [" ".join(reversed(s)) for s in sources]),
        )
    prefix = f"{work}/{name}"
    log = f"{work}/preprocess_{name}.log"
    required(
        command(
            "preprocess",
            [
                "-train_src",
                files["train"][0],
                "-train_tgt",
                files["train"][1],
                "-valid_src",
                files["valid"][0],
                "-valid_tgt",
                files["valid"][1],
                "-save_data",
                prefix,
                "-dynamic_dict",
                "-overwrite",
                "-src_seq_length",
                lengths[1],
                "-tgt_seq_length",
                lengths[1],
            ],
            log,
        ),
        "preprocess",
        log,
    )
    return prefix, files["valid"][0]


def toy_ende(directory, work):
    """toy-ende preprocessed as the speed benchmarks do; returns
    ``(-data prefix, validation source)``."""
    prefix = f"{work}/ende"
    log = f"{work}/preprocess_ende.log"
    required(
        command(
            "preprocess",
            [
                "-train_src",
                f"{directory}/src-train.txt",
                "-train_tgt",
                f"{directory}/tgt-train.txt",
                "-valid_src",
                f"{directory}/src-val.txt",
                "-valid_tgt",
                f"{directory}/tgt-val.txt",
                "-save_data",
                prefix,
                "-overwrite",
                *PREPROCESS,
            ],
            log,
        ),
        "preprocess",
        log,
    )
    return prefix, f"{directory}/src-val.txt"


# -- (a) and (b): the library in this process ------------------------------------------------------


def trainer_on(data, args, device, dtype=torch.float32):
    """A Trainer of a small model (built on the CPU from seed 1, then moved) and its training
    batches."""
    opt = parse(
        build_parser(PROG, [model_opts, train_opts]), ["-data", data, *SMALL_MODEL, *map(str, args)]
    )
    record, vocabs, corpora, _ = load_data(opt)
    torch.manual_seed(1)
    model = build_model(opt, vocabs).to(dtype).to(device)
    optim = Optimizer(model, opt, model_dims(opt).dec_rnn)
    trainer = Trainer.from_opt(opt, model, vocabs["tgt"], optim, device)
    view = ShardView(load_shard(corpora[None][0], record.get("vocab_id")))
    return trainer, model, view


def batch_of(view, ids, dtype=torch.float32):
    batch = view.batch(list(ids))
    if batch.src_map is not None:
        batch.src_map = batch.src_map.to(dtype)
    return batch


def largest_difference(a, b):
    """The largest difference of two parameter dicts, relative to each tensor's largest value (at
    least 1)."""
    return max(float((a[k] - b[k]).abs().max()) / max(1.0, float(b[k].abs().max())) for k in a)


def params(model):
    return {name: p.detach().to("cpu", copy=True) for name, p in model.named_parameters()}


def cpu_against_device(checks, data, device):
    """(a): 3 SGD steps of each configuration on the CPU and on ``device``, from the same
    weights."""
    for name, args in CONFIGS.items():
        runs = []
        for where in ("cpu", device):
            trainer, model, view = trainer_on(data, args, where)
            losses = [
                trainer.train_step([batch_of(view, range(16 * i, 16 * i + 16))]).loss
                for i in range(3)
            ]
            runs.append((losses[0], params(model)))
        (loss_cpu, params_cpu), (loss_dev, params_dev) = runs
        loss_diff = abs(loss_dev - loss_cpu) / abs(loss_cpu)
        param_diff = largest_difference(params_dev, params_cpu)
        checks.add(
            f"(a) float32 {name}: cpu = {device}",
            loss_diff <= 1e-5 and param_diff <= 1e-4,
            f"step-1 loss rel. diff {loss_diff:.1e} (1e-5), parameters after 3 steps "
            f"{param_diff:.1e} (1e-4)",
        )


def sharding_and_accumulation(checks, data, device):
    """(b), in float64 on ``device``: sharded = unsharded gradients; accumulation = the doubled
    batch."""
    for name in ("standard", "copy"):
        grads = []
        for shard in (0, 2):
            trainer, model, view = trainer_on(data, CONFIGS[name], device, torch.float64)
            trainer.shard_size = shard
            batch = batch_of(view, range(16), torch.float64).to(device)
            model.zero_grad()
            trainer.forward_backward(batch, batch.batch_size)
            grads.append(
                {
                    k: p.grad.to("cpu", copy=True)
                    for k, p in model.named_parameters()
                    if p.grad is not None
                }
            )
        diff = largest_difference(grads[1], grads[0])
        same_tensors = grads[0].keys() == grads[1].keys()
        checks.add(
            f"(b) float64 {name}: sharded = unsharded gradients",
            diff <= 1e-9 and same_tensors,
            f"largest rel. diff {diff:.1e} (1e-9) over {len(grads[0])} tensors",
        )
    steps = []
    for accum in (2, 1):
        trainer, model, view = trainer_on(data, ["-accum_count", accum], device, torch.float64)
        first = range(0, 10)
        second = range(10, 24)
        parts = [first, second] if accum == 2 else [itertools.chain(first, second)]
        trainer.train_step([batch_of(view, ids, torch.float64) for ids in parts])
        steps.append(params(model))
    diff = largest_difference(steps[0], steps[1])
    checks.add(
        "(b) float64: -accum_count 2 = the doubled batch",
        diff <= 1e-9,
        f"largest rel. diff {diff:.1e} (1e-9)",
    )


# -- (c) to (f): the commands ----------------------------------------------------------------------


def device_args(device, command_name):
    """The command-line options that put a command on ``device``."""
    if device == "cpu":
        return []
    return ["-gpu_ranks", "0"] if command_name == "train" else ["-gpu", "0"]


def train_dtype(dtype, setup):
    """Train ``setup``'s model with ``-model_dtype dtype``; returns ``(checkpoint, log)``."""
    prefix = f"{setup['work']}/c_{dtype}"
    log = f"{prefix}.log"
    if os.path.exists(log):
        os.remove(log)  # -log_file appends
    steps = setup["steps"]
    status = command(
        "train",
        [
            "-data",
            setup["data"],
            "-save_model",
            prefix,
            "-overwrite",  # a check run again writes over its last run
            "-log_file",
            log,
            *setup["model"],
            "-seed",
            1,
            "-train_steps",
            steps,
            "-report_every",
            max(1, steps // 10),
            "-valid_steps",
            steps,
            "-save_checkpoint_steps",
            steps,
            "-model_dtype",
            dtype,
            *device_args(setup["device"], "train"),
        ],
        f"{prefix}.out",
    )
    required(status, f"training ({dtype})", f"{prefix}.out")
    return f"{prefix}_step_{steps}.pt", log


def precision(checks, setup, compare=True):
    """(c): bf16 and fp16 against fp32 (``compare`` False: fp32 alone, for (d) and (e)). Returns the
    fp32 checkpoint."""
    checkpoint, fp32_log = train_dtype("fp32", setup)
    if not compare:
        return checkpoint
    fp32_valid = read_log(fp32_log)[("valid", "ppl")][setup["steps"]]
    for dtype in ("bf16", "fp16"):
        name = f"(c) {dtype} against fp32, {setup['steps']} steps on {setup['corpus']}"
        if dtype == "fp16" and setup["device"] == "cpu":
            checks.skip(name, "fp16 needs CUDA")
            continue
        _, log = train_dtype(dtype, setup)
        curves = read_log(log)
        train = [curves[("train", "ppl")][step] for step in sorted(curves[("train", "ppl")])]
        valid = curves[("valid", "ppl")][setup["steps"]]
        with open(log, encoding="utf-8") as f:
            skipped = sum("overflowed" in line for line in f)
        ratio = valid / fp32_valid
        checks.add(
            name,
            train[-1] < train[0] and abs(ratio - 1) <= 0.05,
            f"train ppl {train[0]:.1f} -> {train[-1]:.1f}; valid ppl {valid:.2f} against "
            f"{fp32_valid:.2f} ({ratio:.3f}, within 5%)"
            + (f"; {skipped} skipped steps" if dtype == "fp16" else ""),
        )
    return checkpoint


def translate(setup, checkpoint, name, extra, hide_cuda=False, device=None):
    """The translation of the first ``LINES`` validation lines, as a list of lines."""
    output = f"{setup['work']}/{name}.txt"
    log = f"{setup['work']}/{name}.log"
    where = device_args(setup["device"] if device is None else device, "translate")
    required(
        command(
            "translate",
            ["-model", checkpoint, "-src", setup["lines"], "-output", output, *where, *extra],
            log,
            hide_cuda,
        ),
        f"translation {name}",
        log,
    )
    with open(output, encoding="utf-8") as f:
        return f.read().splitlines()


def agreement(checks, name, a, b):
    same = sum(x == y for x, y in zip(a, b))
    checks.add(
        name,
        len(a) == len(b) and same >= AGREEMENT * len(a),
        f"{same}/{len(a)} lines identical (at least {AGREEMENT:.0%})",
    )


def cpu_translation(checks, setup, checkpoint):
    """(d): greedy, the device's checkpoint on the device and on the CPU with CUDA hidden."""
    greedy = ["-beam_size", 1, "-batch_size", 64]
    on_device = translate(setup, checkpoint, "d_device", greedy)
    on_cpu = translate(setup, checkpoint, "d_cpu", greedy, hide_cuda=True, device="cpu")
    agreement(
        checks,
        f"(d) checkpoint from {setup['device']}: translated on cpu = on {setup['device']}",
        on_device,
        on_cpu,
    )


def batch_invariance(checks, setup, checkpoint):
    """(e): beam 5 at batch 1 and batch 64 on the device."""
    one = translate(setup, checkpoint, "e_batch1", ["-beam_size", 5, "-batch_size", 1])
    many = translate(setup, checkpoint, "e_batch64", ["-beam_size", 5, "-batch_size", 64])
    agreement(checks, f"(e) beam 5 on {setup['device']}: batch 1 = batch 64", one, many)


def graphed_translation(checks, setup, checkpoint):
    """(j): beam 5 at batch 64 and greedy at 256, with -cuda_graphs and without."""
    for name, search in (("beam 5", [5, 64]), ("greedy", [1, 256])):
        args = ["-beam_size", search[0], "-batch_size", search[1]]
        tag = name.replace(" ", "")
        plain = translate(setup, checkpoint, f"j_{tag}", args)
        graphed = translate(setup, checkpoint, f"j_{tag}_graphs", [*args, "-cuda_graphs"])
        agreement(checks, f"(j) {name}: -cuda_graphs = without", graphed, plain)


def launchers(checks, setup):
    """(f): ``-world_size 1 -gpu_ranks 0`` and torchrun with one process, 5 steps each."""
    expected = "device cuda:0" if setup["device"] != "cpu" else "device cpu"
    forms = {
        "world_size": ("-world_size 1", (), ["-world_size", 1]),
        "torchrun": (
            "torchrun, 1 process",
            ("-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1"),
            [],
        ),
    }
    for short, (label, launcher, extra) in forms.items():
        prefix = f"{setup['work']}/f_{short}"
        status = command(
            "train",
            [
                "-data",
                setup["small"],
                "-save_model",
                prefix,
                "-overwrite",
                *SMALL_MODEL,
                "-seed",
                1,
                "-train_steps",
                5,
                "-report_every",
                5,
                *extra,
                *device_args(setup["device"], "train"),
            ],
            f"{prefix}.log",
            launcher=launcher,
        )
        with open(f"{prefix}.log", encoding="utf-8", errors="replace") as f:
            text = f.read()
        name = f"(f) {label}{' -gpu_ranks 0' if setup['device'] != 'cpu' else ''}"
        checks.add(
            name,
            status == 0 and expected in text and "Step 5/5" in text,
            f"exit {status}; log says '{expected}': {expected in text}",
        )


def train_run(setup):
    """``run(args, log)``: ``onmt_lite_train args`` on the device, its output in ``log``, which
    it returns."""

    def run(args, log):
        status = command("train", [*args, *device_args(setup["device"], "train")], log)
        required(status, "training", log)
        return log

    return run


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("-steps", type=int, default=1000, help="training steps of (c)")
    parser.add_argument("-quick", action="store_true", help="(c) for 40 steps on the small corpus")
    parser.add_argument("-checks", default="abcdefghijk", help="the checks to run, e.g. 'abf'")
    parser.add_argument(
        "-work", default=None, help="working directory (default: a new temporary one)"
    )
    parser.add_argument("-toy_ende", default=os.path.join(SHARED, "data", "toy-ende"))
    opt = parser.parse_args()
    if opt.device == "cuda" and not torch.cuda.is_available():
        print("gpu_check: this machine has no CUDA device (run with -device cpu for a dry run)")
        return 2
    device = "cuda:0" if opt.device == "cuda" else "cpu"
    if opt.device == "cuda":
        configure_cuda(seeded=True)  # IEEE float32 for (a), as the commands set it for themselves
    else:  # a dry run: one thread a process (spinning OpenMP threads on a busy box took minutes)
        torch.set_num_threads(1)
        ENV["OMP_NUM_THREADS"] = "1"
    work = opt.work or tempfile.mkdtemp(prefix="onmt_lite_gpu_check_")
    os.makedirs(work, exist_ok=True)
    start = time.time()
    checks = Checks()
    small, small_lines = small_corpus(work)
    if "a" in opt.checks:
        checks.guarded("(a) float32 cpu = device", cpu_against_device, checks, small, device)
    if "b" in opt.checks:
        checks.guarded(
            "(b) sharding, accumulation", sharding_and_accumulation, checks, small, device
        )
    ende = not opt.quick and os.path.isdir(opt.toy_ende)
    data, lines = toy_ende(opt.toy_ende, work) if ende else (small, small_lines)
    with open(lines, encoding="utf-8") as f:
        first_lines = f.read().splitlines()[:LINES]
    setup = {
        "work": work,
        "device": opt.device,
        "small": small,
        "data": data,
        "small_model": SMALL_MODEL,
        "lines": write_lines(f"{work}/lines.txt", first_lines),
        "steps": 40 if opt.quick else opt.steps,
        "corpus": "toy-ende" if ende else "the small corpus",
        "model": lite_args(BASE, {"optim": "adam", "learning_rate": 0.001, "batch_size": 64})
        if ende
        else [*SMALL_MODEL, "-batch_size", 32],
    }
    checkpoint = None
    if set("cdej") & set(opt.checks):
        checkpoint = checks.guarded(
            "(c) mixed precision", precision, checks, setup, "c" in opt.checks
        )
    for letter, name, check in (
        ("d", "(d) translation on the cpu", cpu_translation),
        ("e", "(e) batch invariance", batch_invariance),
        ("j", "(j) CUDA graphs", graphed_translation),
    ):
        if letter in opt.checks:
            if letter == "j" and setup["device"] == "cpu":
                checks.skip(name, "CUDA graphs need a CUDA device")
            elif checkpoint is None:
                checks.skip(name, "no checkpoint: (c)'s fp32 training failed")
            else:
                checks.guarded(name, check, checks, setup, checkpoint)
    if "f" in opt.checks:
        checks.guarded("(f) launchers", launchers, checks, setup)
    if "g" in opt.checks:
        checks.guarded(
            "(g) exact resume", exact_resume, checks, setup, train_run(setup), SMALL_MODEL, CONFIGS
        )
    if "h" in opt.checks:
        checks.guarded("(h) copy in fp16", copy_in_fp16, checks, setup, train_run(setup))
    if "i" in opt.checks:
        setup["long"], _ = small_corpus(work, n_train=400, n_valid=20, lengths=LONG, name="long")
        checks.guarded("(i) same seed", same_seed_twice, checks, setup, train_run(setup))
    if "k" in opt.checks:
        checks.guarded(
            "(k) graphed training", graphed_training, checks, setup, train_run(setup), SMALL_MODEL
        )
    checks.print()
    print(
        f"\n{opt.device}, torch {torch.__version__}, {time.time() - start:.0f} s; files in {work}"
    )
    return 1 if checks.failed else 0


if __name__ == "__main__":
    sys.exit(main())
