"""HostSyncCounter, and the host syncs of a training step counted on the CPU (what would stall a
GPU)."""

import contextlib

import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence

from onmt_lite.train import graphed
from onmt_lite.train.graphed import GraphedModel
from onmt_lite.train.precision import Precision
from onmt_lite.utils.cpu_paths import as_on_a_gpu
from onmt_lite.utils.host_syncs import HostSyncCounter, declare_host, is_host
from tests.model_helpers import TRANSFORMER, make_batch, random_pairs
from tests.unit.test_trainer import make_trainer


def test_each_kind_of_read_of_a_device_tensor_is_a_sync():
    x = torch.arange(6.0)
    with HostSyncCounter() as counter:
        float(x.sum())
        bool(x[1] > 0)
        x.nonzero()
        x.tolist()
        x.cpu()
        x.to("cpu")
        x.numpy()
        x.to(x.device)  # on a GPU this stays on the device: not counted
    assert counter.sync_kinds == {"_local_scalar_dense": 2, "nonzero": 1, "to_host": 4}
    assert counter.syncs == 7


def test_views_are_operations_but_no_kernels():
    x = torch.randn(4, 4)
    with HostSyncCounter() as counter:
        y = x.t()  # a view
        z = y.reshape(16)  # a copy (clone) returned through a view (_unsafe_view)
        z * 2  # a kernel
    assert counter.operations == 4
    assert counter.kernels == 2


def test_host_tensors_and_what_is_computed_from_them_alone_are_read_without_a_sync():
    lengths = torch.tensor([3, 1, 2])
    device_data = torch.randn(3, 3, 4)
    with HostSyncCounter(host=[lengths]) as counter:
        int(lengths.max())  # host
        (lengths * 2).tolist()  # host: computed from host tensors alone
        packed = pack_padded_sequence(device_data, lengths, enforce_sorted=False)
        int(packed.batch_sizes[0])  # batch_sizes is on the CPU wherever the data is
        float((device_data * lengths.view(1, 3, 1)).sum())  # a device tensor: a sync
    assert counter.host_reads == 3
    assert counter.sync_kinds == {"_local_scalar_dense": 1}
    assert not is_host(lengths) and not is_host(packed.batch_sizes)  # no mark outlives the count


def on_device(batch):
    """``batch`` as ``Batch.to(cuda)`` leaves it: its device tensors are not its ``*_cpu`` host
    copies (on the CPU ``to`` keeps the same objects, which would make the device's lengths host
    tensors)."""
    batch.src_lengths = batch.src_lengths.clone()
    batch.indices = batch.indices.clone()
    batch.tgt = batch.tgt.clone()
    return batch


# No configuration reads the device in a step: with a fused Adam the step's loss and gradient norm
# are checked every few steps (train/step_checks.py), in one read; an optimizer that cannot skip an
# update on the device reads them at each step, with the statistics, once. Before 2026-11-27: the
# encoder's lengths and PyTorch's unsorted indices to the host (RNN packing), the rows of the real
# target words (``nonzero``) and three statistics per shard, and the optimizer's check of the
# gradient norm (RNN 7, RNN with 3 shards 15, Transformer 5); before 2026-11-28, one a step.
RNN = ["-encoder_type", "brnn"]
CONFIGURATIONS = {
    "RNN": (RNN, 0),
    "RNN, dropout 0.3 (layers stepped)": ([*RNN, "-dropout", 0.3], 0),
    "RNN, -input_feed 0": ([*RNN, "-input_feed", 0], 0),
    "RNN, copy": (["-copy_attn"], 0),
    "RNN, coverage": (["-coverage_attn", "-lambda_coverage", 1], 0),
    "RNN, 3 shards": (RNN, 4),
    "RNN, truncated to 3 positions": ([*RNN, "-truncated_decoder", 3], 0),
    "mean encoder": (["-encoder_type", "mean", "-word_vec_size", 8], 0),
    "CNN": (["-encoder_type", "cnn", "-decoder_type", "cnn", "-dropout", 0.3], 0),
    "Transformer": (TRANSFORMER, 0),
    "Transformer, label smoothing": ([*TRANSFORMER, "-label_smoothing", 0.1], 0),
    "Transformer, copy, 3 shards": ([*TRANSFORMER, "-copy_attn"], 4),
    # the passes replayed from recorded graphs (train/graphed.py): no read added
    "RNN, -cuda_graphs": ([*RNN, "-dropout", 0.3], 0),
    "Transformer, -cuda_graphs": ([*TRANSFORMER, "-label_smoothing", 0.1], 0),
}


