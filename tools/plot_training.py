#!/usr/bin/env python
"""Plot the training curves in logs of onmt_lite_train as one PNG (needs matplotlib).

    python tools/plot_training.py -log runs/demo.log -output curves.png
    python tools/plot_training.py -log a.log -log b.log -output compare.png

A log is the ``-log_file`` of onmt_lite_train, or its stderr saved to a file. Four panels against
the step: loss (xent), perplexity (log scale) and accuracy (%), each for training (solid) and
validation (dashed, dots), and the validation BLEU and chrF when the run logged them
(``-valid_metrics``). Several logs are drawn together, one colour each. A log that holds several
runs (a resumed run appends to its ``-log_file``) keeps the last value logged for each step. Only
logs are read: the checkpoints keep no history of the scores. The lines read are those of
onmt_lite.train.report:

    [2026-11-22 10:00:00 INFO] Step 200/10000; acc:  41.20; ppl:    12.34; xent:  2.51; ...
    [2026-11-22 10:00:09 INFO] Validation at step 1000: perplexity 9.8765, accuracy 45.67, ...
        (then, with -valid_metrics: ; BLEU = 12.34 ... (signature); chrF2 = 45.67 (signature))

The figure is 1000 x 750 pixels (``FIGURE_SIZE``), written atomically.
"""

from __future__ import annotations

import re

from onmt_lite.opts import OptionParser, add, parse
from onmt_lite.utils.errors import UserError, run_command
from onmt_lite.utils.output_paths import require_file_path
from onmt_lite.utils.plotting import new_figure, require_matplotlib, save_png

PROG = "plot_training.py"
FIGURE_SIZE = (1000, 750)  # pixels
STEP = re.compile(r"\bStep (\d+)/\d+; acc: *([^;\s]+); ppl: *([^;\s]+); xent: *([^;\s]+);")
VALID = re.compile(
    r"\bValidation at step (\d+): perplexity ([^,\s]+), accuracy ([^,\s]+), xent ([^;\s]+)"
)
METRIC = re.compile(r"; (BLEU|chrF\S*) = (\S+)")
PANELS = (("xent", "loss (xent)"), ("ppl", "perplexity"), ("acc", "accuracy (%)"))


def build_parser():
    """The option parser of plot_training.py."""
    parser = OptionParser(PROG, "Plot training and validation curves from onmt_lite_train logs.")
    group = parser.add_argument_group("Plotting")
    add(
        group,
        "log",
        required=True,
        nargs="+",
        action="extend",
        help="Log file(s) of onmt_lite_train (-log_file, or its stderr); -log may be repeated",
    )
    add(group, "output", required=True, help="The PNG file to write")
    return parser


def _values(match):
    """``(step, [floats])`` of a regex match: the step, then the numbers."""
    return int(match.group(1)), [float(v) for v in match.groups()[1:]]


def parse_line(line, curves):
    """Add the numbers of one log line to ``curves`` ``{(split, name): {step: value}}``."""
    match = STEP.search(line)
    if match:
        step, values = _values(match)
        for name, value in zip(("acc", "ppl", "xent"), values):
            curves.setdefault(("train", name), {})[step] = value
        return
    match = VALID.search(line)
    if match:
        step, values = _values(match)
        for name, value in zip(("ppl", "acc", "xent"), values):
            curves.setdefault(("valid", name), {})[step] = value
        for name, value in METRIC.findall(line[match.end() :]):
            curves.setdefault(("valid", name), {})[step] = float(value)


def read_log(path):
    """``{(split, name): {step: value}}`` of one log; a UserError if it has no training Step
    line."""
    curves = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                parse_line(line, curves)
    except OSError as err:
        raise UserError(f"{path}: cannot read ({err.strerror})") from None
    if ("train", "xent") not in curves:
        raise UserError(
            f"{path}: no training lines 'Step N/M; acc: ..; ppl: ..; xent: ..' "
            "(is it a log of onmt_lite_train?)"
        )
    return curves


def metric_names(curves):
    """The validation metrics (BLEU, chrF2, ...) of a log, sorted."""
    return sorted(
        name for split, name in curves if split == "valid" and name not in ("xent", "ppl", "acc")
    )


def _draw(axes, curve, style, color, label):
    steps = sorted(curve)
    axes.plot(steps, [curve[s] for s in steps], style, color=color, label=label, markersize=4)


def draw(logs):
    """The figure of ``logs`` ``[(name, curves)]``: a 2 x 2 grid of panels."""
    figure = new_figure(*FIGURE_SIZE, PROG, layout="constrained")
    grid = figure.subplots(2, 2).ravel()
    for i, (name, curves) in enumerate(logs):
        suffix = f" ({name})" if len(logs) > 1 else ""
        color = f"C{i}"
        for axes, (key, _) in zip(grid, PANELS):
            for split, style in (("train", "-"), ("valid", "--o")):
                if (split, key) in curves:
                    _draw(axes, curves[split, key], style, color, f"{split}{suffix}")
        for j, metric in enumerate(metric_names(curves)):
            _draw(
                grid[3], curves["valid", metric], ("--o", ":s")[j % 2], color, f"{metric}{suffix}"
            )
    for axes, (_, title) in zip(grid, PANELS + (("", "validation BLEU / chrF"),)):
        axes.set_title(title, fontsize=10)
        axes.set_xlabel("step", fontsize=9)
        axes.xaxis.get_major_locator().set_params(integer=True)
        if axes.lines:
            axes.legend(fontsize=8)
    grid[1].set_yscale("log")
    if not grid[3].lines:
        grid[3].text(
            0.5,
            0.5,
            "not logged\n(train with -valid_metrics BLEU chrF)",
            ha="center",
            va="center",
            transform=grid[3].transAxes,
            fontsize=9,
        )
    return figure


@run_command(PROG)
def main(argv: list[str] | None = None) -> None:
    """Run plot_training.py with ``argv`` (default: the command line)."""
    opt = parse(build_parser(), argv)
    require_matplotlib(PROG)
    require_file_path(opt.output, "-output")
    logs = [(path, read_log(path)) for path in opt.log]
    save_png(draw(logs), opt.output)
    print(f"plotted {len(logs)} log(s) into {opt.output}")


if __name__ == "__main__":
    main()
