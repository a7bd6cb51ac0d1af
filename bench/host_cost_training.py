"""What a training step costs the host, onmt_lite against OpenNMT-py 3.5.1: the kernels and reads of
one optimizer step counted on the CPU as on a GPU (the small Transformer of ``gpu_speed.py``).

    .venv/bin/python bench/host_cost_training.py [-steps 4] [-peer /tmp/peer-opennmt] [-dry_run]
    .venv/bin/python bench/host_cost_training.py -graphs [-config transformer|standard]

On a GPU the small Transformer (2 + 2 layers of 256, 4,096-token batches) takes the device a few
milliseconds a step, and the host spends some microseconds on each kernel it launches: where the
host is the slower, the kernels a step set the pace (``host_cost.py`` says the same of decoding).
Both toolkits train it on toy-ende with ``train_speed.py``'s settings (its ``transformer``
configuration: the same model, batches, optimizer, dropout and label smoothing), each in a process
of its own on one thread, and count the optimizer steps after the first two (``-steps`` of them)
with ``HostSyncCounter``: onmt_lite's ``Trainer.train_step`` within ``utils.cpu_paths.as_on_a_gpu``
(dropout, the loss's chunks and the arg-max as a GPU runs them), OpenNMT-py's
``Trainer._gradient_accumulation`` (its forward, loss, backward and ``optim.step()``) with
PyTorch's Adam told ``foreach=True``, which it picks by itself for parameters on a GPU. Batches are
built outside both (onmt_lite's iterator, OpenNMT-py's data-loading processes).

Kernels: ATen operations but views. Reads: reads of tensor values and copies to the host; on a GPU
not all are syncs (a tensor on the host is read without a wait: OpenNMT-py's Adam reads its step
counts, on the host, per parameter; ``tests/unit/test_host_syncs.py`` counts onmt_lite's as on a
GPU: one a step). What the counts cannot show: a CPU kernel that is several ATen operations where
CUDA has one fused kernel (PyTorch's attention with dropout, ``-self_attn_type scaled-dot-flash``,
and the recurrent cells, so no RNN here). Figures go to bench/results/host_cost_training.json.
``-dry_run``: onmt_lite alone, 3 steps counted.

``-graphs``: onmt_lite alone, without and with ``-cuda_graphs`` (``train/graphed.py``; run here
without graphs, as its tests run it), the steps counted after ``GRAPHS_SKIPPED`` (most buckets
recorded by then), the operations of each replayed pass counted apart: a GPU launches a pass as
one graph, so the kernels left are what the host launches outside them. ``-config standard`` counts
the standard RNN instead (its LSTM cells are a dozen CPU operations where CUDA fuses them: the
count without graphs overstates a GPU's). Figures to bench/results/host_cost_training_graphs.json.
"""

import argparse
import contextlib
import functools
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from host_cost import PEER_ENV, gpu_ways, host_syncs_module  # noqa: E402
from toolkits import REPO, ensure_peer, peer_python  # noqa: E402

CONFIG = "transformer"  # train_speed.py's
SKIPPED = 2  # steps before those counted: the optimizer's state is made at the first
GRAPHS_SKIPPED = 120  # with -graphs: every toy-ende bucket recorded (the last new at batch 117)
REPLAYS = []  # the count under way: [counter, kernels inside replayed passes, replays]


def skipped_steps(toolkit: str) -> int:
    """The steps before those counted."""
    return GRAPHS_SKIPPED if toolkit == "onmt_lite+graphs" else SKIPPED


def counting(step_function, toolkit: str, counts: list, total: int, skipped: int = SKIPPED):
    """``step_function`` wrapped to count the steps after ``skipped``, up to ``total`` of them,
    and write nothing else (the kernels of replayed passes apart: ``replayed_apart``)."""
    host_syncs = host_syncs_module()
    calls = []

    @functools.wraps(step_function)
    def step(*args, **kwargs):
        calls.append(None)
        if len(calls) <= skipped or len(counts) >= total:
            return step_function(*args, **kwargs)
        with gpu_ways(toolkit), host_syncs.HostSyncCounter() as counter:
            REPLAYS.append([counter, 0, 0])
            result = step_function(*args, **kwargs)
            _, inside, replays = REPLAYS.pop()
        kernels = counter.kernels - inside
        counts.append({"kernels": kernels, "reads": counter.syncs, "replays": replays})
        return result

    return step


def replayed_apart():
    """onmt_lite's trainer with ``-cuda_graphs``' ``GraphedModel``, the operations of each
    replayed pass (``RecordedCall._replay_forward``, ``_replay_backward``) counted apart in
    ``REPLAYS``."""
    from onmt_lite.train import graphed, trainer

    step_function = trainer.Trainer.train_step

    def graphed_step(self, batches):
        if self.graphed is None:  # the command refuses -cuda_graphs without CUDA
            self.graphed = graphed.GraphedModel(self.model)
        return step_function(self, batches)

    def apart(method):
        def run(self, *args):
            if not REPLAYS:
                return method(self, *args)
            count = REPLAYS[-1]
            before = count[0].kernels
            result = method(self, *args)
            count[1] += count[0].kernels - before
            count[2] += 1
            return result

        return run

    trainer.Trainer.train_step = graphed_step
    # what a GPU replays; the copies into a bucket's buffers around it are the host's
    graphed.RecordedCall._replay_forward = apart(graphed.RecordedCall._replay_forward)
    graphed.RecordedCall._replay_backward = apart(graphed.RecordedCall._replay_backward)