@pytest.mark.parametrize("optim", ["adam", "sgd"])
@pytest.mark.parametrize("name", CONFIGURATIONS)
def test_a_training_step_reads_the_device_never_or_once(name, optim):
    args, shard = CONFIGURATIONS[name]
    trunc = 3 if "-truncated_decoder" in args else 0
    trainer, model = make_trainer(
        *args, shard=shard, trunc=trunc, optim=optim, learning_rate=0.001, max_grad_norm=5
    )
    trainer.train_step([make_batch(random_pairs(16, seed=1))])  # the optimizer's state exists
    if "-cuda_graphs" in name:
        trainer.graphed = GraphedModel(model)
        # the buckets recorded (a recording waits for the device once)
        trainer.train_step([make_batch(random_pairs(16, seed=2, min_len=9))])
    trainer.check_steps()
    batches = [on_device(make_batch(random_pairs(16, seed=s, min_len=9))) for s in (2, 3)]
    host = [t for b in batches for t in (b.src_lengths_cpu, b.indices_cpu, b.tgt_cpu)]
    with HostSyncCounter(host=host) as counter:
        stats = [trainer.train_step([batch]) for batch in batches]
    assert counter.syncs == (0 if optim == "adam" else 2), counter.sync_kinds
    assert counter.host_reads > 0  # the counter told the host tensors apart (else all would count)
    with HostSyncCounter() as counter:
        trainer.check_steps()
    # adam: the checks of both steps in one read; sgd: nothing left to read
    assert counter.syncs == (1 if optim == "adam" else 0), counter.sync_kinds
    assert all(s.n_words > 0 for s in stats)
    if "-cuda_graphs" in name:  # the counted step replayed what the step before recorded
        assert len(trainer.graphed.recorded) == (2 if "Transformer" in name else 1)


@pytest.mark.parametrize("optim", ["adam", "sgd"])
def test_an_fp16_step_reads_the_device_as_a_float32_step_does(monkeypatch, optim):
    """fp16's loss scale changes on the device (train/precision.py): with a fused Adam an overflow
    is read with the deferred checks, not at its step (before 2026-11-28 fp16 read each step)."""
    # fp16 autocast has no CPU kernels for LSTMs: the loss scaling around float32 arithmetic
    monkeypatch.setattr(Precision, "autocast", lambda self: contextlib.nullcontext())
    trainer, model = make_trainer(*RNN, optim=optim, learning_rate=0.001, max_grad_norm=5)
    model.float()
    trainer.precision = Precision("fp16")
    trainer.train_step([make_batch(random_pairs(16, seed=1))])
    trainer.check_steps()
    batches = [on_device(make_batch(random_pairs(16, seed=s, min_len=9))) for s in (2, 3)]
    host = [t for b in batches for t in (b.src_lengths_cpu, b.indices_cpu, b.tgt_cpu)]
    with HostSyncCounter(host=host) as counter:
        for batch in batches:
            trainer.train_step([batch])
    assert counter.syncs == (0 if optim == "adam" else 2), counter.sync_kinds
    with HostSyncCounter() as counter:
        trainer.check_steps()
    assert counter.syncs == (1 if optim == "adam" else 0), counter.sync_kinds
    assert trainer.precision.state_dict()["scale"] == Precision("fp16").state_dict()["scale"]


# The kernels a Transformer training step launches on a GPU, counted on the CPU as on a GPU
# (utils.cpu_paths.as_on_a_gpu: dropout, the loss's chunks and the arg-max as a GPU runs them):
# 488 with dropout, attention dropout and label smoothing (2026-11-27), 482 with the context
# attention's keys as views of one unbind (2026-11-28); the ceiling leaves room
# for a PyTorch change. A step's kernels each cost the host some microseconds: on a GPU, where the
# small Transformer's step is mostly host time, they set the pace (bench/host_cost_training.py).
TRANSFORMER_STEP_KERNELS = 580


