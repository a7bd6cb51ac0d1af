"""Plots: tools/plot_training.py on a real training log, attention heatmaps (onmt_lite_translate
-attn_plot), and the message when matplotlib is missing. PNG sizes are read from the IHDR chunk."""

import os
import struct
import sys

import pytest
import torch

from onmt_lite.bin.translate import main as translate_main
from onmt_lite.models.builder import build_model
from onmt_lite.translate import attn_plot
from onmt_lite.translate.search import SearchOptions
from onmt_lite.translate.translator import Translator
from onmt_lite.utils.errors import UserError
from tests.helpers import TINY_MODEL, preprocess_in_process, tool, train_in_process, write_lines
from tests.model_helpers import VOCABS, model_options

pytest.importorskip("matplotlib")


def png_size(path):
    """``(width, height)`` of a PNG file, checking its signature and that IHDR comes first."""
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n", path
    length, chunk = struct.unpack(">I4s", head[8:16])
    assert (length, chunk) == (13, b"IHDR")
    return struct.unpack(">II", head[16:24])


def side(n):
    """A heatmap side as documented in attn_plot: 25 px a token, within [150, 2000]."""
    return min(max(25 * n, 150), 2000)


def fails(capsys, main, args):
    """Run a command's main, expect exit status 2 and return its one stderr line."""
    with pytest.raises(SystemExit) as exc:
        main([str(a) for a in args])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    return err[0]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny model trained 4 steps, validated (with BLEU and chrF) at steps 2 and 4, and its
    log."""
    directory = tmp_path_factory.mktemp("plots")
    data = preprocess_in_process(str(directory), n_train=40, n_valid=8)
    save_model = str(directory / "m")
    train_in_process(
        data,
        save_model,
        *TINY_MODEL,
        "-train_steps",
        4,
        "-report_every",
        1,
        "-valid_steps",
        2,
        "-valid_metrics",
        "BLEU",
        "chrF",
        "-seed",
        1,
    )
    return {"log": f"{save_model}.log", "model": f"{save_model}_step_4.pt", "dir": directory}


# --- tools/plot_training.py -----------------------------------------------------------------------


def test_the_log_of_a_real_training_is_read(trained):
    curves = tool("plot_training").read_log(trained["log"])
    assert sorted(curves["train", "xent"]) == [1, 2, 3, 4]
    assert sorted(curves["train", "acc"]) == sorted(curves["train", "ppl"]) == [1, 2, 3, 4]
    for name in ("xent", "ppl", "acc", "BLEU", "chrF2"):
        assert sorted(curves["valid", name]) == [2, 4], name
    assert curves["valid", "ppl"][4] > 1 and 0 <= curves["valid", "acc"][4] <= 100


def test_a_resumed_run_keeps_the_last_value_of_each_step(tmp_path):
    log = write_lines(
        tmp_path / "t.log",
        [
            "[2026-01-01 00:00:00 INFO] Step 1/3; acc:  10.00; ppl:    50.00; xent:  3.91; lr: 1; "
            "10/ 10 tok/s; 0 sec",
            "[2026-01-01 00:00:01 INFO] Step 2/3; acc:  20.00; ppl:    40.00; xent:  3.69; lr: 1; "
            "10/ 10 tok/s; 1 sec",
            "some other line",
            "[2026-01-01 00:01:00 INFO] Step 2/3; acc:  21.00; ppl:    39.00; xent:  3.66; lr: 1; "
            "10/ 10 tok/s; 1 sec",
            "[2026-01-01 00:01:01 INFO] Validation at step 2: perplexity 38.5000, accuracy 22.50, "
            "xent 3.6507",
        ],
    )
    curves = tool("plot_training").read_log(log)
    assert curves["train", "acc"] == {1: 10.0, 2: 21.0} and curves["train", "xent"] == {
        1: 3.91,
        2: 3.66,
    }
    assert curves["valid", "ppl"] == {2: 38.5} and curves["valid", "xent"] == {2: 3.6507}
    assert not tool("plot_training").metric_names(curves)


def test_the_training_plot_is_a_png_of_the_documented_size(trained, tmp_path, capsys):
    output = tmp_path / "curves.png"
    tool("plot_training").main(["-log", trained["log"], "-output", str(output)])
    assert png_size(output) == (1000, 750) == tool("plot_training").FIGURE_SIZE
    assert sorted(os.listdir(tmp_path)) == ["curves.png"]  # no temporary file left
    two = tmp_path / "two.png"
    tool("plot_training").main(
        ["-log", trained["log"], "-log", trained["log"], "-output", str(two)]
    )
    assert png_size(two) == (1000, 750)


def test_bad_training_logs_are_one_line_errors_and_write_nothing(trained, tmp_path, capsys):
    main = tool("plot_training").main
    output = tmp_path / "out" / "c.png"
    os.makedirs(tmp_path / "out")
    not_a_log = write_lines(tmp_path / "src.txt", ["a b c", "Step by step"])
    assert "missing.log: cannot read" in fails(
        capsys, main, ["-log", tmp_path / "missing.log", "-output", output]
    )
    assert "src.txt: no training lines" in fails(
        capsys, main, ["-log", not_a_log, "-output", output]
    )
    both = ["-log", trained["log"], not_a_log, "-output", output]
    assert "src.txt: no training lines" in fails(capsys, main, both)
    assert "does not exist" in fails(
        capsys, main, ["-log", trained["log"], "-output", tmp_path / "no" / "c.png"]
    )
    assert os.listdir(tmp_path / "out") == []


# --- attention plots ------------------------------------------------------------------------------


def make_translator(copy):
    """A Translator on a random tiny model (with copy attention if ``copy``)."""
    torch.manual_seed(0)
    model = build_model(model_options(*(["-copy_attn"] if copy else [])), VOCABS).eval()
    return Translator(
        [model], VOCABS, search=SearchOptions(beam_size=3, max_length=12), batch_size=4
    )


@pytest.fixture(scope="module", params=["plain", "copy"])
def translator(request):
    return make_translator(request.param == "copy")


SOURCE = "s1 s2 s3 oov1 s4 s5 s9 a_token_longer_than_twelve_characters"  # 8 tokens: 200 px wide


def test_the_attention_plot_has_the_documented_size(translator, tmp_path):
    result = translator.translate([SOURCE])[0]
    rows = result.attention[0].shape[0]
    # + </s> unless cut at -max_length
    assert rows in (
        len(result.tokens[0]),
        len(result.tokens[0]) + 1,
    )
    attn_plot.plot_attention(result, tmp_path / "a.png")
    assert png_size(tmp_path / "a.png") == (120 + (200 + 30) + 15 + 60, 120 + side(rows) + 40)
    assert attn_plot.figure_size(8, rows) == png_size(tmp_path / "a.png")


def test_copy_models_plot_the_copy_attention_and_p_copy(tmp_path):
    translator = make_translator(copy=True)
    result = translator.translate([SOURCE])[0]
    rows = result.attention[0].shape[0]
    assert result.copy_attention[0].shape == result.attention[0].shape and result.p_copy[
        0
    ].shape == (rows, 1)
    assert bool(((result.p_copy[0] > 0) & (result.p_copy[0] < 1)).all())
    torch.testing.assert_close(result.copy_attention[0].sum(1), torch.ones(rows))
    assert attn_plot.write_attention_plots([result], str(tmp_path)) == 1
    assert png_size(tmp_path / "00001.png") == (
        120 + 2 * (200 + 30) + (30 + 30) + 15 + 60,
        120 + side(rows) + 40,
    )
    plain = make_translator(copy=False).translate([SOURCE])[0]
    assert plain.copy_attention == [None] and plain.p_copy == [None]


def test_without_attention_a_copy_model_gives_the_same_translation_and_no_attention():
    kept = make_translator(copy=True).translate([SOURCE])[0]
    translator = make_translator(copy=True)
    translator.search_options.attention = False
    result = translator.translate([SOURCE])[0]
    assert (result.hypotheses, result.scores) == (kept.hypotheses, kept.scores)
    assert result.attention == result.copy_attention == result.p_copy == [None]


def test_figure_size_clamps_each_side():
    assert attn_plot.figure_size(1, 1) == (120 + 150 + 30 + 15 + 60, 120 + 150 + 40)
    assert attn_plot.figure_size(100_000, 100, 2, True) == (
        120 + 2 * 2030 + 60 + 75,
        120 + 2000 + 40,
    )


def test_translate_attn_plot_writes_one_png_per_non_empty_line(trained, tmp_path, capsys):
    src = write_lines(tmp_path / "src.txt", ["w1 w2 w3", "", "w4 w5 w6 w7 w8 w9 w10"])
    plots = tmp_path / "plots" / "run1"  # created, parents too
    translate_main(
        [
            "-model",
            trained["model"],
            "-src",
            src,
            "-output",
            str(tmp_path / "pred.txt"),
            "-attn_plot",
            str(plots),
            "-max_length",
            "10",
        ]
    )
    assert sorted(os.listdir(plots)) == ["00001.png", "00003.png"]
    outputs = (tmp_path / "pred.txt").read_text().splitlines()
    for name, n_src, output in (("00001.png", 3, outputs[0]), ("00003.png", 7, outputs[2])):
        width, height = png_size(plots / name)
        n_out = len(output.split())
        assert width == 120 + side(n_src) + 30 + 15 + 60
        assert height in (120 + side(n_out) + 40, 120 + side(n_out + 1) + 40)
    assert "attn_plot: 2/2 plots (100%)" in capsys.readouterr().err


def test_an_attn_plot_directory_that_cannot_be_made_fails_before_translating(
    trained, tmp_path, capsys
):
    src = write_lines(tmp_path / "src.txt", ["w1 w2"])
    blocker = write_lines(tmp_path / "file", ["not a directory"])
    err = fails(
        capsys,
        translate_main,
        [
            "-model",
            trained["model"],
            "-src",
            src,
            "-output",
            tmp_path / "pred.txt",
            "-attn_plot",
            os.path.join(blocker, "plots"),
        ],
    )
    assert "-attn_plot" in err and "cannot create the directory" in err
    assert not os.path.exists(tmp_path / "pred.txt")


# --- without matplotlib ---------------------------------------------------------------------------

MISSING = "needs matplotlib (pip install matplotlib, or pip install -e '.[plot]')"


def test_every_plotting_entry_point_names_the_missing_package(
    trained, tmp_path, monkeypatch, capsys
):
    result = make_translator(copy=False).translate([SOURCE])[0]
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(UserError, match=r"^-attn_plot needs matplotlib \(pip install"):
        attn_plot.plot_attention(result, tmp_path / "a.png")
    with pytest.raises(UserError, match="-attn_plot needs matplotlib"):
        attn_plot.check_directory(str(tmp_path / "plots"))
    assert (
        fails(
            capsys,
            tool("plot_training").main,
            ["-log", trained["log"], "-output", tmp_path / "c.png"],
        )
        == f"plot_training.py: error: plot_training.py {MISSING}"
    )
    src = write_lines(tmp_path / "src.txt", ["w1 w2"])
    args = [
        "-model",
        trained["model"],
        "-src",
        src,
        "-output",
        tmp_path / "pred.txt",
        "-attn_plot",
        tmp_path / "plots",
    ]
    assert (
        fails(capsys, translate_main, args) == f"onmt_lite_translate: error: -attn_plot {MISSING}"
    )
    assert sorted(os.listdir(tmp_path)) == ["src.txt"]
