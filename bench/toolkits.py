"""How the GPU benchmarks start each toolkit's commands, here and on a lent GPU machine.

Here onmt_lite's console scripts sit beside the running Python (the project's venv) and OpenNMT-py
3.5.1 has a venv of its own (``-peer DIR``, made by ../shared/bench/install_opennmt_py.sh when
missing). A lent GPU machine has neither: onmt_lite runs as ``python3 -m onmt_lite.bin.NAME`` from
the checkout, the peer as ``PYTHON -m onmt.bin.NAME`` (``-peer python3``: a Python that imports
``onmt``, from wheels carried onto PYTHONPATH), and the data comes from ``ONMT_LITE_SHARED``, a
carried copy of ../shared (bench/device_session.sh sets all three up).
"""

import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.environ.get("ONMT_LITE_SHARED") or os.path.join(os.path.dirname(REPO), "shared")


def lite(name: str) -> list[str]:
    """The command ``onmt_lite_NAME``: the console script beside this Python, else its module."""
    script = os.path.join(os.path.dirname(sys.executable), f"onmt_lite_{name}")
    if os.path.exists(script):
        return [script]
    return [sys.executable, "-m", f"onmt_lite.bin.{name}"]


def peer(home: str, name: str) -> list[str]:
    """OpenNMT-py's ``onmt_NAME``: ``home`` is its venv directory, or a Python that imports onmt."""
    if os.path.isdir(home):
        return [os.path.join(home, "bin", f"onmt_{name}")]
    return [home, "-m", f"onmt.bin.{name}"]


def peer_python(home: str) -> str:
    """The Python that runs OpenNMT-py (``peer``'s ``home``)."""
    return os.path.join(home, "bin", "python") if os.path.isdir(home) else home


def is_peer(command: list) -> bool:
    """Whether ``command`` (with its arguments) starts OpenNMT-py."""
    first = os.path.basename(str(command[0]))
    head = " ".join(map(str, command[:3]))
    return "onmt.bin." in head or (first.startswith("onmt_") and not first.startswith("onmt_lite_"))


def ensure_peer(home: str) -> None:
    """Install OpenNMT-py 3.5.1 into the venv ``home`` when it is missing there; a Python ``home``
    that cannot import it stops the benchmark with the reason."""
    if os.path.isdir(home) and os.path.exists(os.path.join(home, "bin", "onmt_train")):
        return
    # a directory, or a path to one still to make: a venv; else a Python (python3 on PATH)
    if os.path.isdir(home) or (not os.path.exists(home) and os.sep in home):
        script = os.path.join(SHARED, "bench", "install_opennmt_py.sh")
        subprocess.run(["bash", script, home], check=True)
        return
    found = subprocess.run([home, "-c", "import onmt"], capture_output=True, text=True)
    if found.returncode != 0:
        raise SystemExit(f"-peer {home}: this Python cannot import onmt (OpenNMT-py 3.5.1)")
