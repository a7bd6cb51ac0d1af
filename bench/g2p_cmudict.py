"""CMUdict grapheme-to-phoneme to convergence: word and phone error rates of the bidirectional LSTM
and of the Transformer on the demo's test words, beside the literature.

    .venv/bin/python bench/g2p_cmudict.py -model brnn          # about 35 minutes on 2 cores
    .venv/bin/python bench/g2p_cmudict.py -model transformer   # about 40 minutes
    .venv/bin/python bench/g2p_cmudict.py -ensemble            # both trained models as one ensemble
    .venv/bin/python bench/g2p_cmudict.py -table               # both, from bench/results/

The corpus is `make demo`'s (tools/prepare_cmudict.py: 120,911 training words, 2,000 validation,
2,000 test, stress removed, each word with cmudict's first pronunciation). Each model trains for
``-train_steps`` with validation every ``-valid_steps`` (accuracy picks ``model_best.pt``, and
``-early_stopping`` validations without improvement end the run); the best model decodes the test
words with beam 5. The word error rate is counted twice: against the first pronunciation (what the
model was trained on) and, as the literature counts it, against any of the word's cmudict
pronunciations. The phone error rate is the edit distance to the first pronunciation (to the nearest
one in the "any" column). Figures go to bench/results/cmudict_MODEL.json.
"""

import argparse
import json
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from quality import LITE_BIN, REPO, read_results, run, write_results  # noqa: E402

sys.path.insert(0, os.path.join(REPO, "tools"))
from g2p_scores import edit_distance, read_tokens  # noqa: E402
from prepare_cmudict import STRESS_RE, load_entries  # noqa: E402

# The demo's model, trained longer, and a small Transformer of the size G2P papers use (3 layers of
# 256).
MODELS = {
    "brnn": [
        "-encoder_type",
        "brnn",
        "-layers",
        "2",
        "-rnn_size",
        "256",
        "-word_vec_size",
        "64",
        "-global_attention",
        "general",
        "-optim",
        "adam",
        "-learning_rate",
        "0.002",
        "-dropout",
        "0.2",
        "-batch_size",
        "64",
        "-decay_method",
        "plateau",
        "-learning_rate_decay",
        "0.5",
    ],
    "transformer": [
        "-encoder_type",
        "transformer",
        "-decoder_type",
        "transformer",
        "-layers",
        "3",
        "-rnn_size",
        "256",
        "-word_vec_size",
        "256",
        "-transformer_ff",
        "1024",
        "-heads",
        "4",
        "-position_encoding",
        "-dropout",
        "0.1",
        "-attention_dropout",
        "0.1",
        "-param_init",
        "0",
        "-param_init_glorot",
        "-optim",
        "adam",
        "-adam_beta2",
        "0.998",
        "-decay_method",
        "noam",
        "-warmup_steps",
        "2000",
        "-learning_rate",
        "1",
        "-batch_size",
        "4096",
        "-batch_type",
        "tokens",
        "-normalization",
        "tokens",
        "-label_smoothing",
        "0.1",
        "-max_grad_norm",
        "0",
        "-model_dtype",
        "bf16",
    ],
}
STEPS = {"brnn": 40000, "transformer": 8000}
VALID_STEPS = {"brnn": 2000, "transformer": 1000}
# Published CMUdict G2P results, on other splits (each paper its own random test words).
LITERATURE = [
    (
        "published LSTM and Transformer G2P (Yao and Zweig 2015, Rao et al. 2015, Yolchuyeva et "
        "al. 2019)",
        "about 23-25%",
        "about 5-6%",
    )
]


def error_rates(src_path, hyp_path, ref_path):
    """Word and phone error rates (%) against the first pronunciation and against any
    pronunciation."""
    words = ["".join(letters) for letters in read_tokens(src_path)]
    hypotheses = read_tokens(hyp_path)
    references = read_tokens(ref_path)
    entries = load_entries()
    first_words = first_edits = any_words = any_edits = phones = 0
    for word, hyp, ref in zip(words, hypotheses, references):
        variants = [[STRESS_RE.sub("", p) for p in pron] for pron in entries[word]]
        first = edit_distance(hyp, ref)
        nearest = min(edit_distance(hyp, variant) for variant in variants)
        first_words += first > 0
        first_edits += first
        any_words += nearest > 0
        any_edits += nearest
        phones += len(ref)
    n = len(references)
    return {
        "words": n,
        "wer_first": 100 * first_words / n,
        "per_first": 100 * first_edits / phones,
        "wer_any": 100 * any_words / n,
        "per_any": 100 * any_edits / phones,
    }