def worker(toolkit: str, out: str, steps: int, arguments: list) -> None:
    """Train with ``arguments`` in this process (its toolkit's command line), counting."""
    import torch

    torch.set_num_threads(1)
    counts: list = []
    if toolkit.startswith("onmt_lite"):
        from onmt_lite.bin.train import main
        from onmt_lite.train import trainer

        if toolkit == "onmt_lite+graphs":
            replayed_apart()
        skipped = skipped_steps(toolkit)
        step = counting(trainer.Trainer.train_step, "onmt_lite", counts, steps, skipped)
        trainer.Trainer.train_step = step
        sys.argv = ["onmt_lite_train", *arguments]
    else:
        # as on a GPU, where PyTorch's Adam runs its foreach kernels by itself
        torch.optim.Adam.__init__ = functools.partialmethod(torch.optim.Adam.__init__, foreach=True)
        import onmt.trainer as trainer
        from onmt.bin.train import main

        step = trainer.Trainer._gradient_accumulation
        trainer.Trainer._gradient_accumulation = counting(step, toolkit, counts, steps)
        sys.argv = ["onmt_train", *arguments]
    with contextlib.suppress(SystemExit):
        main()
    with open(out, "w", encoding="utf-8") as f:
        json.dump(counts, f)


def prepared(work: str, peer: str | None, config: str = CONFIG) -> dict:
    """``{toolkit: its training arguments}`` of ``config`` on toy-ende, data made ready."""
    from quality import lite_args
    from train_speed import CONFIGS, prepare, toy_ende

    model_args, training, extra = CONFIGS[config]
    settings = prepare(config, model_args, training, work, peer, toy_ende())
    data = ["-data", f"{work}/lite", "-save_model", f"{work}/lite_model", "-overwrite"]
    arguments = {"onmt_lite": [*data, *lite_args(model_args, settings), *extra]}
    if peer is not None:
        arguments["OpenNMT-py"] = ["-config", f"{work}/peer.yaml"]
    return arguments


def count(toolkit: str, python: str, arguments: list, steps: int, work: str) -> list:
    out = os.path.join(work, f"{toolkit}.json")
    command = [python, os.path.abspath(__file__), "-worker", toolkit, out, str(steps), "--"]
    command += [*arguments, "-train_steps", str(skipped_steps(toolkit) + steps)]
    env = PEER_ENV if toolkit == "OpenNMT-py" else {**os.environ, "PYTHONPATH": REPO}
    with open(os.path.join(work, f"{toolkit}.log"), "w") as log:
        subprocess.run(command, check=True, env=env, stdout=log, stderr=subprocess.STDOUT)
    with open(out, encoding="utf-8") as f:
        return json.load(f)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-steps", type=int, default=4, help="steps counted")
    parser.add_argument("-peer", default="/tmp/peer-opennmt", help="OpenNMT-py 3.5.1's venv")
    parser.add_argument("-work", default="/tmp/onmt_lite_host_cost_training")
    parser.add_argument("-dry_run", action="store_true", help="onmt_lite alone, 3 steps")
    parser.add_argument(
        "-graphs", action="store_true", help="onmt_lite alone, without and with -cuda_graphs"
    )
    parser.add_argument("-config", choices=["transformer", "standard"], default=CONFIG)
    parser.add_argument("-worker", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("arguments", nargs="*", help=argparse.SUPPRESS)
    opt = parser.parse_args(argv)
    if opt.worker:
        toolkit, out, steps = opt.worker
        worker(toolkit, out, int(steps), opt.arguments)
        return
    work = opt.work if opt.config == CONFIG else f"{opt.work}_{opt.config}"
    os.makedirs(work, exist_ok=True)
    peer = None if opt.dry_run or opt.graphs else opt.peer
    if peer is not None:
        ensure_peer(peer)
    steps = 3 if opt.dry_run else opt.steps
    arguments = prepared(work, peer, opt.config)
    if opt.graphs:
        arguments["onmt_lite+graphs"] = arguments["onmt_lite"]
    rows = {}
    for toolkit, args in arguments.items():
        python = sys.executable if toolkit.startswith("onmt_lite") else peer_python(peer)
        counts = count(toolkit, python, args, steps, work)
        rows[toolkit] = {
            "kernels": statistics.median(c["kernels"] for c in counts),
            "reads": statistics.median(c["reads"] for c in counts),
            "replays": statistics.median(c["replays"] for c in counts),
            "steps": counts,
        }
    print(f"the {opt.config} configuration on toy-ende, medians of {steps} optimizer steps")
    print("| toolkit | kernels a step (outside replays) | replays | reads a step |")
    print("| --- | ---: | ---: | ---: |")
    for toolkit, row in rows.items():
        print(f"| {toolkit} | {row['kernels']:.0f} | {row['replays']:.0f} | {row['reads']:.0f} |")
    if opt.graphs and not opt.dry_run:
        from quality import write_results

        write_results(f"host_cost_training_graphs_{opt.config}", {"rows": rows})
    if "OpenNMT-py" in rows:
        ratio = rows["OpenNMT-py"]["kernels"] / rows["onmt_lite"]["kernels"]
        print(f"OpenNMT-py / onmt_lite kernels a step: {ratio:.2f}x")
        from quality import write_results

        write_results("host_cost_training", {"config": CONFIG, "rows": rows})


if __name__ == "__main__":
    main()
