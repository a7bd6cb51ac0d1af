"""What a training step costs the host, onmt_lite against OpenNMT-py 3.5.1: the kernels and reads of
one optimizer step counted on the CPU as on a GPU (the small Transformer of ``gpu_speed.py``).

    .venv/bin/python bench/host_cost_training.py [-steps 4] [-peer /tmp/peer-opennmt] [-dry_run]

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


def counting(step_function, toolkit: str, counts: list, total: int):
    """``step_function`` wrapped to count the steps after ``SKIPPED``, up to ``total`` of them, and
    write nothing else."""
    host_syncs = host_syncs_module()
    calls = []

    @functools.wraps(step_function)
    def step(*args, **kwargs):
        calls.append(None)
        if len(calls) <= SKIPPED or len(counts) >= total:
            return step_function(*args, **kwargs)
        with gpu_ways(toolkit), host_syncs.HostSyncCounter() as counter:
            result = step_function(*args, **kwargs)
        counts.append({"kernels": counter.kernels, "reads": counter.syncs})
        return result

    return step


def worker(toolkit: str, out: str, steps: int, arguments: list) -> None:
    """Train with ``arguments`` in this process (its toolkit's command line), counting."""
    import torch

    torch.set_num_threads(1)
    counts: list = []
    if toolkit == "onmt_lite":
        from onmt_lite.bin.train import main
        from onmt_lite.train import trainer

        trainer.Trainer.train_step = counting(trainer.Trainer.train_step, toolkit, counts, steps)
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


def prepared(work: str, peer: str | None) -> dict:
    """``{toolkit: its training arguments}`` of ``CONFIG`` on toy-ende, data made ready."""
    from quality import lite_args
    from train_speed import CONFIGS, prepare, toy_ende

    model_args, training, extra = CONFIGS[CONFIG]
    settings = prepare(CONFIG, model_args, training, work, peer, toy_ende())
    data = ["-data", f"{work}/lite", "-save_model", f"{work}/lite_model", "-overwrite"]
    arguments = {"onmt_lite": [*data, *lite_args(model_args, settings), *extra]}
    if peer is not None:
        arguments["OpenNMT-py"] = ["-config", f"{work}/peer.yaml"]
    return arguments


def count(toolkit: str, python: str, arguments: list, steps: int, work: str) -> list:
    out = os.path.join(work, f"{toolkit}.json")
    command = [python, os.path.abspath(__file__), "-worker", toolkit, out, str(steps), "--"]
    command += [*arguments, "-train_steps", str(SKIPPED + steps)]
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
    parser.add_argument("-worker", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("arguments", nargs="*", help=argparse.SUPPRESS)
    opt = parser.parse_args(argv)
    if opt.worker:
        toolkit, out, steps = opt.worker
        worker(toolkit, out, int(steps), opt.arguments)
        return
    os.makedirs(opt.work, exist_ok=True)
    peer = None if opt.dry_run else opt.peer
    if peer is not None:
        ensure_peer(peer)
    steps = 3 if opt.dry_run else opt.steps
    rows = {}
    for toolkit, arguments in prepared(opt.work, peer).items():
        python = sys.executable if toolkit == "onmt_lite" else peer_python(peer)
        counts = count(toolkit, python, arguments, steps, opt.work)
        rows[toolkit] = {
            "kernels": statistics.median(c["kernels"] for c in counts),
            "reads": statistics.median(c["reads"] for c in counts),
            "steps": counts,
        }
    print(f"the {CONFIG} configuration on toy-ende, medians of {steps} optimizer steps")
    print("| toolkit | kernels a step | reads a step |")
    print("| --- | ---: | ---: |")
    for toolkit, row in rows.items():
        print(f"| {toolkit} | {row['kernels']:.0f} | {row['reads']:.0f} |")
    if "OpenNMT-py" in rows:
        ratio = rows["OpenNMT-py"]["kernels"] / rows["onmt_lite"]["kernels"]
        print(f"OpenNMT-py / onmt_lite kernels a step: {ratio:.2f}x")
        from quality import write_results

        write_results("host_cost_training", {"config": CONFIG, "rows": rows})


if __name__ == "__main__":
    main()