def validations(log):
    """[(step, accuracy %)] of the validations in the training log."""
    found = []
    with open(log, encoding="utf-8") as f:
        for line in f:
            match = re.search(r"Validation at step (\d+): .*accuracy ([\d.]+)", line)
            if match:
                found.append((int(match.group(1)), float(match.group(2))))
    return found


def train_and_score(args):
    work = os.path.abspath(args.work)
    corpus = os.path.join(work, "corpus")
    model = os.path.join(work, args.model)
    os.makedirs(model, exist_ok=True)
    if not os.path.exists(os.path.join(corpus, "tgt-test.txt")):
        run(
            [
                sys.executable,
                os.path.join(REPO, "tools", "prepare_cmudict.py"),
                "-output_dir",
                corpus,
            ],
            f"{work}/prepare.log",
        )
        run(
            [
                f"{LITE_BIN}/onmt_lite_preprocess",
                "-train_src",
                f"{corpus}/src-train.txt",
                "-train_tgt",
                f"{corpus}/tgt-train.txt",
                "-valid_src",
                f"{corpus}/src-valid.txt",
                "-valid_tgt",
                f"{corpus}/tgt-valid.txt",
                "-save_data",
                f"{corpus}/data",
                "-overwrite",
            ],
            f"{work}/preprocess.log",
        )
    steps = args.train_steps or STEPS[args.model]
    args.valid_steps = args.valid_steps or VALID_STEPS[args.model]
    train_minutes = None if args.score_only else train(args, corpus, model, steps)
    run(
        [
            f"{LITE_BIN}/onmt_lite_translate",
            "-model",
            f"{model}/model_best.pt",
            "-src",
            f"{corpus}/src-test.txt",
            "-output",
            f"{model}/pred-test.txt",
            "-beam_size",
            "5",
            "-batch_size",
            "64",
        ],
        f"{model}/translate.log",
    )
    validated = validations(f"{model}/train.log")
    figures = {
        "model": args.model,
        "options": MODELS[args.model],
        "train_steps": steps,
        "last_step": validated[-1][0],
        "best_step": max(validated, key=lambda v: v[1])[0],
        "train_minutes": train_minutes,
        **error_rates(f"{corpus}/src-test.txt", f"{model}/pred-test.txt", f"{corpus}/tgt-test.txt"),
    }
    write_results(f"cmudict_{args.model}", figures)
    return figures


def train(args, corpus, model, steps):
    """Train (or go on training) the model; returns the training's minutes, those of the run before
    included."""
    start = time.time()
    run(
        [
            f"{LITE_BIN}/onmt_lite_train",
            "-data",
            f"{corpus}/data",
            "-save_model",
            f"{model}/model",
            "-log_file",
            f"{model}/train.log",
            *MODELS[args.model],
            "-seed",
            "1",
            "-train_steps",
            str(steps),
            "-valid_steps",
            str(args.valid_steps),
            "-save_checkpoint_steps",
            str(args.valid_steps),
            "-keep_checkpoint",
            "1",
            "-early_stopping",
            str(args.early_stopping),
            "-early_stopping_criteria",
            "accuracy",
            "-report_every",
            "500",
            *(["-train_from", args.train_from] if args.train_from else []),
        ],
        f"{model}/train.out",
    )
    train_seconds = time.time() - start
    minutes_file = os.path.join(model, "train_minutes.json")
    if args.train_from and os.path.exists(minutes_file):  # going on from the run before: count both
        with open(minutes_file, encoding="utf-8") as f:
            train_seconds += 60 * json.load(f)
    with open(minutes_file, "w", encoding="utf-8") as f:
        json.dump(train_seconds / 60, f)
    return train_seconds / 60


