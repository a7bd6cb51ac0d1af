"""gpu_check's training checks that need whole runs of ``onmt_lite_train`` on the device:

(g) Exact resume: for each configuration (RNN with dropout between layers, copy, coverage,
    truncated, Transformer, CNN, all with dropout; the Transformer with -optim adafactor, the RNN
    with -optim sparseadam), ``RESUME_STEPS`` steps straight and the same run
    resumed with ``-train_from`` its checkpoint at half way log the same training losses after
    it. cuDNN's dropout state (outside every generator a checkpoint saves) broke this for RNNs.
(h) ``-copy_attn -model_dtype fp16``: ``FP16_STEPS`` steps train (the perplexity falls) with at
    most ``MAX_SKIPPED`` skipped steps; float16's zero copy probabilities made every step overflow.
(i) The same seed twice, the same losses, for the Transformer on sentences of ``LONG`` words: the
    fused attention kernels' backward may split the keys and add the parts with atomics (PyTorch
    does so by default, unless in its deterministic mode) once there are more than 128 keys, and
    training takes that kernel at attention dropout 0 (``scaled-dot``) and with dropout
    (``-self_attn_type scaled-dot-flash``); and ``-num_workers 1`` against 0.
(k) ``-cuda_graphs`` in training (the decoder's passes replayed from recorded CUDA graphs): an RNN
    and a Transformer without dropout log the losses of runs without graphs, each perplexity
    within ``GRAPHS_RTOL`` (the padded shapes round otherwise); with dropout, the exact resume of
    (g) holds.
"""

import os

from plot_training import read_log

RESUME_STEPS = 40
DROPOUT = ["-dropout", "0.3"]
TRANSFORMER = [
    "-encoder_type",
    "transformer",
    "-decoder_type",
    "transformer",
    "-layers",
    "2",
    "-rnn_size",
    "32",
    "-word_vec_size",
    "32",
    "-transformer_ff",
    "64",
    "-heads",
    "4",
    "-position_encoding",
    "-dropout",
    "0.1",
    "-attention_dropout",
    "0.1",
    "-optim",
    "adam",
    "-learning_rate",
    "0.001",
]
# the convolutional model: cuDNN's convolutions, which it runs deterministically with -seed
CNN = ["-encoder_type", "cnn", "-decoder_type", "cnn", "-position_encoding"]
FP16_STEPS = 200
MAX_SKIPPED = 5
LONG = (130, 200)  # words a sentence in (i)'s corpus: over 128 keys
SAME_SEED_STEPS = 20
GRAPHS_RTOL = 1e-3


def resume_configs(small_model, configs):
    """name -> the training options of each configuration whose resume is checked."""
    rnn = [*small_model, *DROPOUT]
    runs = {"RNN, dropout 0.3": rnn}
    for name, args in configs.items():
        if name != "standard":
            runs[f"{name}, dropout 0.3"] = [*rnn, *args]
    runs["Transformer, dropout 0.1"] = TRANSFORMER
    runs["CNN, dropout 0.3"] = [*small_model, *DROPOUT, *CNN]
    # 1.x's optimizers whose state is not Adam's: factored moments; sparse rows coalesced on the
    # device (the options given last win)
    runs["Transformer, Adafactor"] = [*TRANSFORMER, "-optim", "adafactor", "-learning_rate", "0.01"]
    runs["RNN, sparseadam, dropout 0.3"] = [*rnn, "-optim", "sparseadam", "-learning_rate", "0.001"]
    return runs


def training_losses(log, after, name="ppl"):
    """The training perplexities (or ``name``) the log reports after step ``after``, as
    ``{step: value}`` (ppl: more significant digits than the log's xent)."""
    curve = read_log(log)[("train", name)]
    return {step: ppl for step, ppl in curve.items() if step > after}


def exact_resume(checks, setup, run, small_model, configs, runs=None, label="(g)"):
    """(g): ``RESUME_STEPS`` steps straight against half of them, then ``-train_from`` the rest;
    for ``runs`` (name -> options) instead of ``resume_configs``' when given, named ``label``."""
    half = RESUME_STEPS // 2
    runs = resume_configs(small_model, configs) if runs is None else runs
    for index, (name, args) in enumerate(runs.items()):
        prefix = f"{setup['work']}/g{index}"
        common = [
            "-data",
            setup["small"],
            *args,
            "-seed",
            1,
            "-train_steps",
            RESUME_STEPS,
            "-report_every",
            5,
            "-batch_size",
            32,
            "-valid_steps",
            10 * RESUME_STEPS,
        ]
        straight = run(
            ["-save_model", f"{prefix}a", "-overwrite", "-save_checkpoint_steps", half, *common],
            f"{prefix}a.log",
        )
        resumed = run(
            [
                "-save_model",
                f"{prefix}b",
                "-overwrite",
                "-train_from",
                f"{prefix}a_step_{half}.pt",
                *common,
            ],
            f"{prefix}b.log",
        )
        first = training_losses(straight, half)
        second = training_losses(resumed, half)
        detail = (
            f"ppl after step {half}: straight {list(first.values())}, "
            f"resumed {list(second.values())}"
        )
        checks.add(
            f"{label} exact resume on {setup['device']}: {name}",
            bool(first) and first == second,
            detail,
        )


