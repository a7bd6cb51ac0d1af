"""Shared test helpers: paths to ../shared/data, running the commands, writing small corpora."""
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED_DATA = os.path.join(os.path.dirname(REPO), "shared", "data")


def shared_data(*parts):
    """Path under ../shared/data, or skip the test (visibly) when it is absent."""
    path = os.path.join(SHARED_DATA, *parts)
    if not os.path.exists(path):
        pytest.skip(f"needs {path} (../shared is absent)")
    return path


def run_cli(command, *args, cwd=None):
    """Run ``python -m onmt_lite.bin.<command> args``; returns the CompletedProcess."""
    return subprocess.run([sys.executable, "-m", f"onmt_lite.bin.{command}", *map(str, args)],
                          capture_output=True, text=True, cwd=cwd)


def write_lines(path, lines):
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines))
    return str(path)