def ensemble_and_score(args):
    """Decode the test words with both models' best checkpoints as one ensemble (log-probabilities
    averaged at each step: onmt_lite_translate -model A B)."""
    work = os.path.abspath(args.work)
    corpus = os.path.join(work, "corpus")
    out = os.path.join(work, "ensemble")
    models = [os.path.join(work, name, "model_best.pt") for name in ("brnn", "transformer")]
    missing = [m for m in models if not os.path.exists(m)]
    if missing:
        raise SystemExit(f"-ensemble: train both models first ({', '.join(missing)} missing)")
    os.makedirs(out, exist_ok=True)
    run(
        [
            f"{LITE_BIN}/onmt_lite_translate",
            "-model",
            *models,
            "-src",
            f"{corpus}/src-test.txt",
            "-output",
            f"{out}/pred-test.txt",
            "-beam_size",
            "5",
            "-batch_size",
            "64",
        ],
        f"{out}/translate.log",
    )
    parts = [read_results(f"cmudict_{name}") or {} for name in ("brnn", "transformer")]
    figures = {
        "model": "ensemble",
        "models": models,
        "steps": [p.get("best_step") for p in parts],
        "train_minutes": None
        if any(p.get("train_minutes") is None for p in parts)
        else sum(p["train_minutes"] for p in parts),
        **error_rates(f"{corpus}/src-test.txt", f"{out}/pred-test.txt", f"{corpus}/tgt-test.txt"),
    }
    write_results("cmudict_ensemble", figures)
    return figures


def minutes(value):
    return "time not measured" if value is None else f"{value:.0f} min"


def table():
    rows = [
        "| model | WER, first pronunciation | PER | WER, any pronunciation | PER, nearest | "
        "training |",
        "| --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for name, label in (
        ("brnn", "onmt_lite, bidirectional LSTM (2x256, `make demo`'s model)"),
        ("transformer", "onmt_lite, Transformer (3+3 layers of 256, 4 heads)"),
    ):
        r = read_results(f"cmudict_{name}")
        if r:
            rows.append(
                f"| {label} | {r['wer_first']:.2f}% | {r['per_first']:.2f}% | {r['wer_any']:.2f}% "
                f"| {r['per_any']:.2f}% | {r['last_step']} steps, best at {r['best_step']}; "
                f"{minutes(r['train_minutes'])} |"
            )
    r = read_results("cmudict_ensemble")
    if r:
        rows.append(
            "| onmt_lite, the two as one ensemble (`-model BRNN TRANSFORMER`) | "
            f"{r['wer_first']:.2f}% | {r['per_first']:.2f}% | {r['wer_any']:.2f}% | "
            f"{r['per_any']:.2f}% | the models above (steps {r['steps'][0]} and {r['steps'][1]}) |"
        )
    rows += [f"| {name} | - | - | {wer} | {per} | (their split) |" for name, wer, per in LITERATURE]
    print("\n".join(rows))


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-model", choices=sorted(MODELS))
    parser.add_argument(
        "-train_steps", type=int, default=0, help="default: 40,000 (brnn), 8,000 (transformer)"
    )
    parser.add_argument("-valid_steps", type=int, help="default: 2,000 (brnn), 1,000 (transformer)")
    parser.add_argument("-early_stopping", type=int, default=4)
    parser.add_argument(
        "-train_from", help="go on from this checkpoint of the run before (to more -train_steps)"
    )
    parser.add_argument(
        "-score_only",
        action="store_true",
        help="decode and score WORK/MODEL/model_best.pt without training (a run stopped early, "
        "or shared with other jobs: its minutes are not given)",
    )
    parser.add_argument("-work", default="/tmp/onmt_lite_cmudict")
    parser.add_argument(
        "-ensemble",
        action="store_true",
        help="decode the test words with both trained models as one ensemble",
    )
    parser.add_argument(
        "-table", action="store_true", help="print the table of bench/results/cmudict_*.json"
    )
    args = parser.parse_args()
    if args.model:
        print(json.dumps(train_and_score(args), indent=2))
    if args.ensemble:
        print(json.dumps(ensemble_and_score(args), indent=2))
    table()


if __name__ == "__main__":
    main()
