"""What decoding costs the host, onmt_lite against OpenNMT-py 3.5.1 on the same weights: timed and
counted on the CPU, as a stand-in for GPU decoding, where the host sets the pace.

    .venv/bin/python bench/host_cost.py [-model transformer|rnn] [-lines 2000] [-rounds 3] \\
        [-peer /tmp/peer-opennmt] [-dry_run]

On a GPU a small model's decoding step takes the device a few microseconds a kernel, while the
host spends about as much or more on each: Python, PyTorch's dispatch and the launch, and a wait
for the device at every read of a tensor's values (``utils/host_syncs.py``). Where the device is
idle that host time is the whole time, and what sets it is how many kernels and reads a run makes.
Those are the same on any device, so they are counted here on the CPU, as on a GPU
(``utils.cpu_paths.as_on_a_gpu``: onmt_lite's CPU-only ways off, so no packed weights, one stream),
for both toolkits' searches at the GPU benchmark's batch sizes (``gpu_translate_speed.py``): beam 5
at 32 and 256 sentences, greedy at 256.

The model (``-model``): a Transformer of 2 + 2 layers of 64 (4 heads, feed-forward 128), or an RNN
(a bidirectional LSTM encoder and an input-feeding LSTM decoder with general attention, 2 layers of
64), trained 400 steps on g2p-sr (characters: a vocabulary of about 60, outputs of about 8 tokens),
converted for OpenNMT-py by ``onmt_lite_convert -to opennmt-py`` (the same weights: both write the
same lines, checked). The RNN's counts overstate a GPU's in both toolkits alike: the CPU runs an
LSTM cell as a dozen ATen operations where CUDA fuses them into one kernel (and the encoder's
layers into cuDNN's).
Each toolkit decodes the first ``-lines`` lines of g2p-sr's src.train (a speed test: training lines
do as well as any) with the same search (no length penalty, at most 100 tokens, the peer's cut at
1.25 x the source off), in a process of its own on one thread. In that process: one batch to warm
up, the timed call (``Translator.translate`` / the peer's ``InferenceEnginePY.infer_list``: the
batches' building, the search and the results, no model loading), then the same call again under
``HostSyncCounter``:

- steps: ``log_softmax`` calls (each toolkit takes one a decoding step over all its rows);
- kernels: ATen operations other than views (a view launches nothing on a GPU);
- reads: reads of a tensor's values and copies to the host (``HostSyncCounter.syncs``).
  Everything inside the call is counted, the batches' building included, in both toolkits; on a
  GPU a read of a tensor still on the host waits for nothing, so these bound the syncs from above
  (``tests/unit/test_gpu_decoding.py`` counts onmt_lite's as on a GPU: at most 1 a step).

The seconds are the CPU's: at 32 sentences and more the CPU's arithmetic is much of them (its
attention kernel takes some 250 microseconds a call at beam 5, batch 32), so they are no stand-in
for a GPU's time; the counts are.

Rounds alternate the toolkits (A B A B); the table gives median seconds, their ratio (the peer's
over onmt_lite's: above 1, onmt_lite is faster) and the counts. Figures go to
bench/results/host_cost_MODEL.json. ``-dry_run``: 100 lines, one round, a model trained 20 steps,
no peer.
"""

import argparse
import contextlib
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from toolkits import REPO, SHARED, ensure_peer, lite, peer_python  # noqa: E402