def test_a_transformer_training_step_launches_a_bounded_number_of_kernels_as_on_a_gpu():
    regularised = ["-dropout", 0.1, "-attention_dropout", 0.1, "-label_smoothing", 0.1]
    trainer, _ = make_trainer(*TRANSFORMER, *regularised, optim="adam", learning_rate=0.001)
    trainer.train_step([make_batch(random_pairs(16, seed=1))])  # the optimizer's state exists
    batch = on_device(make_batch(random_pairs(16, seed=2, min_len=9)))
    host = [batch.src_lengths_cpu, batch.indices_cpu, batch.tgt_cpu]
    with as_on_a_gpu(), HostSyncCounter(host=host) as counter:
        trainer.train_step([batch])
    assert counter.syncs == 0, counter.sync_kinds
    assert counter.counts["random_"] == 0  # PyTorch's dropout, not the CPU's own masks
    assert counter.kernels <= TRANSFORMER_STEP_KERNELS, counter.kernels


def kernels_outside_replays(monkeypatch, dtype: str, graphs: bool) -> tuple[int, int]:
    """``(kernels outside replayed passes, kernels inside them)`` of a Transformer training step
    (dropout, label smoothing) in ``dtype``, counted on the CPU as on a GPU, after four steps (with
    ``graphs``: its bucket recorded)."""
    inside = []
    counting = []  # the counter of the step counted
    for name in ("_replay_forward", "_replay_backward"):
        replay = getattr(graphed.RecordedCall, name)

        def counted(self, *args, replay=replay):
            if not counting:
                return replay(self, *args)
            before = counting[0].kernels
            result = replay(self, *args)
            inside.append(counting[0].kernels - before)
            return result

        monkeypatch.setattr(graphed.RecordedCall, name, counted)
    regularised = ["-dropout", 0.1, "-attention_dropout", 0.1, "-label_smoothing", 0.1]
    trainer, model = make_trainer(*TRANSFORMER, *regularised, optim="adam", learning_rate=0.001)
    model.float()  # (the tests' models are float64, which autocast leaves as they are)
    trainer.precision = Precision(dtype, torch.device("cpu"))
    trainer.train_step([make_batch(random_pairs(16, seed=1))])
    if graphs:
        trainer.graphed = GraphedModel(model)
    for seed in (2, 3, 4):
        trainer.train_step([make_batch(random_pairs(16, seed=seed, min_len=9))])
    batch = on_device(make_batch(random_pairs(16, seed=5, min_len=9)))
    host = [batch.src_lengths_cpu, batch.indices_cpu, batch.tgt_cpu]
    with as_on_a_gpu(), HostSyncCounter(host=host) as counter:
        counting.append(counter)
        trainer.train_step([batch])
    assert len(inside) == (4 if graphs else 0)  # the encoder's and decoder's passes replayed
    return counter.kernels - sum(inside), sum(inside)


def test_with_graphs_bf16_launches_outside_them_about_what_float32_does(monkeypatch):
    """Mixed precision's casts (weights and activations) are launches of their own; with
    ``-cuda_graphs`` they are replayed with the passes, so that bf16 leaves the host about float32's
    launches (2026-11-28: without graphs 614 against 487, with them 120 against 115 outside)."""
    fp32, _ = kernels_outside_replays(monkeypatch, "fp32", graphs=False)
    bf16, _ = kernels_outside_replays(monkeypatch, "bf16", graphs=False)
    fp32_graphed, fp32_inside = kernels_outside_replays(monkeypatch, "fp32", graphs=True)
    bf16_graphed, bf16_inside = kernels_outside_replays(monkeypatch, "bf16", graphs=True)
    assert bf16 > fp32 + 60  # the casts, counted
    assert bf16_inside > fp32_inside + 60  # in the replays with graphs
    assert bf16_graphed <= fp32_graphed + 15
    assert fp32_graphed < fp32 / 3


def test_a_counter_inside_another_leaves_the_outer_one_counting_declared_host_tensors():
    """The inner counter's exit takes its own marks off the counters counting, not the outer's (an
    equal list: both empty); a tensor declared after it is the outer's, unmarked at its exit."""
    declared = torch.ones(2)
    with HostSyncCounter() as outer:
        with HostSyncCounter():
            pass
        declare_host(declared)
        declared.tolist()
        assert is_host(declared)
    assert outer.counts["host_read"] == 1 and outer.syncs == 0
    assert not is_host(declared)  # no mark outlives the count
