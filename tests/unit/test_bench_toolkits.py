"""bench/toolkits.py: how the GPU benchmarks start both toolkits here (console scripts, the peer's
venv) and on a lent GPU machine (modules of the checkout, a Python that imports OpenNMT-py)."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import toolkits  # noqa: E402


def test_onmt_lite_runs_as_its_console_script_where_one_is_beside_python_else_as_its_module(
    monkeypatch, tmp_path
):
    (tmp_path / "onmt_lite_train").write_text("#!/bin/sh\n")
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    assert toolkits.lite("train") == [str(tmp_path / "onmt_lite_train")]
    assert toolkits.lite("translate") == [str(tmp_path / "python"), "-m", "onmt_lite.bin.translate"]


def test_the_peer_is_a_venv_directory_or_a_python(tmp_path):
    assert toolkits.peer(str(tmp_path), "train") == [str(tmp_path / "bin" / "onmt_train")]
    assert toolkits.peer("python3", "build_vocab") == ["python3", "-m", "onmt.bin.build_vocab"]
    assert toolkits.peer_python(str(tmp_path)) == str(tmp_path / "bin" / "python")
    assert toolkits.peer_python("python3") == "python3"


@pytest.mark.parametrize(
    "command,peer",
    [
        (["python3", "-m", "onmt.bin.train", "-config", "x"], True),
        (["/v/bin/onmt_translate", "-model", "m"], True),
        (["/v/bin/onmt_lite_translate", "-model", "m"], False),
        (["python3", "-m", "onmt_lite.bin.train"], False),
    ],
)
def test_a_peer_command_is_told_from_onmt_lites(command, peer):
    assert toolkits.is_peer(command) is peer


def test_a_python_without_opennmt_py_is_refused_by_name():
    with pytest.raises(SystemExit, match="cannot import onmt"):
        toolkits.ensure_peer(sys.executable)  # the project's Python: no OpenNMT-py in it
