"""JSON as the server reads it (request bodies and its configuration file) and writes it (answers).

Read strictly: Python's ``json`` also takes ``NaN``, ``Infinity`` and lone UTF-16 surrogates
(``"\\ud800"``), which are neither JSON numbers nor text, reads ``1e400`` as infinity, and fails on
deep nesting with a RecursionError; each of these is a ValueError here, with its reason. Written
as OpenNMT-py 1.x's server writes it: a non-finite number (a sparsemax model's ``-inf`` score) as
``-Infinity``, which Python's and most other JSON readers take; the command line prints ``-inf``.
"""

import json
import math
import re

from starlette.responses import JSONResponse


SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")  # \ud800 to \udfff in a JSON string


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    number = float(text)
    if math.isinf(number):
        raise ValueError(f"{text} is beyond the range of a number here")
    return number


def loads_strict(text: bytes):
    """The JSON value of ``text`` (UTF-8 bytes); a ValueError (UnicodeDecodeError is one) for
    anything that is not standard JSON of Unicode text."""
    try:
        value = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except RecursionError:
        raise ValueError("nested too deeply") from None
    if not SURROGATE_ESCAPE.search(text):  # UTF-8 holds no surrogate: only an escape makes one
        return value
    try:  # a lone surrogate is not text: it cannot be written as UTF-8, nor answered
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as err:
        bad = ord(err.object[err.start])
        message = f"a string holds a lone UTF-16 surrogate (\\u{bad:04x}), not text"
        raise ValueError(message) from None
    except RecursionError:
        raise ValueError("nested too deeply") from None
    return value


class AnswerJSON(JSONResponse):
    """Starlette's JSON answer, with 1.x's non-finite numbers (see the module)."""

    def render(self, content) -> bytes:
        text = json.dumps(content, ensure_ascii=False, allow_nan=True, separators=(",", ":"))
        return text.encode()
