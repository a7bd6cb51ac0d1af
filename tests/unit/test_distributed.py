"""Distributed training: 2 gloo processes on this machine take exactly the step of one process on
the concatenated batches (with accumulation, loss sharding, truncation, normalised by sentences or
tokens)."""

import re

import pytest
import torch
import torch.multiprocessing as mp

from onmt_lite.data.batch import ShardView
from onmt_lite.data.example import make_example
from onmt_lite.data.shards import make_shard
from onmt_lite.data.vocab import Vocab
from onmt_lite.loss import build_loss_compute
from onmt_lite.models.builder import build_model
from onmt_lite.opts import build_parser, model_opts, parse, train_opts
from onmt_lite.train.distributed import Distributed, check_options, exit_process, step_share
from onmt_lite.train.optim import Optimizer
from onmt_lite.train.trainer import Trainer
from onmt_lite.utils.errors import UserError

N_EXAMPLES = 16  # per step and accumulated batch: 8 sentences for each of the 2 processes


def setup(settings):
    """Model, trainer pieces and the examples' ShardView, the same in every process (seeded)."""
    torch.manual_seed(0)
    vocab = Vocab([f"w{i}" for i in range(30)])
    opt = parse(
        build_parser("test", [model_opts, train_opts]),
        [
            "-data",
            "unused",
            "-encoder_type",
            "brnn",
            "-layers",
            "2",
            "-rnn_size",
            "16",
            "-word_vec_size",
            "8",
            "-global_attention",
            "general",
            "-dropout",
            "0",
            "-optim",
            "sgd",
            "-learning_rate",
            "1",
            "-normalization",
            settings["norm"],
            *settings.get("extra", []),
        ],
    )
    model = build_model(opt, {"src": vocab, "tgt": vocab})
    draw = torch.Generator().manual_seed(1)
    words = vocab.itos[4:]

    def sentence():  # lengths differ, so the batches of the two processes pad differently
        return [
            words[j]
            for j in torch.randint(
                len(words), (int(torch.randint(2, 9, (1,), generator=draw)),), generator=draw
            )
        ]

    n = N_EXAMPLES * settings["accum"]
    view = ShardView(
        make_shard(
            [make_example(i, sentence(), sentence(), vocab, vocab, opt.copy_attn) for i in range(n)]
        )
    )
    return opt, model, vocab, view


def one_step(settings, dist=None):
    """One optimizer step; returns the parameters after it. Batch k of the step holds examples
    ``16k .. 16k + 15``; with 2 processes, rank r takes the half ``16k + 8r ..`` of each."""
    opt, model, vocab, view = setup(settings)
    if dist is not None:
        dist.broadcast_parameters(model)
    trainer = Trainer(
        model,
        loss_compute=build_loss_compute(model, vocab, opt),
        optim=Optimizer(model, opt, 16),
        shard_size=settings["shard"],
        trunc_size=settings.get("trunc", 0),
        norm_method=opt.normalization,
        dist=dist,
    )
    halves = [] if dist is None else list(range(dist.rank * 8, dist.rank * 8 + 8))
    batches = [
        view.batch([16 * k + i for i in (halves or range(16))]) for k in range(settings["accum"])
    ]
    stats = trainer.train_step(batches)
    return {n: p.detach().clone() for n, p in model.named_parameters()}, (stats.loss, stats.n_words)


SETTINGS = {
    "sentences": {"norm": "sents", "accum": 1, "shard": 0},
    "tokens": {"norm": "tokens", "accum": 1, "shard": 0},
    "accum 2": {"norm": "sents", "accum": 2, "shard": 0},
    "shards of 2": {"norm": "tokens", "accum": 1, "shard": 2},
    "accum 2, shards of 2, copy": {
        "norm": "tokens",
        "accum": 2,
        "shard": 2,
        "extra": ["-copy_attn"],
    },
    "truncated windows of 3, shards of 2": {"norm": "tokens", "accum": 1, "shard": 2, "trunc": 3},
}


def _worker(rank, store, path):
    # a file store: a free port picked beforehand can be taken by another connection before rank 0
    # binds it
    torch.distributed.init_process_group(
        "gloo", init_method=f"file://{store}", rank=rank, world_size=2
    )
    torch.set_num_threads(1)
    distributed = Distributed(rank, 2, torch.device("cpu"))
    # every setting in these two processes: starting two costs seconds of imports
    results = {name: one_step(settings, distributed) for name, settings in SETTINGS.items()}
    if rank == 0:
        torch.save(results, path)
    distributed.close()
    exit_process(0)


@pytest.fixture(scope="module")
def two_process_steps(tmp_path_factory):
    """``{setting: rank 0's parameters and statistics}`` after one step of 2 gloo processes on this
    machine for each of SETTINGS."""
    directory = tmp_path_factory.mktemp("two_processes")
    path = str(directory / "rank0.pt")
    mp.start_processes(
        _worker, args=(str(directory / "store"), path), nprocs=2, start_method="spawn"
    )
    return torch.load(path, weights_only=True)


