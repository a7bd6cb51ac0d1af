"""Quality side by side: onmt_lite and OpenNMT-py 3.5.1, same settings, same data, same machine.

    bench/quality.sh g2p      # g2p-sr, the same wall-clock budget each (-minutes, default 10)
    bench/quality.sh ende     # toy-ende, 1,000 steps each, with and without copy attention
    bench/quality.sh g2p -model transformer    # the small Transformer, the same time budget each
    bench/quality.sh ende -model transformer   # (-minutes, default 10; both tasks)
    # the settings for 10,000 pairs:
    bench/quality.sh ende -model transformer -subwords 8000 -dropout 0.3
    # another optimizer for both (1.x's Adafactor; its SparseAdam, without clipping for the peer's):
    bench/quality.sh g2p -optim adafactor -learning_rate 0.01 -results quality_g2p_adafactor
    bench/quality.sh g2p -optim sparseadam -learning_rate 0.001 -max_grad_norm 0 \
        -results quality_g2p_sparseadam

g2p: 2-layer brnn encoder, 2-layer decoder, hidden 256, embeddings 128, Adam 0.001, batch 64; exact
match of beam-5 output on src.valid. ende: the training issue's configuration (brnn 2x256, general
attention, input feed, Adam 0.001, batch 64, vocabulary 20000); BLEU (sacrebleu, 13a) of beam-5
output on src-val.txt. With ``-model transformer`` both tasks train the small Transformer of issue
32 (``TRANSFORMER`` and ``TRANSFORMER_TRAINING`` below: 2 layers, model size 256, 4 heads,
feed-forward 1024, batches of 4,096 tokens, Adam with the noam schedule) for the same wall-clock
time each, saving a checkpoint every ``-save_every`` steps; the newest complete checkpoint of each
is scored (its step is in the table). The peer is installed by
../shared/bench/install_opennmt_py.sh. A table is printed and the figures are written to
bench/results/quality_TASK.json (quality_TASK_transformer.json for the Transformer).
"""

import argparse
import glob
import json
import math
import os
import re
import subprocess
import sys
import time

from toolkits import REPO, SHARED, is_peer  # noqa: E402

LITE_BIN = os.path.dirname(sys.executable)


