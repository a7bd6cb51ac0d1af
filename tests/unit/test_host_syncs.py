"""HostSyncCounter, and the host syncs of a training step counted on the CPU (what would stall a
GPU)."""
import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence

from onmt_lite.utils.host_syncs import HostSyncCounter
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


def on_device(batch):
    """``batch`` as ``Batch.to(cuda)`` leaves it: its device tensors are not its ``*_cpu`` host
    copies (on the CPU ``to`` keeps the same objects, which would make the device's lengths host
    tensors)."""
    batch.src_lengths = batch.src_lengths.clone()
    batch.indices = batch.indices.clone()
    return batch


# Host syncs of one optimizer step (batch of 16, Adam), counted today, against an aim of one:
# - RNN encoders: 2, the lengths to the host for packing (rnn_encoder.py) and PyTorch's own
#   ``unsorted_indices.cpu()`` in ``pad_packed_sequence`` (both go with host lengths sorted on
#   the host);
# - each shard of the loss: 2, the rows of the real target words (``nonzero``) and one read of
#   its statistics (three before: loss, words, correct words);
# - the optimizer: 1, the check that the gradient norm is finite.
# These ceilings keep what has been won; each fix lowers its line.
ENCODER, SHARD, OPTIMIZER = 2, 2, 1
CEILINGS = {
    "RNN": (["-encoder_type", "brnn"], 0, ENCODER + SHARD + OPTIMIZER),
    "RNN, copy": (["-copy_attn"], 0, ENCODER + SHARD + OPTIMIZER),
    "RNN, coverage": (["-coverage_attn", "-lambda_coverage", 1], 0, ENCODER + SHARD + OPTIMIZER),
    "RNN, 3 shards": (["-encoder_type", "brnn"], 4, ENCODER + 3 * SHARD + OPTIMIZER),
    "Transformer": (TRANSFORMER, 0, SHARD + OPTIMIZER),
    "Transformer, label smoothing": ([*TRANSFORMER, "-label_smoothing", 0.1], 0, SHARD + OPTIMIZER),
}


@pytest.mark.parametrize("name", CEILINGS)
def test_a_training_step_makes_no_more_host_syncs_than_its_ceiling(name):
    args, shard, ceiling = CEILINGS[name]
    trainer, _ = make_trainer(*args, shard=shard, optim="adam", learning_rate=0.001,
                              max_grad_norm=5)
    trainer.train_step([make_batch(random_pairs(16, seed=1))])  # the optimizer's state exists
    batch = on_device(make_batch(random_pairs(16, seed=2, min_len=9)))
    with HostSyncCounter(host=[batch.src_lengths_cpu, batch.indices_cpu]) as counter:
        stats = trainer.train_step([batch])
    assert stats.n_words > 0
    assert 0 < counter.syncs <= ceiling, counter.sync_kinds
    assert counter.host_reads > 0  # the counter told the host tensors apart (else all would count)
