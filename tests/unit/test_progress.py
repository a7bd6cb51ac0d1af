"""Progress: the terminal bar, the periodic log lines, line counting, and its use in preprocess and
translate."""

import io

import pytest
import torch

from onmt_lite.models.builder import build_model
from onmt_lite.translate.search import SearchOptions
from onmt_lite.translate.translator import Translator
from onmt_lite.utils import progress as progress_module
from onmt_lite.utils.progress import Progress, count_lines, duration
from tests.helpers import preprocess_in_process, write_lines
from tests.model_helpers import VOCABS, model_options


class FakeTTY(io.StringIO):
    def isatty(self):
        return True


class Clock:
    """A clock the test moves by hand."""

    def __init__(self, now=100.0):
        self.now = now

    def __call__(self):
        return self.now


def test_the_terminal_bar_shows_count_percent_rate_and_time_left(logged):
    clock = Clock(100.0)
    tty = FakeTTY()
    progress = Progress(2000, "lines", "translate", stream=tty, clock=clock)
    clock.now = (
        104.0  # 1200 lines in 4 s: 300.0 lines/s, 800 left: 2.67 s -> "3 s left"; 60%: 12 of 20 #
    )
    progress.update(1200)
    bar = "translate [############--------]  1200/2000 lines  60%  300.0 lines/s  3 s left"
    assert tty.getvalue() == "\r" + bar
    clock.now = 104.05  # within 0.1 s of the last drawing: not redrawn
    progress.update(300)
    assert tty.getvalue() == "\r" + bar
    clock.now = 105.0  # 1600 lines in 5 s: 320.0 lines/s, 400 left: 1.25 s; 80%: 16 #
    progress.update(100)
    bar = "translate [################----]  1600/2000 lines  80%  320.0 lines/s  1 s left"
    assert tty.getvalue().split("\r")[-1] == bar
    assert logged == []
    clock.now = 110.0
    progress.update(400)
    last = "translate [####################]  2000/2000 lines  100%  200.0 lines/s  0 s left"
    assert tty.getvalue().split("\r")[-1] == last
    progress.close()
    assert tty.getvalue().endswith("\r" + last + "\r" + " " * len(last) + "\r")  # the bar is erased
    assert logged == ["translate: 2000/2000 lines (100%), 200.0 lines/s, done in 10 s"]
    progress.close()
    assert len(logged) == 1


def test_log_lines_come_at_the_interval_and_at_close_not_on_every_update(logged):
    clock = Clock(0.0)
    stream = io.StringIO()
    with Progress(3000, "lines", "translate", stream=stream, clock=clock) as progress:
        for second in range(1, 26):
            clock.now = float(second)
            progress.update(100)
    assert stream.getvalue() == ""  # not a terminal: everything goes through the logger
    assert logged == [
        "translate: 1000/3000 lines (33%), 100.0 lines/s, 20 s left",
        "translate: 2000/3000 lines (66%), 100.0 lines/s, 10 s left",
        "translate: 2500/3000 lines (83%), 100.0 lines/s, done in 25 s",
    ]


def test_an_unknown_total_gives_count_and_rate_only(logged):
    clock = Clock(0.0)
    tty = FakeTTY()
    progress = Progress(None, "lines", "read", stream=tty, every_seconds=1, clock=clock)
    clock.now = 10.0
    progress.update(500)
    assert tty.getvalue() == "\rread  500 lines  50.0 lines/s"
    progress.close()
    assert logged == ["read: 500 lines, 50.0 lines/s, done in 10 s"]


def test_an_error_inside_the_block_erases_the_bar_without_a_final_line(logged):
    clock = Clock(0.0)
    tty = FakeTTY()
    with pytest.raises(RuntimeError):
        with Progress(10, "lines", "x", stream=tty, clock=clock) as progress:
            clock.now = 1.0
            progress.update(5)
            raise RuntimeError("bad line")
    bar = "x [##########----------]  5/10 lines  50%  5.0 lines/s  1 s left"
    assert tty.getvalue() == "\r" + bar + "\r" + " " * len(bar) + "\r"
    assert logged == []


@pytest.mark.parametrize(
    "seconds,text", [(0.4, "0 s"), (59, "59 s"), (185, "3:05"), (3725, "1:02:05")]
)
def test_duration(seconds, text):
    assert duration(seconds) == text


@pytest.mark.parametrize(
    "data,lines",
    [(b"", 0), (b"a\n", 1), (b"a\nb", 2), (b"a\n\nb\n", 3), (b"\n" * 9, 9), ("é\nü\n".encode(), 2)],
)
def test_count_lines_across_chunk_boundaries(tmp_path, monkeypatch, data, lines):
    path = tmp_path / "f.txt"
    path.write_bytes(data)
    for chunk in (1, 2, 3, 1 << 20):
        monkeypatch.setattr(progress_module, "CHUNK", chunk)
        assert count_lines(path) == lines
    assert count_lines(tmp_path / "missing.txt") is None


def test_the_translator_reports_every_line_once_as_it_finishes():
    torch.manual_seed(0)
    model = build_model(model_options(), VOCABS).eval()
    translator = Translator(
        [model], VOCABS, search=SearchOptions(beam_size=2, max_length=5), batch_size=2
    )
    lines = ["s1 s2", "", "s3", "s4 s5 s1", "  ", "s2"]
    calls = []
    translator.translate(lines, progress=calls.append)
    assert calls == [2, 1, 1, 1, 1]  # the two empty lines first, then each decoded line


def test_preprocess_reports_the_lines_read_of_each_pass(tmp_path, logged):
    preprocess_in_process(str(tmp_path), n_train=30, n_valid=7)
    done = [m.split(", ")[0] for m in logged if "done in" in m]
    assert done == [
        "vocabulary: 30/30 lines (100%)",
        "train: 30/30 lines (100%)",
        "valid: 7/7 lines (100%)",
    ]


def test_preprocess_counts_skipped_lines_as_read(tmp_path, logged):
    from onmt_lite.opts import build_parser, config_opts, parse, preprocess_opts
    from onmt_lite.preprocess import preprocess

    src = write_lines(tmp_path / "s.txt", ["a b", "", "c", "d e f g h"])
    tgt = write_lines(tmp_path / "t.txt", ["b a", "x", "", "h g f e d"])
    opt = parse(
        build_parser("p", [config_opts, preprocess_opts]),
        [
            "-train_src",
            src,
            "-train_tgt",
            tgt,
            "-save_data",
            str(tmp_path / "d"),
            "-src_seq_length",
            "3",
        ],
    )
    preprocess(opt)
    assert "train: 4/4 lines (100%)" in [m.split(", ")[0] for m in logged]
