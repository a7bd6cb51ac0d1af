import pytest
import torch

from onmt_lite.data.batch import ShardView
from onmt_lite.data.example import make_example
from onmt_lite.data.shards import make_shard
from onmt_lite.data.vocab import Vocab

SRC_VOCAB = Vocab("a b c".split())  # a=4 b=5 c=6
TGT_VOCAB = Vocab("x y a".split())  # x=4 y=5 a=6
PAIRS = [("a b", "x"), ("c Zed c a", "y Zed x q"), ("b", "x y")]


def shard_view(dynamic_dict):
    examples = [
        make_example(n, s.split(), t.split(), SRC_VOCAB, TGT_VOCAB, dynamic_dict)
        for n, (s, t) in enumerate(PAIRS, 1)
    ]
    return ShardView(make_shard(examples))


def test_batch_tensors_are_time_major_padded_with_bos_eos():
    batch = shard_view(False).batch([1, 0])
    assert torch.equal(batch.src, torch.tensor([[6, 4], [0, 5], [6, 1], [4, 1]]))
    assert batch.src_lengths.tolist() == [4, 2]
    # <s>=2 </s>=3 <blank>=1; "Zed" and "q" are unknown to the target vocabulary (0)
    assert torch.equal(batch.tgt, torch.tensor([[2, 2], [5, 4], [0, 3], [4, 1], [0, 1], [3, 1]]))
    assert batch.indices.tolist() == [2, 1]
    assert batch.src_map is None and batch.alignment is None


def test_copy_fields_by_hand():
    batch = shard_view(True).batch([1, 2])
    # example 2: "c Zed c a" -> vocab [<unk>, <blank>, c, Zed, a]; example 3: "b" -> [<unk>,
    # <blank>, b]
    assert batch.src_ex_vocab == [["<unk>", "<blank>", "c", "Zed", "a"], ["<unk>", "<blank>", "b"]]
    expected_map = torch.zeros(4, 2, 5)
    for pos, idx in enumerate([2, 3, 2, 4]):
        expected_map[pos, 0, idx] = 1
    expected_map[0, 1, 2] = 1
    assert torch.equal(batch.src_map, expected_map)
    # targets "y Zed x q" and "x y": only "Zed" occurs in a source (index 3); q is OOV and not in it
    # the target-vocabulary ids of those words: only "a" is in the target vocabulary
    assert torch.equal(batch.src_ex_tgt_ids, torch.tensor([[0, 0, 0, 0, 6], [0, 0, 0, 0, 0]]))
    assert torch.equal(
        batch.alignment, torch.tensor([[0, 0], [0, 0], [3, 0], [0, 0], [0, 0], [0, 0]])
    )


FIELDS = ("src", "src_lengths", "tgt", "indices", "src_map", "alignment", "src_ex_tgt_ids")


def test_to_the_cpu_keeps_the_very_tensors():
    batch = shard_view(True).batch([1, 2])
    before = {name: getattr(batch, name) for name in FIELDS}
    assert batch.to("cpu") is batch
    assert all(getattr(batch, name) is value for name, value in before.items())


def test_cpu_copies_of_lengths_and_indices_stay_on_the_cpu_when_the_batch_moves():
    batch = shard_view(False).batch([1, 0])
    batch.to("meta")  # a device without data: stands for CUDA here
    assert (
        batch.src.device.type
        == batch.src_lengths.device.type
        == batch.indices.device.type
        == "meta"
    )
    assert batch.src_lengths_cpu.device.type == batch.indices_cpu.device.type == "cpu"
    assert batch.src_lengths_cpu.tolist() == [4, 2] and batch.indices_cpu.tolist() == [2, 1]


@pytest.mark.parametrize("cuda_available", [True, False])
def test_to_cuda_pins_and_copies_without_blocking_only_where_cuda_is(monkeypatch, cuda_available):
    batch = shard_view(True).batch([1, 2])
    calls = []
    original_to = torch.Tensor.to

    def pin_memory(self):
        calls.append("pin")
        return self

    def to(self, *args, **kwargs):
        if torch.device(args[0]).type != "cuda":
            return original_to(self, *args, **kwargs)
        calls.append(("to", kwargs.get("non_blocking", False)))
        return self

    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda_available)
    monkeypatch.setattr(torch.Tensor, "pin_memory", pin_memory)
    monkeypatch.setattr(torch.Tensor, "to", to)
    batch.to("cuda:0")
    if cuda_available:
        # each tensor pinned, then every copy without waiting
        assert calls == ["pin"] * len(FIELDS) + [("to", True)] * len(FIELDS)
    else:
        assert calls == [("to", False)] * len(FIELDS)


def test_pin_memory_leaves_pinned_tensors_as_they_are(monkeypatch):
    """-num_workers 1 pins in its thread: the copy to the device then pins nothing again."""
    batch = shard_view(True).batch([1, 2])
    pinned = []
    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda self: pinned.append(1) or self)
    assert batch.pin_memory() is batch and len(pinned) == len(FIELDS)
    monkeypatch.setattr(torch.Tensor, "is_pinned", lambda self: True)
    batch.pin_memory()
    assert len(pinned) == len(FIELDS)
