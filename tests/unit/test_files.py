"""Atomic writes, failed writes, and loading only tensors and plain data."""

import contextlib
import os
import resource
import stat
import threading

import pytest
import torch

from onmt_lite.utils.errors import UserError
from onmt_lite.utils.files import StagedOutputs, atomic_path, load_tensors, save_tensors, write_text
from onmt_lite.utils.locks import lock_holder, release_lock, remove_stale_temporaries, try_lock
from onmt_lite.utils.output_paths import require_directory
from tests.helpers import PickledCall


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


def test_a_file_carrying_pickled_code_is_refused_without_running_it(tmp_path):
    marker = tmp_path / "marker"
    crafted = str(tmp_path / "crafted.pt")
    torch.save(
        {"format": "onmt_lite.checkpoint.v1", "model": PickledCall(open, str(marker), "w")}, crafted
    )
    with pytest.raises(
        UserError, match=r"crafted\.pt: refused: the checkpoint holds pickled Python objects"
    ):
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
    (tmp_path / "runs").mkdir()  # -model runs: it was "checkpoint not found", though it is there
    with pytest.raises(UserError, match=r"runs: a directory, not a checkpoint$"):
        load_tensors(str(tmp_path / "runs"), "checkpoint")


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
    from onmt_lite.utils.output_paths import require_file_path

    assert require_file_path(str(tmp_path / "out.pt"), "-output") == str(tmp_path)
    for path in (str(tmp_path), str(tmp_path / "new") + os.sep):
        with pytest.raises(UserError, match=r"-output .*: is a directory; give the path of a file"):
            require_file_path(path, "-output")
    with pytest.raises(UserError, match="does not exist"):
        require_file_path(str(tmp_path / "missing" / "out.pt"), "-output")


def test_a_symbolic_link_stays_a_link_and_its_target_gets_the_content(tmp_path):
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "out.txt"
    target.write_text("old")
    link = tmp_path / "link.txt"
    link.symlink_to(target)
    write_text(str(link), "new\n")
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text() == "new\n"
    save_tensors({"n": 3}, str(link))
    assert link.is_symlink() and torch.load(str(target), weights_only=True) == {"n": 3}
    with StagedOutputs() as staged:
        staged.save({"n": 4}, str(link))
        staged.commit()
    assert link.is_symlink() and torch.load(str(target), weights_only=True) == {"n": 4}
    dangling = tmp_path / "dangling.txt"
    dangling.symlink_to(tmp_path / "real" / "new.txt")
    write_text(str(dangling), "created\n")
    assert dangling.is_symlink() and (tmp_path / "real" / "new.txt").read_text() == "created\n"
    assert sorted(os.listdir(tmp_path)) == ["dangling.txt", "link.txt", "real"]  # no temporary left
    assert sorted(os.listdir(tmp_path / "real")) == ["new.txt", "out.txt"]


def character_devices(tmp_path):
    """/dev/null, and (as root) a private copy of its device node that an old bug could replace
    safely."""
    devices = ["/dev/null"]
    with contextlib.suppress(OSError):
        os.mknod(tmp_path / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        devices.insert(0, str(tmp_path / "null"))
    return devices


def test_a_character_device_is_written_into_and_stays_a_device(tmp_path):
    for device in character_devices(tmp_path):
        assert require_directory(device, "-output")
        write_text(device, "discarded\n")
        save_tensors({"n": 1}, device)
        with StagedOutputs() as staged:
            staged.save({"n": 2}, device)
            staged.commit()
        assert stat.S_ISCHR(os.stat(device).st_mode), device
    assert [p for p in os.listdir(tmp_path) if p.endswith(".tmp")] == []


def test_a_fifo_is_streamed_to_its_reader(tmp_path):
    fifo = str(tmp_path / "pipe")
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(open(fifo, "rb").read()))
    reader.start()
    write_text(fifo, "through the pipe\n")
    reader.join(timeout=30)
    assert received == [b"through the pipe\n"]
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert os.listdir(tmp_path) == ["pipe"]


