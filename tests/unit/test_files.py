import os

import pytest
import torch

from onmt_lite.utils.files import StagedOutputs, atomic_path, save_tensors


def test_atomic_path_leaves_nothing_when_the_write_fails(tmp_path):
    target = tmp_path / "out.pt"
    with pytest.raises(RuntimeError):
        with atomic_path(str(target)) as tmp:
            open(tmp, "w").write("half")
            raise RuntimeError("disk full")
    assert os.listdir(tmp_path) == []


def test_saved_file_opens_with_weights_only_and_has_normal_permissions(tmp_path):
    target = str(tmp_path / "x.pt")
    save_tensors({"a": torch.arange(3), "b": ["w"]}, target)
    assert torch.load(target, weights_only=True)["b"] == ["w"]
    umask = os.umask(0)
    os.umask(umask)
    assert os.stat(target).st_mode & 0o777 == 0o666 & ~umask


def test_staged_outputs_appear_together_or_not_at_all(tmp_path):
    with pytest.raises(ValueError):
        with StagedOutputs() as staged:
            staged.save({"n": 1}, str(tmp_path / "a.pt"))
            raise ValueError("bad line")
    assert os.listdir(tmp_path) == []
    with StagedOutputs() as staged:
        staged.save({"n": 1}, str(tmp_path / "a.pt"))
        staged.save({"n": 2}, str(tmp_path / "b.pt"))
        assert sorted(os.listdir(tmp_path)) != ["a.pt", "b.pt"]
        staged.commit()
    assert sorted(os.listdir(tmp_path)) == ["a.pt", "b.pt"]
