"""One logger for the toolkit: ``[time LEVEL] message`` on stderr and, with -log_file, in a file."""
import logging
import sys

from onmt_lite.utils.errors import UserError

logger = logging.getLogger("onmt_lite")


def init_logger(log_file=None, level=logging.INFO):
    """(Re)configure the ``onmt_lite`` logger; returns it."""
    fmt = logging.Formatter("[%(asctime)s %(levelname)s] %(message)s", "%Y-%m-%d %H:%M:%S")
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
        logger.addHandler(file_handler)
    logging.raiseExceptions = False  # a log line that cannot be written (disk full) is dropped, not dumped
    logger.setLevel(level)
    logger.propagate = False
    return logger