SEARCHES = {
    "beam 5, batch 32": (5, 32),
    "beam 5, batch 256": (5, 256),
    "greedy, batch 256": (1, 256),
}
TRAINING = ["-layers", "2", "-rnn_size", "64", "-word_vec_size", "64", "-dropout", "0.1"]
TRAINING += ["-batch_size", "64", "-optim", "adam", "-learning_rate", "0.002", "-seed", "1"]
MODELS = {
    "transformer": [
        *("-encoder_type", "transformer", "-decoder_type", "transformer", "-position_encoding"),
        *("-heads", "4", "-transformer_ff", "128"),
    ],
    "rnn": ["-encoder_type", "brnn", "-global_attention", "general"],
}
TRAIN_STEPS = 400
MAX_LENGTH = 100
# OpenNMT-py 3.5.1's defaults search another way (an average length penalty, outputs cut at 1.25 x
# the source): both toolkits are given the same search
PEER_SEARCH = ["-length_penalty", "none", "-alpha", "0", "-max_length_ratio", "0"]
PEER_ENV = {**os.environ, "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}  # see quality.py's PEER_ENV


def host_syncs_module():
    """onmt_lite's ``utils/host_syncs.py``, loaded from its file: the peer's Python has no
    onmt_lite, and the module needs torch alone."""
    path = os.path.join(REPO, "onmt_lite", "utils", "host_syncs.py")
    spec = importlib.util.spec_from_file_location("onmt_lite_host_syncs", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def counted(call, host_syncs) -> dict:
    """``call()`` under ``host_syncs.HostSyncCounter``: kernels (operations but views), views,
    reads of tensors' values, and the ``log_softmax`` calls (a decoding step's)."""
    with host_syncs.HostSyncCounter() as counter:
        call()
    return {
        "steps": counter.counts["log_softmax"] + counter.counts["_log_softmax"],
        "kernels": counter.kernels,
        "views": counter.operations - counter.kernels,
        "reads": counter.syncs,
    }


def gpu_ways(toolkit: str):
    """A context in which ``toolkit`` computes as on a GPU: onmt_lite's CPU-only paths off
    (``utils.cpu_paths``); the peer has none."""
    if toolkit != "onmt_lite":
        return contextlib.nullcontext()
    sys.path.insert(0, REPO)
    from onmt_lite.utils.cpu_paths import as_on_a_gpu

    return as_on_a_gpu()


def lite_worker(model: str, beam: int, batch: int):
    """onmt_lite's ``decode(lines)`` (loaded within ``gpu_ways``: no packed weights, one stream)."""
    from onmt_lite import Translator

    translator = Translator.load(
        [model],
        beam_size=beam,
        batch_size=batch,
        attention=False,
        max_length=MAX_LENGTH,
        length_penalty="none",
        alpha=0.0,
    )

    def decode(lines):
        return [result.hypotheses[0] for result in translator.translate(lines)]

    return decode


def peer_worker(model: str, beam: int, batch: int):
    """OpenNMT-py's ``decode(lines)``, through its inference engine."""
    from onmt.inference_engine import InferenceEnginePY
    from onmt.opts import translate_opts
    from onmt.utils.parse import ArgumentParser

    parser = ArgumentParser()
    translate_opts(parser)
    common = ["-model", model, "-src", "-", "-output", os.devnull]  # the lines are returned
    common += ["-beam_size", beam, "-batch_size", batch]
    opt = parser.parse_args([str(a) for a in [*common, "-max_length", MAX_LENGTH, *PEER_SEARCH]])
    ArgumentParser.validate_translate_opts(opt)
    ArgumentParser._get_all_transform_translate(opt)
    ArgumentParser._validate_transforms_opts(opt)
    ArgumentParser.validate_translate_opts_dynamic(opt)
    engine = InferenceEnginePY(opt)

    def decode(lines):
        _, predictions = engine.infer_list(lines)
        return [n_best[0] for n_best in predictions]

    return decode


def worker(toolkit: str, model: str, src: str, lines: int, beam: int, batch: int, out: str):
    """One toolkit's run in this process: outputs, seconds and counts, as JSON into ``out``."""
    import torch

    torch.set_num_threads(1)
    with open(src, encoding="utf-8") as f:
        sources = [" ".join(line.split()) for line in f][:lines]
    make = lite_worker if toolkit == "onmt_lite" else peer_worker
    host_syncs = host_syncs_module()
    with gpu_ways(toolkit):
        decode = make(model, beam, batch)
        decode(sources[:batch])  # warm-up: first-call costs are not decoding
        start = time.perf_counter()
        outputs = decode(sources)
        seconds = time.perf_counter() - start
        figures = counted(lambda: decode(sources), host_syncs)
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"outputs": outputs, "seconds": seconds, **figures}, f)


def run_worker(toolkit, python, model, opt, lines, search, work) -> dict:
    beam, batch = SEARCHES[search]
    out = os.path.join(work, "run.json")
    command = [python, os.path.abspath(__file__), "-worker", toolkit, model, opt.src]
    command += [str(lines), str(beam), str(batch), out]
    env = PEER_ENV if toolkit == "OpenNMT-py" else None
    with open(os.path.join(work, f"{toolkit}.log"), "w") as log:
        subprocess.run(command, check=True, env=env, stdout=log, stderr=subprocess.STDOUT)
    with open(out, encoding="utf-8") as f:
        return json.load(f)


def train_model(work: str, steps: int, kind: str) -> str:
    """The small model ``kind`` on g2p-sr (trained once per work directory)."""
    model = os.path.join(work, f"model_step_{steps}.pt")
    if os.path.exists(model):
        return model
    data = os.path.join(SHARED, "data", "g2p-sr")
    prefix = os.path.join(work, "data")
    files = [f"-train_src {data}/src.train -train_tgt {data}/tgt.train"]
    files += [f"-valid_src {data}/src.valid -valid_tgt {data}/tgt.valid"]
    preprocess = [*lite("preprocess"), *" ".join(files).split(), "-save_data", prefix]
    subprocess.run(preprocess, check=True)
    training = ["-data", prefix, "-save_model", os.path.join(work, "model")]
    training += ["-train_steps", str(steps), "-valid_steps", str(steps)]
    subprocess.run([*lite("train"), *MODELS[kind], *TRAINING, *training], check=True)
    return model