# OpenNMT-py 3.5.1 pickles argparse.Namespace into its checkpoints, which torch >= 2.6 refuses to
# load by default (weights_only=True); the peer's own commands get torch's documented override.
PEER_ENV = {**os.environ, "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}


def run(cmd, log, timeout=None):
    """Run ``cmd`` with output to ``log``; a timeout ends it (that is the wall-clock budget)."""
    start = time.time()
    env = PEER_ENV if "peer" in str(cmd[0]) or "opennmt" in str(cmd[0]) or is_peer(cmd) else None
    with open(log, "w") as out:
        try:
            subprocess.run(
                [str(c) for c in cmd],
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=timeout,
                check=True,
                env=env,
            )
        except subprocess.TimeoutExpired:
            pass
    return time.time() - start


def newest_checkpoint(pattern):
    """The checkpoint with the highest step number that torch can open."""
    import torch

    def step(path):
        return int(re.search(r"_step_(\d+)\.pt$", path).group(1))

    for path in sorted(glob.glob(pattern), key=step, reverse=True):
        try:
            torch.load(path, map_location="cpu", weights_only=False)
            return path, step(path)
        except Exception:  # a checkpoint cut by the time limit
            continue
    raise SystemExit(f"no usable checkpoint matches {pattern}")


def subword_files(data, pieces, work):
    """Train one sentencepiece BPE model of ``pieces`` pieces on both sides of the training data and
    write every file of ``data`` cut into pieces under ``work``; returns (the model, the new paths).
    Both toolkits then train on the same pieces, and their outputs are joined back into words before
    scoring (``join_pieces``), so that BLEU is computed on the corpus's own tokens."""
    import sentencepiece as spm

    # not beside normalised_copy's files, which keep the names
    work = os.path.join(work, f"bpe{pieces}")
    os.makedirs(work, exist_ok=True)
    prefix = os.path.join(work, "pieces")
    spm.SentencePieceTrainer.train(
        input=[data["src_train"], data["tgt_train"]],
        model_prefix=prefix,
        vocab_size=pieces,
        model_type="bpe",
        character_coverage=1.0,
        minloglevel=2,
    )
    model = spm.SentencePieceProcessor(model_file=prefix + ".model")
    cut = {}
    for key, path in data.items():
        # named apart from the words' files: first_lines's copies of both go to one folder
        cut[key] = os.path.join(work, "pieces_" + os.path.basename(path))
        with open(path, encoding="utf-8") as f, open(cut[key], "w", encoding="utf-8") as g:
            g.writelines(" ".join(model.encode(line.strip(), out_type=str)) + "\n" for line in f)
    return model, cut


def join_pieces(outputs, model):
    """Each toolkit's output lines with their pieces joined back into words."""
    return {t: [model.decode(line.split()) for line in lines] for t, lines in outputs.items()}


def normalised_copy(path, work):
    """The file with whitespace runs collapsed (OpenNMT-py 3.5.1 crashes on them)."""
    out = os.path.join(work, os.path.basename(path))
    with open(path, encoding="utf-8") as f, open(out, "w", encoding="utf-8") as g:
        g.writelines(" ".join(line.split()) + "\n" for line in f)
    return out


def machine():
    """The CPU the figures come from. This project's VM lands on different hosts from one day to the
    next, and their CPUs differ where it counts: an AMD EPYC (Zen 4) runs int8 products about three
    times as fast as float32 ones, a CPU with two full 512-bit FMA units about twice."""
    info = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                info.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    isa = {"avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_int8"}
    return {
        "cpu": info.get("model name", "unknown"),
        "family_model": f"{info.get('cpu family')}/{info.get('model')}",
        "isa": sorted(isa & set(info.get("flags", "").split())),
        "cores": os.cpu_count(),
    }


def results_path(name):
    return os.path.join(REPO, "bench", "results", f"{name}.json")


def read_results(name):
    """The figures of bench/results/NAME.json, or None when there is no such file."""
    if not os.path.exists(results_path(name)):
        return None
    with open(results_path(name), encoding="utf-8") as f:
        return json.load(f)


def write_results(name, figures):
    """Write ``figures`` to bench/results/NAME.json, with ``machine()`` when they are a dict."""
    if isinstance(figures, dict):
        figures = {**figures, "machine": machine()}
    os.makedirs(os.path.dirname(results_path(name)), exist_ok=True)
    with open(results_path(name), "w") as f:
        json.dump(figures, f, indent=2)


# The small Transformer of issue 32 in OpenNMT-py 3.x's option names (``lite_args`` gives
# onmt_lite's), and its training: token batches, Adam with the noam schedule, label smoothing.
TRANSFORMER = {
    "encoder_type": "transformer",
    "decoder_type": "transformer",
    "layers": 2,
    "hidden_size": 256,
    "word_vec_size": 256,
    "transformer_ff": 1024,
    "heads": 4,
    "position_encoding": True,
    "dropout": 0.1,
    "attention_dropout": 0.1,
    "param_init": 0,
    "param_init_glorot": True,
    # OpenNMT-py 3.x leaves out the biases of the attention's and the feed-forward's linear
    # layers unless told; 1.x's layers (and onmt_lite's) have them: the same parameters
    "add_qkvbias": True,
    "add_ffnbias": True,
}
TRANSFORMER_TRAINING = {
    "optim": "adam",
    "adam_beta2": 0.998,
    "decay_method": "noam",
    "warmup_steps": 8000,
    "learning_rate": 2,
    "batch_size": 4096,
    "batch_type": "tokens",
    "normalization": "tokens",
    "label_smoothing": 0.1,
}
# -subwords: one vocabulary for both sides and one embedding matrix for the encoder, the decoder and
# the generator (fewer parameters to learn from 10,000 pairs); share_vocab is preprocessing's in
# onmt_lite
SHARED_PIECES = {"share_vocab": True, "share_embeddings": True, "share_decoder_embeddings": True}
# OpenNMT-py 3.x options without a counterpart in onmt_lite: the biases above (onmt_lite's layers
# always have them), and bucket_size (-peer_bucket_size)
PEER_ONLY = ("add_qkvbias", "add_ffnbias", "bucket_size")
PEER_BUCKET_HELP = (
    "OpenNMT-py's bucket_size (default: its own, 262,144 examples: before its first step each "
    "data-loading worker reads the corpus over and over, 26 times for toy-ende, to fill one; "
    "a smaller one starts sooner, for dry runs)"
)
# onmt_lite_preprocess's options (the peer's build_vocab's or its config's)
PREPROCESS_ONLY = ("src_vocab_size", "tgt_vocab_size", "share_vocab")


def peer_config(path, data, model_args, train_args, work):
    lines = [
        f"save_data: {work}/peer",
        f"src_vocab: {work}/peer.vocab.src",
        f"tgt_vocab: {work}/peer.vocab.tgt",
        "overwrite: true",
        "data:",
        "  corpus_1:",
        f"    path_src: {data['src_train']}",
        f"    path_tgt: {data['tgt_train']}",
        "  valid:",
        f"    path_src: {data['src_valid']}",
        f"    path_tgt: {data['tgt_valid']}",
        f"save_model: {work}/peer_model",
    ]
    lines += [f"{k}: {v}" for k, v in {**model_args, **train_args}.items()]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def lite_args(model_args, train_args):
    renamed = {"hidden_size": "rnn_size", "copy_attn": "copy_attn"}
    args = []
    for key, value in {**model_args, **train_args}.items():
        if key in PREPROCESS_ONLY + PEER_ONLY:
            continue
        name = renamed.get(key, key)
        args += [f"-{name}"] if value is True else [f"-{name}", str(value)]
    return args


def train_both(task, data, peer_data, model_args, train_args, budget, work, peer, reuse=False):
    """Train onmt_lite and the peer; returns {toolkit: (checkpoint, step, seconds)}."""
    pre = [
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
        f"{work}/lite",
        "-overwrite",
        "-src_seq_length",
        200,
        "-tgt_seq_length",
        200,
    ]
    if "src_vocab_size" in model_args:
        pre += [
            "-src_vocab_size",
            model_args["src_vocab_size"],
            "-tgt_vocab_size",
            model_args["tgt_vocab_size"],
        ]
    if model_args.get("copy_attn"):
        pre += ["-dynamic_dict"]
    if model_args.get("share_vocab"):
        pre += ["-share_vocab"]
    run(pre, f"{work}/lite_preprocess.log")
    if (
        reuse
        and glob.glob(f"{work}/lite_model_step_*.pt")
        and glob.glob(f"{work}/peer_model_step_*.pt")
    ):
        return {
            "onmt_lite": (
                *newest_checkpoint(f"{work}/lite_model_step_*.pt"),
                logged_seconds(f"{work}/lite_train.log"),
            ),
            "OpenNMT-py": (
                *newest_checkpoint(f"{work}/peer_model_step_*.pt"),
                logged_seconds(f"{work}/peer_train.log"),
            ),
        }
    # a run that stopped half way (one toolkit's model missing) starts again: its checkpoints go,
    # or they would be taken for this run's
    for earlier in glob.glob(f"{work}/lite_model_*.pt") + glob.glob(f"{work}/peer_model_*.pt"):
        os.remove(earlier)
    seconds = run(
        [
            f"{LITE_BIN}/onmt_lite_train",
            "-data",
            f"{work}/lite",
            "-save_model",
            f"{work}/lite_model",
            *lite_args(model_args, train_args),
        ],
        f"{work}/lite_train.log",
        budget,
    )
    lite = (*newest_checkpoint(f"{work}/lite_model_step_*.pt"), seconds)
    peer_config(f"{work}/peer.yaml", peer_data, model_args, train_args, work)
    run(
        [f"{peer}/bin/onmt_build_vocab", "-config", f"{work}/peer.yaml", "-n_sample", -1],
        f"{work}/peer_vocab.log",
    )
    seconds = run(
        [f"{peer}/bin/onmt_train", "-config", f"{work}/peer.yaml"], f"{work}/peer_train.log", budget
    )
    return {
        "onmt_lite": lite,
        "OpenNMT-py": (*newest_checkpoint(f"{work}/peer_model_step_*.pt"), seconds),
    }


def logged_parameters(log):
    """The parameter count a training log states (onmt_lite: ``model: N parameters``, OpenNMT-py
    3.x: ``* number of parameters: N``), or None."""
    with open(log, encoding="utf-8", errors="replace") as f:
        found = re.search(r"model: (\d+) parameters|\* number of parameters: (\d+)", f.read())
    return int(found.group(1) or found.group(2)) if found else None


def check_models(lite_log, peer_log, model_args):
    """Check from the training logs that both toolkits built the model asked for: a Transformer's
    (or a CNN's) peer log must show OpenNMT-py's Transformer (CNN) modules (it logs the model),
    and the parameter counts must agree to 0.1% (onmt_lite's vocabularies have 4 entries more: its
    specials come on top of ``-src_vocab_size``, OpenNMT-py's count in it; 3,076 parameters for
    toy-ende's Transformer).
    Returns {toolkit: parameters}."""
    params = {"onmt_lite": logged_parameters(lite_log), "OpenNMT-py": logged_parameters(peer_log)}
    kind = model_args.get("encoder_type")
    if kind in ("transformer", "cnn"):
        with open(peer_log, encoding="utf-8", errors="replace") as f:
            text = f.read()
        prefix = "Transformer" if kind == "transformer" else "CNN"
        for module in (f"{prefix}Encoder(", f"{prefix}Decoder("):
            if module not in text:
                raise SystemExit(f"{peer_log}: OpenNMT-py did not build a {module[:-1]}")
    if (
        None in params.values()
        or abs(params["onmt_lite"] - params["OpenNMT-py"]) > 1e-3 * params["OpenNMT-py"]
    ):
        print(f"warning: the two models' parameters differ: {params} (logs {lite_log}, {peer_log})")
    return params


def logged_seconds(log):
    """The elapsed seconds of the last Step line of a training log (both toolkits log ``N sec``)."""
    with open(log, encoding="utf-8", errors="replace") as f:
        found = re.findall(r"Step +\d+/.*?(\d+) sec", f.read())
    return float(found[-1]) if found else float("nan")


# OpenNMT-py 3.5.1 saves a copy model's generator as {"linear.weight", ...} but looks for the
# parameter name alone when loading ("Missing key in checkpoint: generator.linear.weight"); moving
# the generator's tensors into "model" under their full names lets it load its own checkpoint.
REPAIR_PEER_COPY_CHECKPOINT = """
import sys, torch
c = torch.load(sys.argv[1], map_location="cpu", weights_only=False)
if c.get("generator") and "linear_copy.weight" in c["generator"]:
    c["model"].update({"generator." + k: v for k, v in c["generator"].items()})
    c["generator"] = None
torch.save(c, sys.argv[2])
"""


# And its onmt_translate builds batches without the copy data (inference_engine.py calls
# build_dynamic_dataset_iter without copy=True: "KeyError: 'src_map'"); this driver runs the same
# command with that argument set.
PEER_TRANSLATE_WITH_COPY_DATA = """
import functools, sys
import onmt.inference_engine as engine
engine.build_dynamic_dataset_iter = functools.partial(engine.build_dynamic_dataset_iter, copy=True)
from onmt.bin.translate import main
sys.argv = ["onmt_translate"] + sys.argv[1:]
main()
"""


def translate_both(models, src, work, peer):
    outputs = {}
    for toolkit, (checkpoint, _, _) in models.items():
        out = f"{work}/{toolkit}.pred"
        if toolkit == "OpenNMT-py":
            repaired = f"{work}/peer_model_for_translation.pt"
            run(
                [f"{peer}/bin/python", "-c", REPAIR_PEER_COPY_CHECKPOINT, checkpoint, repaired],
                f"{work}/peer_repair.log",
            )
            checkpoint = repaired
        binary = (
            [f"{LITE_BIN}/onmt_lite_translate"]
            if toolkit == "onmt_lite"
            else [f"{peer}/bin/python", "-c", PEER_TRANSLATE_WITH_COPY_DATA]
        )
        run(
            [
                *binary,
                "-model",
                checkpoint,
                "-src",
                src,
                "-output",
                out,
                "-beam_size",
                5,
                "-batch_size",
                32,
            ],
            f"{work}/{toolkit}_translate.log",
        )
        with open(out, encoding="utf-8") as f:
            outputs[toolkit] = [" ".join(line.split()) for line in f]
    return outputs


def gold_perplexity(models, src, tgt, work, peer):
    """Each toolkit's perplexity of the references ``tgt`` (each token and the end of sentence),
    from its translation command's gold scores: a measure of the model that does not need it to
    translate well. OpenNMT-py 3.5.1 logs the average score per sentence (its ``GOLD PPL`` is the
    exponential of that); the per-token one is computed from the token count here."""
    with open(tgt, encoding="utf-8") as f:
        lengths = [len(line.split()) + 1 for line in f]
    ppl = {}
    for toolkit, (checkpoint, _, _) in models.items():
        log = f"{work}/{toolkit}_gold.log"
        if toolkit == "onmt_lite":
            run(
                [
                    f"{LITE_BIN}/onmt_lite_translate",
                    "-model",
                    checkpoint,
                    "-src",
                    src,
                    "-tgt",
                    tgt,
                    "-output",
                    f"{work}/{toolkit}_gold.pred",
                    "-beam_size",
                    1,
                    "-batch_size",
                    32,
                ],
                log,
            )
            pattern = r"GOLD AVG SCORE: (-?[\d.]+)"
            per_sentence = False
        else:
            run(
                [
                    f"{peer}/bin/onmt_translate",
                    "-model",
                    f"{work}/peer_model_for_translation.pt",
                    "-src",
                    src,
                    "-tgt",
                    tgt,
                    "-output",
                    f"{work}/{toolkit}_gold.pred",
                    "-beam_size",
                    1,
                    "-batch_size",
                    32,
                ],
                log,
            )
            pattern = r"GOLD SCORE: (-?[\d.]+)"
            per_sentence = True
        with open(log, encoding="utf-8", errors="replace") as f:
            score = float(re.findall(pattern, f.read())[-1])
        ppl[toolkit] = math.exp(-score * len(lengths) / sum(lengths) if per_sentence else -score)
    return ppl


def first_lines(path, n, work):
    """``path``, or with ``n`` a copy of its first ``n`` lines in ``work``."""
    if n is None:
        return path
    out = os.path.join(work, f"first_{n}_{os.path.basename(path)}")
    with open(path, encoding="utf-8") as f, open(out, "w", encoding="utf-8") as g:
        g.writelines(line for _, line in zip(range(n), f))
    return out


def score(task, outputs, ref_path):
    with open(ref_path, encoding="utf-8") as f:
        refs = [" ".join(line.split()) for line in f]
    if task == "g2p":
        return {
            t: 100.0 * sum(h == r for h, r in zip(hyps, refs)) / len(refs)
            for t, hyps in outputs.items()
        }
    from sacrebleu.metrics import BLEU

    return {t: BLEU().corpus_score(hyps, [refs]).score for t, hyps in outputs.items()}


def report(task, label, models, scores, metric):
    print(f"\n{task} {label}")
    print(f"{'toolkit':<12} {'steps':>7} {'train s':>8} {metric:>14}")
    for toolkit, (_, step, seconds) in models.items():
        print(f"{toolkit:<12} {step:>7} {seconds:>8.0f} {scores[toolkit]:>14.2f}")
    ratio = scores["onmt_lite"] / scores["OpenNMT-py"] if scores["OpenNMT-py"] > 0 else None
    print(
        "onmt_lite / OpenNMT-py: "
        f"{'n/a (OpenNMT-py scored 0)' if ratio is None else f'{ratio:.3f}'}"
    )
    return {
        "task": task,
        "setting": label,
        "metric": metric,
        "ratio": ratio,
        "toolkits": {
            t: {"checkpoint_step": s, "train_seconds": sec, metric: scores[t]}
            for t, (_, s, sec) in models.items()
        },
    }


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("task", choices=["g2p", "ende"])
    parser.add_argument(
        "-model",
        choices=["rnn", "transformer"],
        default="rnn",
        help="rnn: the settings above; transformer: the small Transformer, the same wall-clock "
        "budget each on both tasks",
    )
    parser.add_argument(
        "-minutes",
        type=float,
        default=10.0,
        help="g2p, and ende with -model transformer: wall-clock training budget each",
    )
    parser.add_argument(
        "-steps", type=int, default=1000, help="ende with -model rnn: training steps each"
    )
    parser.add_argument(
        "-warmup_steps",
        type=int,
        default=TRANSFORMER_TRAINING["warmup_steps"],
        help="-model transformer: the noam schedule's warm-up (a 10-minute run on 2 cores makes a "
        "few hundred steps of 4,096 tokens, where 8,000 warm-up steps keep the learning rate "
        "below 1e-4: lower it to compare models that have learnt something)",
    )
    parser.add_argument(
        "-save_every",
        type=int,
        default=50,
        help="-model transformer: checkpoint every N steps (the newest one within the budget "
        "is scored)",
    )
    parser.add_argument(
        "-optim",
        choices=["sgd", "adagrad", "adadelta", "adafactor", "adam", "sparseadam"],
        help="both toolkits' optimizer instead of Adam (with -learning_rate, its rate)",
    )
    parser.add_argument("-learning_rate", type=float, help="with -optim: its learning rate")
    parser.add_argument(
        "-max_grad_norm",
        type=float,
        help="with -optim: both toolkits' clipping (default 5; OpenNMT-py 3.5.1's sparseadam "
        "stops at step 1 with clipping on: torch has no norm of its sparse gradients)",
    )
    parser.add_argument("-peer", default="/tmp/peer-opennmt", help="OpenNMT-py venv")
    parser.add_argument("-peer_bucket_size", type=int, help=PEER_BUCKET_HELP)
    parser.add_argument("-work", default="/tmp/onmt_lite_quality")
    parser.add_argument(
        "-only", choices=["copy", "nocopy"], help="ende, rnn: run one of the two settings"
    )
    parser.add_argument(
        "-lines", type=int, help="score the first N lines of the validation set (default: all)"
    )
    parser.add_argument(
        "-subwords",
        type=int,
        help="-model transformer, ende: train both toolkits on sentencepiece BPE pieces, one "
        "model of N pieces for both languages, with shared vocabularies and embeddings "
        "(BLEU is scored on the words joined back)",
    )
    parser.add_argument(
        "-dropout", type=float, help="-model transformer: dropout (default: 0.1, issue 32's)"
    )
    parser.add_argument(
        "-results",
        help="write the figures to bench/results/RESULTS.json (default: quality_TASK...)",
    )
    parser.add_argument(
        "-reuse",
        action="store_true",
        help="Translate and score the checkpoints of an earlier run instead of training again",
    )
    opt = parser.parse_args()
    if not os.path.isdir(SHARED):
        raise SystemExit(f"needs {SHARED}")
    if not os.path.exists(f"{opt.peer}/bin/onmt_train"):
        subprocess.run(
            ["bash", os.path.join(SHARED, "bench", "install_opennmt_py.sh"), opt.peer], check=True
        )
    results = []
    if opt.task == "g2p":
        d = os.path.join(SHARED, "data", "g2p-sr")
        data = {
            "src_train": f"{d}/src.train",
            "tgt_train": f"{d}/tgt.train",
            "src_valid": f"{d}/src.valid",
            "tgt_valid": f"{d}/tgt.valid",
        }
        settings = [
            (
                "beam 5, exact match",
                {
                    "encoder_type": "brnn",
                    "enc_layers": 2,
                    "dec_layers": 2,
                    "hidden_size": 256,
                    "word_vec_size": 128,
                },
            )
        ]
        train_args = {
            "optim": "adam",
            "learning_rate": 0.001,
            "batch_size": 64,
            "train_steps": 1000000,
            "valid_steps": 1000000,
            "save_checkpoint_steps": 250,
            "seed": 1,
        }
        budget = opt.minutes * 60
        metric = "exact match %"
        ref = data["tgt_valid"]
    else:
        d = os.path.join(SHARED, "data", "toy-ende")
        data = {
            "src_train": f"{d}/src-train.txt",
            "tgt_train": f"{d}/tgt-train.txt",
            "src_valid": f"{d}/src-val.txt",
            "tgt_valid": f"{d}/tgt-val.txt",
        }
        base = {
            "encoder_type": "brnn",
            "enc_layers": 2,
            "dec_layers": 2,
            "hidden_size": 256,
            "word_vec_size": 256,
            "global_attention": "general",
            "input_feed": 1,
            "src_vocab_size": 20000,
            "tgt_vocab_size": 20000,
        }
        settings = [
            ("no copy, BLEU beam 5", base),
            ("copy_attn, BLEU beam 5", {**base, "copy_attn": True}),
        ]
        settings = [
            s for s in settings if opt.only is None or (opt.only == "copy") == ("copy_attn" in s[1])
        ]
        train_args = {
            "optim": "adam",
            "learning_rate": 0.001,
            "batch_size": 64,
            "train_steps": opt.steps,
            "valid_steps": 1000000,
            "save_checkpoint_steps": opt.steps,
            "seed": 1,
        }
        budget = None
        metric = "BLEU"
        ref = data["tgt_valid"]
    if opt.model == "transformer":
        vocab = {"src_vocab_size": 20000, "tgt_vocab_size": 20000} if opt.task == "ende" else {}
        settings = [
            (
                f"transformer, {'BLEU beam 5' if opt.task == 'ende' else 'beam 5, exact match'}",
                {**TRANSFORMER, **vocab},
            )
        ]
        if opt.dropout is not None:
            settings = [
                (f"{label}, dropout {opt.dropout}", {**args, "dropout": opt.dropout})
                for label, args in settings
            ]
        if opt.subwords:
            settings = [
                (f"{label}, {opt.subwords} BPE pieces shared", {**args, **SHARED_PIECES})
                for label, args in settings
            ]
        train_args = {
            **TRANSFORMER_TRAINING,
            "warmup_steps": opt.warmup_steps,
            "train_steps": 1000000,
            "valid_steps": 1000000,
            "save_checkpoint_steps": opt.save_every,
            "keep_checkpoint": 3,
            "seed": 1,
        }
        budget = opt.minutes * 60
    if opt.optim is not None:
        train_args = {**train_args, "optim": opt.optim}
        train_args.pop("adam_beta2", None)  # the Transformer's: Adam's only
        if opt.learning_rate is not None:
            train_args["learning_rate"] = opt.learning_rate
        if opt.max_grad_norm is not None:
            train_args["max_grad_norm"] = opt.max_grad_norm
        optimizer = f"{opt.optim} {train_args['learning_rate']:g}"
        if opt.max_grad_norm is not None:
            optimizer += f" max_grad_norm {opt.max_grad_norm:g}"
        settings = [(f"{label}, {optimizer}", args) for label, args in settings]
    if opt.peer_bucket_size:
        train_args["bucket_size"] = opt.peer_bucket_size
    for label, model_args in settings:
        work = os.path.join(opt.work, opt.task, re.sub(r"\W+", "_", label))
        os.makedirs(work, exist_ok=True)
        pieces, task_data = (
            subword_files(data, opt.subwords, work)
            if opt.subwords and opt.model == "transformer" and opt.task == "ende"
            else (None, data)
        )
        peer_data = {k: normalised_copy(v, work) for k, v in task_data.items()}
        models = train_both(
            opt.task,
            task_data,
            peer_data,
            model_args,
            train_args,
            budget,
            work,
            opt.peer,
            opt.reuse,
        )
        check_models(f"{work}/lite_train.log", f"{work}/peer_train.log", model_args)
        src, refs = (first_lines(path, opt.lines, work) for path in (task_data["src_valid"], ref))
        outputs = translate_both(models, src, work, opt.peer)
        if pieces is not None:
            outputs = join_pieces(outputs, pieces)
        results.append(report(opt.task, label, models, score(opt.task, outputs, refs), metric))
        results[-1].update({"lines": opt.lines or "all", "peer_bucket_size": opt.peer_bucket_size})
        if opt.model == "transformer" and opt.task == "ende":
            # in pieces with -subwords
            gold_refs = first_lines(task_data["tgt_valid"], opt.lines, work)
            results[-1]["reference_perplexity"] = gold_perplexity(
                models, src, gold_refs, work, opt.peer
            )
            print(f"perplexity of the references: {results[-1]['reference_perplexity']}")
        if opt.model == "transformer":
            results[-1].update(
                {
                    "warmup_steps": opt.warmup_steps,
                    "minutes": opt.minutes,
                    "subwords": opt.subwords,
                    "dropout": model_args["dropout"],
                }
            )
        name = f"quality_{opt.task}" + ("_transformer" if opt.model == "transformer" else "")
        write_results(
            opt.results or name + (f"_{opt.only}" if opt.only and opt.model == "rnn" else ""),
            results,
        )


if __name__ == "__main__":
    main()