@pytest.mark.parametrize("name", list(SETTINGS))
def test_two_processes_take_the_step_of_one_process_on_the_concatenated_batch(
    name, two_process_steps
):
    settings = SETTINGS[name]
    torch.set_num_threads(1)
    single, single_stats = one_step(settings)
    before = setup(settings)[1]  # the initial weights (seeded)
    distributed, dist_stats = two_process_steps[name]
    moved = max(float((single[n] - p.detach()).abs().max()) for n, p in before.named_parameters())
    assert moved > 1e-2  # the step changed the weights (lr 1): a wrong normaliser would show
    for name_, value in single.items():
        assert torch.allclose(distributed[name_], value, atol=1e-5, rtol=0), name_
    assert dist_stats[1] == single_stats[1]  # the statistics are summed over the processes
    assert dist_stats[0] == pytest.approx(single_stats[0], rel=1e-5)


def test_step_share_gives_each_process_its_slice_of_the_same_stream():
    class Rank:
        def __init__(self, rank):
            self.rank = rank
            self.world_size = 3

    stream = iter(range(100))
    assert step_share(stream, 2, None) == [0, 1]
    streams = [iter(range(100)) for _ in range(3)]
    assert [step_share(streams[r], 2, Rank(r)) for r in range(3)] == [[0, 1], [2, 3], [4, 5]]
    # every process is at the same position afterwards
    assert [next(s) for s in streams] == [
        6,
        6,
        6,
    ]


@pytest.mark.parametrize(
    "args,message",
    [
        (["-world_size", "2", "-gpu_ranks", "0"], "-world_size 2 but -gpu_ranks lists 1 device(s)"),
        (
            ["-world_size", "3", "-gpu_ranks", "0", "1"],
            "-world_size 3 but -gpu_ranks lists 2 device(s)",
        ),
        (["-gpu_ranks", "0", "1"], "-gpu_ranks lists 2 devices but -world_size is 1"),
    ],
)
def test_world_size_and_gpu_ranks_must_agree(args, message):
    opt = parse(build_parser("test", [model_opts, train_opts]), ["-data", "x", *args])
    with pytest.raises(UserError, match=re.escape(message)):
        check_options(opt)


@pytest.mark.parametrize(
    "gpu_ranks,gpu,local_rank,local_world_size,cuda_count,expected",
    [
        ([], -1, 1, 4, 0, "cpu"),
        ([], -1, 1, 4, 8, "cpu"),
        (
            [0],
            -1,
            2,
            4,
            4,
            "cuda:2",
        ),  # 1.x's -gpu_ranks 0 under torchrun: each process its local rank
        ([], 0, 3, 4, 4, "cuda:3"),
        ([4, 5, 6, 7], -1, 1, 4, 8, "cuda:5"),
        ([3], -1, 0, 1, 4, "cuda:3"),
    ],
)
def test_torchrun_puts_each_local_process_on_its_own_device(
    gpu_ranks, gpu, local_rank, local_world_size, cuda_count, expected
):
    from onmt_lite.train.distributed import torchrun_device

    assert torchrun_device(
        gpu_ranks, gpu, local_rank, local_world_size, cuda_count
    ) == torch.device(expected)


@pytest.mark.parametrize(
    "gpu_ranks,gpu,cuda_count,match",
    [
        ([0, 1], -1, 4, "torchrun started 4 processes on this machine"),
        ([0], -1, 0, "CUDA device 2 requested .* this machine has no CUDA devices"),
        ([], 0, 0, "CUDA device 2 requested"),  # was a silent fall back to the CPU
        ([0, 1, 2, 9], -1, 4, "CUDA device 9 requested .* this machine has 4 CUDA devices"),
    ],
)
def test_torchrun_refuses_devices_it_cannot_give(gpu_ranks, gpu, cuda_count, match):
    from onmt_lite.train.distributed import torchrun_device

    with pytest.raises(UserError, match=match):
        torchrun_device(gpu_ranks, gpu, 2 if len(gpu_ranks) != 4 else 3, 4, cuda_count)


@pytest.mark.parametrize(
    "args,cuda_count,missing",
    [
        (
            ["-world_size", 4, "-gpu_ranks", 0, 1, 2, 3],
            0,
            "CUDA device(s) 0 1 2 3 (-gpu_ranks/-gpu) but this machine has no CUDA devices",
        ),
        (
            ["-world_size", 4, "-gpu_ranks", 0, 1, 2, 3],
            2,
            "CUDA device(s) 2 3 (-gpu_ranks/-gpu) but this machine has 2",
        ),
        (
            ["-world_size", 2, "-gpu", 0],
            1,
            "CUDA device(s) 1 ",
        ),  # -gpu: each process its local rank
        (["-world_size", 3, "-gpu_ranks", 0], 0, "CUDA device(s) 0 1 2 "),
        (["-world_size", 4, "-gpu_ranks", 0, 1, 2, 3], 4, None),
        (["-world_size", 4], 0, None),
    ],
)
def test_spawned_processes_devices_are_checked_before_any_starts(args, cuda_count, missing):
    from onmt_lite.train.distributed import check_spawn_devices

    opt = parse(build_parser("test", [model_opts, train_opts]), ["-data", "x", *map(str, args)])
    if missing is None:
        check_spawn_devices(opt, cuda_count)
        return
    with pytest.raises(UserError, match=re.escape(missing)):
        check_spawn_devices(opt, cuda_count)