def test_a_regular_file_is_still_replaced_atomically(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("old\n")
    inode = os.stat(target).st_ino
    with file_size_limit(4096):
        with pytest.raises(UserError, match=r"out\.txt: cannot write"):
            write_text(str(target), "x" * 10000)
    assert target.read_text() == "old\n" and os.listdir(tmp_path) == ["out.txt"]
    write_text(str(target), "new\n")
    assert target.read_text() == "new\n" and os.stat(target).st_ino != inode  # renamed into place


def test_a_lock_is_refused_while_held_and_a_lock_file_left_behind_does_not_block(tmp_path):
    path = str(tmp_path / "m.lock")
    held = try_lock(path)
    assert held is not None and lock_holder(path) == str(os.getpid())
    assert try_lock(path) is None  # another open of it (as another process would be) is refused
    release_lock(held)
    assert not os.path.exists(path)
    with open(path, "w") as f:  # as a killed holder leaves it
        f.write("99999\n")
    again = try_lock(path)
    assert again is not None and lock_holder(path) == str(os.getpid())
    release_lock(again)


def test_a_lock_file_removed_by_its_holder_meanwhile_is_not_the_one_locked(tmp_path, monkeypatch):
    path = str(tmp_path / "m.lock")
    first = try_lock(path)
    opened = []
    real_open = open

    # the holder ends just after this process opened its file
    def open_then_release(*args, **kwargs):
        f = real_open(*args, **kwargs)
        if not opened:
            opened.append(f)
            release_lock(first)
        return f

    monkeypatch.setattr("builtins.open", open_then_release)
    second = try_lock(path)
    monkeypatch.undo()
    assert second is not None and opened[0].closed and os.path.exists(path)
    assert os.path.samestat(os.fstat(second.fileno()), os.stat(path))
    release_lock(second)


def test_staged_text_written_piece_by_piece_and_a_directory_appear_together_or_not(tmp_path):
    plots = tmp_path / "plots"
    plots.mkdir()
    (plots / "00001.png").write_bytes(b"earlier")
    with pytest.raises(UserError):
        with StagedOutputs() as staged:
            write = staged.open_text(str(tmp_path / "out.txt"))
            write("a\n")
            write_text(os.path.join(staged.stage_directory(str(plots)), "00001.png"), "new")
            raise UserError("a later output failed")
    assert sorted(os.listdir(tmp_path)) == ["plots"] and os.listdir(plots) == ["00001.png"]
    assert (plots / "00001.png").read_bytes() == b"earlier"
    with StagedOutputs() as staged:
        write = staged.open_text(str(tmp_path / "out.txt"))
        write("a\n")
        write("b\n")
        write_text(os.path.join(staged.stage_directory(str(plots)), "00001.png"), "new")
        assert not (tmp_path / "out.txt").exists()
        staged.commit()
    assert (tmp_path / "out.txt").read_text() == "a\nb\n"
    assert (plots / "00001.png").read_text() == "new"
    assert os.listdir(plots) == ["00001.png"]


def test_a_staged_directory_is_made_with_its_parents_and_removed_again_if_discarded(tmp_path):
    plots = tmp_path / "runs" / "one" / "plots"
    with pytest.raises(UserError):
        with StagedOutputs() as staged:
            write_text(os.path.join(staged.stage_directory(str(plots)), "00001.png"), "new")
            assert plots.is_dir()
            raise UserError("a later output failed")
    assert os.listdir(tmp_path) == []  # every directory it made, none that was there
    (tmp_path / "runs").mkdir()
    with pytest.raises(UserError):
        with StagedOutputs() as staged:
            staged.stage_directory(str(plots))
            (plots.parent / "theirs.txt").write_text("another writer's")
            raise UserError("a later output failed")
    # a made directory that another writer wrote into stays, with what it wrote
    assert os.listdir(tmp_path) == ["runs"] and os.listdir(tmp_path / "runs") == ["one"]
    assert os.listdir(plots.parent) == ["theirs.txt"]
    with StagedOutputs() as staged:
        write_text(os.path.join(staged.stage_directory(str(plots)), "00001.png"), "new")
        staged.commit()
    assert os.listdir(plots) == ["00001.png"]  # committed: kept
    blocked = tmp_path / "runs" / "one" / "theirs.txt" / "plots"
    with pytest.raises(UserError, match=f"^{blocked}: cannot create the directory"):
        with StagedOutputs() as staged:
            staged.stage_directory(str(blocked))


def test_a_temporary_locked_by_a_live_writer_is_kept_and_an_unlocked_one_removed(tmp_path):
    with StagedOutputs() as staged:  # a live writer's: a file and a directory, each locked
        staged.open_text(str(tmp_path / "out.txt"))("half")
        staged.stage_directory(str(tmp_path))
        live = sorted(p for p in os.listdir(tmp_path) if p.endswith(".tmp"))
        assert len(live) == 2
        stale = [tmp_path / ".out.txt.k1ll3d.tmp", tmp_path / ".staging.k1ll3d.tmp"]
        stale[0].write_text("half")
        stale[1].mkdir()
        (stale[1] / "00001.png").write_bytes(b"x")
        removed = remove_stale_temporaries(str(tmp_path / "out.txt"))
        removed += remove_stale_temporaries(str(tmp_path / StagedOutputs.STAGING))
        assert sorted(removed) == sorted(map(str, stale))
        assert sorted(p for p in os.listdir(tmp_path) if p.endswith(".tmp")) == live
    assert os.listdir(tmp_path) == []  # discarded: the live writer's are gone with it


def test_two_outputs_naming_one_file_are_refused_unless_both_are_written_into(tmp_path):
    from onmt_lite.utils.output_paths import require_distinct_outputs

    (tmp_path / "a.txt").write_text("a")
    os.symlink(tmp_path / "a.txt", tmp_path / "link.txt")
    a, link, b = (str(tmp_path / name) for name in ("a.txt", "link.txt", "b.txt"))
    for outputs in (
        [("-output", a), ("-dump_beam", a)],
        [("-output", a), ("-dump_beam", link)],
        [("-output", b), ("-dump_beam", str(tmp_path / "." / "b.txt"))],
    ):
        with pytest.raises(UserError, match=r"^-dump_beam .*: the same file as -output "):
            require_distinct_outputs(outputs)
    with pytest.raises(UserError, match=r"^-log_file .*: the same file as -output "):
        require_distinct_outputs([("-output", a)], [("-log_file", link)])
    log = str(tmp_path / "log")
    require_distinct_outputs([("-output", a), ("-dump_beam", b)], [("-log_file", log)])
    require_distinct_outputs([("-output", "/dev/stdout"), ("-dump_beam", "/dev/stdout")])
    require_distinct_outputs([("-output", "/dev/null"), ("-dump_beam", "/dev/null")])
