"""run_command: how each kind of failure is reported (one line and an exit status; -debug
traceback)."""

import pytest

from onmt_lite.utils.errors import Stopped, UserError, run_command, set_debug


def failing(exc):
    @run_command("prog")
    def main():
        raise exc

    return main


@pytest.mark.parametrize(
    "exc,code,line",
    [
        (UserError("data.txt:3: not valid UTF-8"), 2, "prog: error: data.txt:3: not valid UTF-8"),
        (Stopped("stopped by SIGTERM at step 7", 143), 143, "prog: stopped by SIGTERM at step 7"),
        (
            KeyError("rnn_size"),
            1,
            "prog: internal error: KeyError: 'rnn_size' (run with -debug for the traceback)",
        ),
        (
            ValueError("two\nlines"),
            1,
            "prog: internal error: ValueError: two lines (run with -debug for the traceback)",
        ),
    ],
)
def test_each_failure_is_one_line_and_an_exit_status(capsys, exc, code, line):
    with pytest.raises(SystemExit) as exit_:
        failing(exc)()
    assert exit_.value.code == code
    assert capsys.readouterr().err == line + "\n"


def test_debug_adds_the_traceback(capsys):
    set_debug(True)
    try:
        with pytest.raises(SystemExit):
            failing(ValueError("boom"))()
    finally:
        set_debug(False)
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):") and "raise exc" in err
    assert err.strip().splitlines()[-1].startswith("prog: internal error: ValueError: boom")


@pytest.mark.parametrize(
    "exc,record",
    [
        (UserError("bad.txt:3: not valid UTF-8"), "ERROR] prog: error: bad.txt:3: not valid UTF-8"),
        (
            Stopped("stopped by SIGTERM at step 7", 143),
            "WARNING] prog: stopped by SIGTERM at step 7",
        ),
    ],
)
def test_the_line_goes_to_the_log_file_too_once_one_is_open(capsys, tmp_path, exc, record):
    from onmt_lite.utils.logging import init_logger, logger

    log = tmp_path / "run.log"
    handlers = list(logger.handlers)
    try:
        init_logger(str(log))
        logger.info("started")
        with pytest.raises(SystemExit):
            failing(exc)()
    finally:
        for handler in list(logger.handlers):
            logger.removeHandler(handler)
            handler.close()
        for handler in handlers:
            logger.addHandler(handler)
    written = log.read_text(encoding="utf-8").splitlines()
    assert len(written) == 2 and written[0].endswith(" INFO] started")
    assert written[1].endswith(f" {record}")
    err = capsys.readouterr().err.splitlines()  # the console: the log's line, then the error once
    assert len(err) == 2 and err[-1] == record.split("] ", 1)[1]
