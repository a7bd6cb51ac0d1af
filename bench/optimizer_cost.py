"""What an optimizer costs: its state's memory, a step's time and a step's host reads and kernels,
onmt_lite's Adam, Adafactor and SparseAdam against OpenNMT-py 3.5.1's Adafactor (1.x's class).

    .venv/bin/python bench/optimizer_cost.py [-model faq|small] [-steps 5] [-peer /tmp/peer-opennmt]
    .venv/bin/python bench/optimizer_cost.py -device cuda  # on a GPU (optimizer_cost_gpu.json)
    .venv/bin/python bench/optimizer_cost.py -dry_run      # the small model, onmt_lite alone

The parameters are those of onmt_lite's Transformer: ``faq`` 1.x's FAQ recipe (6 + 6 layers of
512, 8 heads, feed-forward 2,048) with vocabularies of 32,000 words, ``small`` gpu_speed.py's (2 + 2
layers of 256, 4 heads, feed-forward 1,024) with 20,000. Their gradients are drawn once from a
seed (-optim sparseadam's lookup tables: the rows of 4,096 random tokens each, coalesced, as the
trainer hands them over). Each optimizer makes one step to build its state, then ``-steps`` timed
ones (the median is quoted) and one counted with ``HostSyncCounter``: its host reads (syncs on a
GPU: 1.x's Adafactor reads two norms per tensor) and ATen operations but views (kernels on a GPU).
Only the torch optimizers' ``step()`` runs (no clipping, no schedule: the same in all), onmt_lite's
with glibc's allocator set to reuse freed memory, as ``onmt_lite_train`` sets it on the CPU. The
state is what the optimizer holds after the steps. OpenNMT-py's AdaFactor runs in the peer's venv on
the same shapes and gradients (drawn there from the same seed), built as 1.x built it, twice: with
glibc's defaults, as OpenNMT-py runs, and with memory reused as onmt_lite's (its temporaries then
cost no page faults either). Figures to bench/results/optimizer_cost.json.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from toolkits import REPO, ensure_peer, peer_python  # noqa: E402

from onmt_lite.utils.memory import reuse_freed_memory  # noqa: E402

MODELS = {
    "faq": (
        [
            "-layers",
            6,
            "-rnn_size",
            512,
            "-word_vec_size",
            512,
            "-heads",
            8,
            "-transformer_ff",
            2048,
        ],
        32000,
    ),
    "small": (
        [
            "-layers",
            2,
            "-rnn_size",
            256,
            "-word_vec_size",
            256,
            "-heads",
            4,
            "-transformer_ff",
            1024,
        ],
        20000,
    ),
}
TRANSFORMER = ["-encoder_type", "transformer", "-decoder_type", "transformer"]
TOKENS = 4096  # a batch's tokens: the rows a lookup table's sparse gradient holds
LEARNING_RATE = 1e-4
SEED = 1


def gradients(named_shapes: list, sparse_names: set, seed: int = SEED) -> dict:
    """``{name: gradient}``, the same for every process with this torch: dense normal values, or
    for ``sparse_names`` the coalesced rows of ``TOKENS`` random tokens."""
    generator = torch.Generator().manual_seed(seed)
    grads = {}
    for name, shape in named_shapes:
        dense = torch.randn(shape, generator=generator) * 1e-3
        if name in sparse_names:
            rows = torch.randint(0, shape[0], (1, TOKENS), generator=generator)
            dense = torch.sparse_coo_tensor(rows, dense[rows[0]], shape, check_invariants=True)
            dense = dense.coalesce()
        grads[name] = dense
    return grads


def measure(step, steps: int, state_of, device: str = "cpu") -> dict:
    """Time ``step`` (after one warm-up call; on a GPU until the device is done), count one call,
    and size ``state_of()``."""
    from onmt_lite.utils.host_syncs import HostSyncCounter

    def finished():
        if device != "cpu":
            torch.cuda.synchronize(device)

    step()
    times = []
    for _ in range(steps):
        finished()
        start = time.perf_counter()
        step()
        finished()
        times.append(time.perf_counter() - start)
    with HostSyncCounter() as counter:
        step()
    state = state_of()
    tensors = [v for s in state.values() for v in s.values() if torch.is_tensor(v)]
    return {
        "step_ms": statistics.median(times) * 1000,
        "state_mib": sum(t.numel() * t.element_size() for t in tensors) / 2**20,
        "host_reads": counter.syncs,
        "kernels": counter.kernels,
    }


def lite_figures(model_name: str, kind: str, steps: int, device: str) -> tuple[dict, list, set]:
    """onmt_lite's optimizer ``kind`` on the model's parameters, on ``device``."""
    from onmt_lite.data.vocab import Vocab
    from onmt_lite.models.builder import build_model
    from onmt_lite.opts import build_parser, model_opts, parse, train_opts
    from onmt_lite.train.optim import Optimizer

    args, vocab_size = MODELS[model_name]
    options = ["-data", "unused", *TRANSFORMER, *args, "-optim", kind]
    opt = parse(build_parser("bench", [model_opts, train_opts]), list(map(str, options)))
    opt.learning_rate = LEARNING_RATE
    words = Vocab([f"w{i}" for i in range(vocab_size - 4)])
    torch.manual_seed(SEED)
    model = build_model(opt, {"src": words, "tgt": words}).to(device)
    optim = Optimizer(model, opt, opt.rnn_size)
    named = list(model.named_parameters())
    sparse = {n for n, p in named if isinstance(optim.optimizer_of[id(p)], torch.optim.SparseAdam)}
    shapes = [(n, tuple(p.shape)) for n, p in named]
    grads = gradients(shapes, sparse)
    for name, param in named:
        param.grad = grads[name].to(device)

    def step():
        for optimizer in optim.optimizers:
            optimizer.step()

    def state_of():
        return {id(p): s for o in optim.optimizers for p, s in o.state.items()}

    figures = measure(step, steps, state_of, device)
    figures["parameters"] = sum(p.numel() for _, p in named)
    return figures, shapes, sparse


def peer_figures(peer: str, shapes: list, steps: int, work: str, reuse: bool, device: str) -> dict:
    """OpenNMT-py 3.5.1's AdaFactor on ``shapes``, in the peer's venv (this script, -as_peer);
    ``reuse``: with glibc set to reuse freed memory."""
    os.makedirs(work, exist_ok=True)
    request = os.path.join(work, "shapes.json")
    with open(request, "w") as f:
        json.dump({"shapes": shapes, "steps": steps, "reuse": reuse, "device": device}, f)
    paths = [REPO, *filter(None, [os.environ.get("PYTHONPATH")])]  # the peer's own, where set
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    command = [peer_python(peer), os.path.abspath(__file__), "-as_peer", request]
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"OpenNMT-py's Adafactor failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def as_peer(request: str) -> None:
    """Run OpenNMT-py's AdaFactor as its build_torch_optimizer made it, print its figures."""
    import warnings

    from onmt.utils.optimizers import AdaFactor

    warnings.filterwarnings("ignore")  # its deprecated add_(scalar, tensor) calls
    with open(request) as f:
        wanted = json.load(f)
    if wanted["reuse"]:
        reuse_freed_memory()
    shapes = [(name, tuple(shape)) for name, shape in wanted["shapes"]]
    device = wanted["device"]
    grads = gradients(shapes, set())
    params = [torch.nn.Parameter(torch.randn(shape, device=device) * 0.05) for _, shape in shapes]
    for (name, _), param in zip(shapes, params):
        param.grad = grads[name].to(device)
    optimizer = AdaFactor(
        params, non_constant_decay=True, enable_factorization=True, weight_decay=0
    )
    for group in optimizer.param_groups:  # its Optimizer sets the rate before each step
        group["lr"] = LEARNING_RATE
    figures = measure(optimizer.step, wanted["steps"], lambda: optimizer.state, device)
    print(json.dumps(figures))


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-model", choices=sorted(MODELS), default="faq")
    parser.add_argument("-steps", type=int, default=5)
    parser.add_argument("-device", default="cpu", help="cpu, or a CUDA device (cuda, cuda:1)")
    parser.add_argument("-peer", default="/tmp/peer-opennmt", help="OpenNMT-py 3.5.1's venv")
    parser.add_argument("-work", default="/tmp/onmt_lite_optimizer_cost")
    parser.add_argument("-dry_run", action="store_true", help="the small model, onmt_lite alone")
    parser.add_argument("-as_peer", help=argparse.SUPPRESS)
    opt = parser.parse_args()
    if opt.as_peer:
        return as_peer(opt.as_peer)
    model = "small" if opt.dry_run else opt.model
    device = "cpu" if opt.dry_run else opt.device
    on_cpu = device == "cpu"
    if device != "cpu" and not torch.cuda.is_available():
        raise SystemExit(f"-device {device}: this machine has no CUDA device")
    reuse_freed_memory(device)  # as onmt_lite_train does on the CPU (OpenNMT-py's commands do not)
    rows = {}
    for kind in ("adam", "adafactor", "sparseadam"):
        rows[f"onmt_lite {kind}"], shapes, _ = lite_figures(model, kind, opt.steps, device)
    if not opt.dry_run:
        ensure_peer(opt.peer)
        peer_runs = [(False, "OpenNMT-py adafactor"), (True, "the same, memory reused")]
        for reuse, name in peer_runs[: 2 if on_cpu else 1]:  # glibc's setting: the CPU's only
            rows[name] = peer_figures(opt.peer, shapes, opt.steps, opt.work, reuse, device)
    adam = rows["onmt_lite adam"]
    where = f"{torch.get_num_threads()} threads" if on_cpu else torch.cuda.get_device_name(device)
    print(f"{model}: {adam['parameters']:,} parameters, {where}")
    header = f"{'optimizer':24} {'state MiB':>10} {'x Adam':>7} {'step ms':>9} {'reads':>6}"
    print(f"{header} {'kernels':>8}")
    for name, row in rows.items():
        print(
            f"{name:24} {row['state_mib']:10.1f} {row['state_mib'] / adam['state_mib']:7.2f} "
            f"{row['step_ms']:9.1f} {row['host_reads']:6d} {row['kernels']:8d}"
        )
    if "OpenNMT-py adafactor" in rows:
        ours = rows["onmt_lite adafactor"]
        theirs = rows["OpenNMT-py adafactor"]
        ratio = theirs["step_ms"] / ours["step_ms"]
        line = f"Adafactor step time, OpenNMT-py / onmt_lite: {ratio:.2f}x"
        if "the same, memory reused" in rows:
            reused = rows["the same, memory reused"]["step_ms"] / ours["step_ms"]
            line += f" ({reused:.2f}x reused)"
        print(line)
    if not opt.dry_run:
        from quality import write_results

        name = "optimizer_cost" if on_cpu else "optimizer_cost_gpu"
        write_results(name, {"model": model, "device": device, "steps": opt.steps, "rows": rows})


if __name__ == "__main__":
    main()
