"""``helpers.run_in_process``, which most end-to-end tests use instead of a new process: it gives
what the process gives (status, standard output and error) and leaves the test's process as it
was."""

import os

import torch

from onmt_lite.utils.logging import logger
from tests.helpers import run_cli, run_in_process


def test_bad_input_and_help_give_what_a_process_gives(tmp_path):
    missing = tmp_path / "no-such-file.txt"
    args = ["-train_src", missing, "-train_tgt", missing, "-save_data", tmp_path / "d"]
    for command, command_args in (("preprocess", args), ("translate", ["-h"])):
        process = run_cli(command, *command_args)
        in_process = run_in_process(command, *command_args)
        assert in_process.returncode == process.returncode
        assert in_process.stdout == process.stdout
        assert in_process.stderr.splitlines()[-1:] == process.stderr.splitlines()[-1:]
    assert process.returncode == 0 and "-beam_size" in in_process.stdout
    first = run_in_process("preprocess", *args)
    assert first.returncode == 2 and str(missing) in first.stderr
    assert "Traceback" not in first.stderr


def test_an_escaping_exception_is_status_1_and_the_process_is_put_back(tmp_path, monkeypatch):
    from onmt_lite.bin import preprocess

    def fail(args):
        torch.set_num_threads(torch.get_num_threads() + 1)
        os.chdir("/")
        raise RuntimeError("failed on purpose")

    monkeypatch.setattr(preprocess, "main", fail)
    threads = torch.get_num_threads()
    directory = os.getcwd()
    result = run_in_process("preprocess", "-x", cwd=tmp_path)
    assert result.returncode == 1
    assert "Traceback" in result.stderr and "RuntimeError: failed on purpose" in result.stderr
    assert torch.get_num_threads() == threads and os.getcwd() == directory
    assert logger.handlers == []
