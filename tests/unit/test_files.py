"""Atomic writes, failed writes, and loading only tensors and plain data."""
import contextlib
import os
import resource

import pytest
import torch

from onmt_lite.utils.errors import UserError
from onmt_lite.utils.files import StagedOutputs, atomic_path, load_tensors, remove_stale_temporaries, save_tensors


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


@contextlib.contextmanager
def file_size_limit(n_bytes):
    """Writes beyond ``n_bytes`` fail with EFBIG (Python ignores SIGXFSZ), as on a full disk."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (n_bytes, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))


def test_a_write_that_fails_midway_names_the_file_and_leaves_nothing(tmp_path):
    target = str(tmp_path / "big.pt")
    with file_size_limit(4096):
        with pytest.raises(UserError, match=r"big\.pt: cannot write \(File too large\)"):
            save_tensors({"w": torch.zeros(10000)}, target)
        with pytest.raises(UserError, match=r"b\.pt: cannot write \(File too large\)"):
            with StagedOutputs() as staged:
                staged.save({"n": 1}, str(tmp_path / "a.pt"))
                staged.save({"w": torch.zeros(10000)}, str(tmp_path / "b.pt"))
    assert os.listdir(tmp_path) == []


class _MakesAFile:
    """Unpickling this object creates ``path``: the kind of code a malicious model file could run."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_a_file_carrying_pickled_code_is_refused_without_running_it(tmp_path):
    marker, crafted = tmp_path / "marker", str(tmp_path / "crafted.pt")
    torch.save({"format": "onmt_lite.checkpoint.v1", "model": _MakesAFile(str(marker))}, crafted)
    with pytest.raises(UserError, match=r"crafted\.pt: refused: the checkpoint holds pickled Python objects"):
        load_tensors(crafted, "checkpoint")
    assert not marker.exists()


def test_truncated_and_missing_files_are_named(tmp_path):
    path = str(tmp_path / "c.pt")
    save_tensors({"w": torch.zeros(1000)}, path)
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)
    with pytest.raises(UserError, match=r"c\.pt: cannot load checkpoint: corrupt or truncated"):
        load_tensors(path, "checkpoint")
    with pytest.raises(UserError, match=r"nothing\.pt: checkpoint not found"):
        load_tensors(str(tmp_path / "nothing.pt"), "checkpoint")


def test_stale_temporaries_of_a_killed_writer_are_removed_and_nothing_else(tmp_path):
    keep = [tmp_path / "m_step_1.pt", tmp_path / ".other.pt.x.tmp", tmp_path / ".m_best.pt.a.tmp"]
    stale = [tmp_path / ".m_step_2.pt.abc123.tmp", tmp_path / ".m_step_30.pt.q.tmp"]
    for path in keep + stale:
        path.write_bytes(b"x")
    removed = remove_stale_temporaries(str(tmp_path / "m_step_*.pt"))
    assert sorted(removed) == sorted(map(str, stale))
    assert sorted(os.listdir(tmp_path)) == sorted(p.name for p in keep)


def test_staged_text_files_appear_together(tmp_path):
    with StagedOutputs() as staged:
        staged.write_text("é\n", str(tmp_path / "a.txt"))
        assert not os.path.exists(tmp_path / "a.txt")
        staged.commit()
    assert (tmp_path / "a.txt").read_bytes() == "é\n".encode("utf-8")


def test_require_file_path_refuses_a_directory(tmp_path):
    from onmt_lite.utils.files import require_file_path

    assert require_file_path(str(tmp_path / "out.pt"), "-output") == str(tmp_path)
    for path in (str(tmp_path), str(tmp_path / "new") + os.sep):
        with pytest.raises(UserError, match=r"-output .*: is a directory; give the path of a file"):
            require_file_path(path, "-output")
    with pytest.raises(UserError, match="does not exist"):
        require_file_path(str(tmp_path / "missing" / "out.pt"), "-output")