def copy_in_fp16(checks, setup, run):
    """(h): a copy model trains in fp16: the perplexity falls, few steps are skipped."""
    name = f"(h) -copy_attn -model_dtype fp16, {FP16_STEPS} steps"
    if setup["device"] == "cpu":
        checks.skip(name, "fp16 needs CUDA")
        return
    prefix = f"{setup['work']}/h_copy_fp16"
    log = run(
        [
            "-data",
            setup["small"],
            *setup["small_model"],
            "-copy_attn",
            "-model_dtype",
            "fp16",
            "-seed",
            1,
            "-train_steps",
            FP16_STEPS,
            "-report_every",
            20,
            "-batch_size",
            32,
            "-valid_steps",
            10 * FP16_STEPS,
            "-save_model",
            prefix,
            "-overwrite",
        ],
        f"{prefix}.log",
    )
    with open(log, encoding="utf-8") as f:
        skipped = sum("overflowed" in line for line in f)
    curve = training_losses(log, 0)
    ppl = [curve[step] for step in sorted(curve)]
    passed = len(ppl) > 1 and ppl[-1] < ppl[0] and skipped <= MAX_SKIPPED
    detail = f"train ppl {ppl[0]:.1f} -> {ppl[-1]:.1f}" if ppl else "no report"
    checks.add(name, passed, f"{detail}; {skipped} skipped steps (at most {MAX_SKIPPED})")


def same_seed_twice(checks, setup, run):
    """(i): each configuration trained twice from the same seed logs the same losses; the last
    one against the first's losses (a thread making the batches changes nothing)."""
    plain = [arg if arg != "0.1" else "0" for arg in TRANSFORMER]  # no dropout: the kernel trains
    configs = {
        "scaled-dot, attention dropout 0": (plain, plain),
        "scaled-dot-flash, dropout 0.1": ([*TRANSFORMER, "-self_attn_type", "scaled-dot-flash"],)
        * 2,
        "-num_workers 1 against 0": (TRANSFORMER, [*TRANSFORMER, "-num_workers", 1]),
    }
    for index, (name, (first_args, second_args)) in enumerate(configs.items()):
        logs = []
        for attempt, args in enumerate((first_args, second_args)):
            prefix = f"{setup['work']}/i{index}{attempt}"
            logs.append(
                run(
                    [
                        "-data",
                        setup["long"],
                        *args,
                        "-seed",
                        3,
                        "-train_steps",
                        SAME_SEED_STEPS,
                        "-report_every",
                        2,
                        "-batch_size",
                        16,
                        "-valid_steps",
                        10 * SAME_SEED_STEPS,
                        "-save_model",
                        prefix,
                        "-overwrite",
                    ],
                    f"{prefix}.log",
                )
            )
        first, second = (training_losses(log, 0) for log in logs)
        detail = f"ppl {list(first.values())[-3:]} and {list(second.values())[-3:]}"
        checks.add(
            f"(i) same seed, same losses on {setup['device']}: {name}",
            bool(first) and first == second,
            detail,
        )


def graphed_training(checks, setup, run, small_model):
    """(k): -cuda_graphs against without at dropout 0; its exact resume with dropout."""
    name = "(k) -cuda_graphs in training"
    if setup["device"] == "cpu":
        checks.skip(name, "CUDA graphs need a CUDA device")
        return
    no_dropout = [arg if arg not in ("0.1", "0.3") else "0" for arg in TRANSFORMER]
    models = {"RNN": [*small_model, "-dropout", "0"], "Transformer": no_dropout}
    for index, (model, args) in enumerate(models.items()):
        logs = []
        for graphs in ([], ["-cuda_graphs"]):
            prefix = f"{setup['work']}/k{index}{'g' if graphs else ''}"
            common = ["-seed", 1, "-train_steps", RESUME_STEPS, "-report_every", 5]
            common += ["-batch_size", 32, "-valid_steps", 10 * RESUME_STEPS]
            logs.append(
                run(
                    ["-data", setup["small"], *args, *common, *graphs]
                    + ["-save_model", prefix, "-overwrite"],
                    f"{prefix}.log",
                )
            )
        plain, graphed = (training_losses(log, 0) for log in logs)
        close = bool(plain) and plain.keys() == graphed.keys()
        close = close and all(abs(graphed[s] / plain[s] - 1) <= GRAPHS_RTOL for s in plain)
        detail = f"ppl {list(plain.values())[-2:]} and {list(graphed.values())[-2:]}"
        checks.add(f"{name}: {model}, dropout 0, the losses without graphs", close, detail)
    graphed_configs = {
        "RNN": [*small_model, *DROPOUT, "-cuda_graphs"],
        "Transformer": [*TRANSFORMER, "-cuda_graphs"],
    }
    setup = {**setup, "work": f"{setup['work']}/k_resume"}
    os.makedirs(setup["work"], exist_ok=True)
    exact_resume(checks, setup, run, [], {}, graphed_configs, label=f"{name}:")
