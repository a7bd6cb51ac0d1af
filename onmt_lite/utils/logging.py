"""One logger for the toolkit: ``[time LEVEL] message`` on stderr and, with -log_file, in a file
(the server: one JSON object a line)."""

import json
import logging
import sys

from onmt_lite.utils.errors import UserError

logger = logging.getLogger("onmt_lite")
_waiting = []  # INFO lines that log_when_ready held back until init_logger


def log_when_ready(message):
    """Log ``message`` at INFO now if the logger is set up, else as soon as ``init_logger`` sets it
    up (the option parser's notes: the commands set up logging after parsing, with its
    -log_file)."""
    if logger.handlers:
        logger.info(message)
    else:
        _waiting.append(message)


class JsonLines(logging.Formatter):
    """One JSON object a line: time, level, message, and the fields a call passes as
    ``extra={"fields": {...}}`` (a traceback too, if any)."""

    def format(self, record):
        out = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname,
            "message": record.getMessage(),
            **getattr(record, "fields", {}),
        }
        if record.exc_info:
            out["traceback"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False, default=str)


def init_logger(
    log_file=None, level=logging.INFO, json_lines=False, file_level=logging.NOTSET, prefix=""
):
    """(Re)configure the ``onmt_lite`` logger; returns it. ``file_level``: the least level the log
    file records (-log_file_level); ``prefix`` starts every message (another training process's
    rank)."""
    fmt = (
        JsonLines()
        if json_lines
        else logging.Formatter(
            f"[%(asctime)s %(levelname)s] {prefix}%(message)s", "%Y-%m-%d %H:%M:%S"
        )
    )
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
        handler.close()
    console = logging.StreamHandler(sys.stderr)
    console.setFormatter(fmt)
    logger.addHandler(console)
    if log_file:
        try:
            file_handler = logging.FileHandler(log_file, encoding="utf-8")
        except OSError as err:
            raise UserError(f"-log_file {log_file}: cannot open ({err.strerror})") from None
        file_handler.setFormatter(fmt)
        file_handler.setLevel(file_level)
        logger.addHandler(file_handler)
    logging.raiseExceptions = (
        False  # a log line that cannot be written (disk full) is dropped, not dumped
    )
    logger.setLevel(level)
    logger.propagate = False
    while _waiting:
        logger.info(_waiting.pop(0))
    return logger
