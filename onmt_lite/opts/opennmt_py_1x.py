"""The option names of OpenNMT-py 1.x's commands: the parser matches abbreviations against them and
``tools/options_table.py`` compares onmt_lite's options with them.

They are read from ``opennmt_py_1x_options.txt`` beside this module (OpenNMT-py 1.2.0, the last 1.x
release; the file says where each name comes from), installed with the package.
"""

import os

from onmt_lite.utils.errors import UserError, where

REFERENCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "opennmt_py_1x_options.txt")
COMMANDS = ("preprocess", "train", "translate")


def read_reference(path=REFERENCE):
    """``{command: [option name, ...]}`` from a 1.x option list (``COMMAND NAME`` lines), in file
    order."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(
            f"{path}: cannot read the option list ({getattr(err, 'strerror', None) or err})"
        ) from None
    reference = {command: [] for command in COMMANDS}
    for lineno, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        fields = line.split()
        if len(fields) != 2 or fields[0] not in COMMANDS:
            raise UserError(
                f"{where(path, lineno)}: expected 'COMMAND NAME' with COMMAND one of "
                f"{', '.join(COMMANDS)}, got {line!r}"
            )
        command = fields[0]
        name = fields[1].lstrip("-")
        if name in reference[command]:
            raise UserError(f"{where(path, lineno)}: {command} {name} is listed twice")
        reference[command].append(name)
    return reference


OPENNMT_PY_1X_OPTIONS = {command: tuple(names) for command, names in read_reference().items()}