def table(rows: list) -> None:
    """The figures, then per search the peer's over onmt_lite's (above 1: onmt_lite does less)."""
    columns = ["search", "toolkit", "seconds", "steps", "kernels", "a step", "views a step"]
    print("| " + " | ".join([*columns, "reads", "a step"]) + " |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for row in rows:
        steps = row["steps"]
        print(
            f"| {row['search']} | {row['toolkit']} | {row['seconds']:.3f} | {steps} | "
            f"{row['kernels']} | {row['kernels'] / steps:.1f} | {row['views'] / steps:.1f} | "
            f"{row['reads']} | {row['reads'] / steps:.2f} |"
        )
    for row in rows:
        if "peer_over_lite" in row:
            ratios = ", ".join(f"{k} {v:.2f}x" for k, v in row["peer_over_lite"].items())
            same = f"{row['identical_lines']} of {row['lines']} lines identical"
            print(f"{row['search']}: OpenNMT-py / onmt_lite: {ratios}; {same}")


def measure(opt, lines, rounds, model, peer_model, work) -> list:
    toolkits = {"onmt_lite": (sys.executable, model)}
    if peer_model:
        toolkits["OpenNMT-py"] = (peer_python(opt.peer), peer_model)
    rows = []
    for search in SEARCHES:
        runs = {toolkit: [] for toolkit in toolkits}
        for _ in range(rounds):
            for toolkit, (python, checkpoint) in toolkits.items():
                done = run_worker(toolkit, python, checkpoint, opt, lines, search, work)
                runs[toolkit].append(done)
        for toolkit, done in runs.items():
            last = done[-1]
            rows.append(
                {
                    "search": search,
                    "toolkit": toolkit,
                    "seconds": statistics.median(run["seconds"] for run in done),
                    **{name: last[name] for name in ("steps", "kernels", "views", "reads")},
                }
            )
        if peer_model:
            lite_row, peer_row = rows[-2], rows[-1]
            lite_row["peer_over_lite"] = {
                name: peer_row[name] / max(lite_row[name], 1e-9)
                for name in ("seconds", "kernels", "reads")
            }
            outputs = (runs[toolkit][-1]["outputs"] for toolkit in toolkits)
            lite_row["identical_lines"] = sum(a == b for a, b in zip(*outputs))
            lite_row["lines"] = lines
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-model", choices=sorted(MODELS), default="transformer", help="the model")
    parser.add_argument("-src", default=os.path.join(SHARED, "data", "g2p-sr", "src.train"))
    parser.add_argument("-lines", type=int, default=2000)
    parser.add_argument("-rounds", type=int, default=3)
    parser.add_argument("-peer", default="/tmp/peer-opennmt", help="OpenNMT-py 3.5.1's venv")
    parser.add_argument("-work", default="/tmp/onmt_lite_host_cost")
    parser.add_argument("-dry_run", action="store_true", help="100 lines, one round, no peer")
    parser.add_argument("-worker", nargs=7, help=argparse.SUPPRESS)
    opt = parser.parse_args(argv)
    if opt.worker:
        toolkit, model, src, lines, beam, batch, out = opt.worker
        worker(toolkit, model, src, int(lines), int(beam), int(batch), out)
        return
    work = os.path.join(opt.work, opt.model, "dry_run" if opt.dry_run else "full")
    os.makedirs(work, exist_ok=True)
    model = train_model(work, 20 if opt.dry_run else TRAIN_STEPS, opt.model)
    peer_model = None
    if not opt.dry_run:
        ensure_peer(opt.peer)
        peer_model = os.path.join(work, "peer_model.pt")
        convert = [*lite("convert"), "-model", model, "-to", "opennmt-py", "-output", peer_model]
        subprocess.run([*convert, "-overwrite"], check=True)
    lines = 100 if opt.dry_run else opt.lines
    rounds = 1 if opt.dry_run else opt.rounds
    rows = measure(opt, lines, rounds, model, peer_model, work)
    print(f"the {opt.model}: {lines} lines of {opt.src}, one thread, median of {rounds} rounds")
    table(rows)
    if not opt.dry_run:
        from quality import write_results

        results = {"model": opt.model, "lines": lines, "rounds": rounds, "rows": rows}
        write_results(f"host_cost_{opt.model}", results)


if __name__ == "__main__":
    main()
