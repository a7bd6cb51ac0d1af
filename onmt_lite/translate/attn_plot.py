"""Attention heatmaps as PNG files (``onmt_lite_translate -attn_plot DIR``; matplotlib is optional,
see onmt_lite/utils/plotting.py).

Geometry, in pixels (``DPI`` pixels an inch): a heatmap is ``CELL`` pixels per source token wide and
``CELL`` per row high (a row per output token, plus ``</s>`` when the hypothesis ended with it),
each side clamped to ``[MIN_SIDE, MAX_SIDE]``. With ``h`` heatmaps (1, or 2 with the copy attention)
and an optional p_copy strip::

    width  = LEFT + h * (side(src_len) + GAP) + (STRIP + GAP if p_copy) + COLORBAR + RIGHT
    height = BOTTOM + side(rows) + TOP
"""

import math
import os

from onmt_lite.utils.output_paths import require_makeable_directory
from onmt_lite.utils.plotting import new_figure, require_matplotlib, save_png
from onmt_lite.utils.progress import Progress

CELL = 25
MIN_SIDE = 150
MAX_SIDE = 2000
LEFT = 120
BOTTOM = 120
TOP = 40
RIGHT = 60
GAP = 30
STRIP = 30
COLORBAR = 15
MAX_LABELS = MAX_SIDE // CELL  # more tokens than this: label every k-th one
LABEL_CHARS = 12  # longer tokens are cut, so that labels fit the margins


def side(n):
    """Pixels of a heatmap side holding ``n`` tokens."""
    return min(max(CELL * n, MIN_SIDE), MAX_SIDE)


def figure_size(src_len, rows, heatmaps=1, strip=False):
    """``(width, height)`` in pixels of the figure (see the module docstring)."""
    width = (
        LEFT + heatmaps * (side(src_len) + GAP) + (STRIP + GAP if strip else 0) + COLORBAR + RIGHT
    )
    return width, BOTTOM + side(rows) + TOP


def _array(values, src_len=None):
    """A float numpy array of a tensor (or nested list); columns cut to ``src_len``."""
    import numpy as np

    array = (
        values.detach().float().cpu().numpy()
        if hasattr(values, "detach")
        else np.asarray(values, dtype=float)
    )
    return array[:, :src_len] if src_len is not None else array


def _labels(axis, tokens):
    """Tick labels (cut to LABEL_CHARS) on ``axis`` (an Axes' xaxis or yaxis), every k-th one."""
    step = math.ceil(len(tokens) / MAX_LABELS)
    ticks = range(0, len(tokens), step)
    axis.set_ticks(list(ticks))
    cut = [t if len(t) <= LABEL_CHARS else t[: LABEL_CHARS - 1] + "…" for t in tokens]
    axis.set_ticklabels([cut[i] for i in ticks], fontsize=8)


def _axes(figure, x, width, height):
    """An Axes ``width x height`` pixels, ``x`` pixels from the left, above the bottom margin."""
    fig_w = figure.bbox.width
    fig_h = figure.bbox.height
    return figure.add_axes((x / fig_w, BOTTOM / fig_h, width / fig_w, height / fig_h))


def _heatmap(figure, x, matrix, source, rows, title, first):
    """One heatmap ``[rows x src_len]``; the output tokens are labelled on the ``first`` one
    only."""
    axes = _axes(figure, x, side(len(source)), side(len(rows)))
    image = axes.imshow(
        matrix, aspect="auto", cmap="viridis", vmin=0.0, vmax=1.0, interpolation="nearest"
    )
    axes.set_title(title, fontsize=10)
    _labels(axes.xaxis, source)
    axes.tick_params(axis="x", labelrotation=90)
    axes.set_xlabel("source", fontsize=9)
    if first:
        _labels(axes.yaxis, rows)
        axes.set_ylabel("output", fontsize=9)
    else:
        axes.set_yticks([])
    return image


def plot_attention(result, path, copy_attention=None, p_copy=None):
    """Draw the 1-best hypothesis of ``result`` (a translator Result) into a PNG at ``path``.

    ``result.attention[0]`` is ``[rows x S]`` (S >= the source length; the padding is cut off), a
    row per output token and ``</s>``; ``copy_attention`` ``[rows x S]`` (copy models) adds a second
    heatmap, ``p_copy`` ``[rows]`` (or ``[rows x 1]``) a strip with the copy probability of each
    row.
    """
    source = list(result.source)
    attention = _array(result.attention[0], len(source))
    rows = list(result.tokens[0]) + ["</s>"] * (attention.shape[0] - len(result.tokens[0]))
    panels = [(attention, "attention")]
    if copy_attention is not None:
        panels.append((_array(copy_attention, len(source)), "copy attention"))
    width, height = figure_size(len(source), len(rows), len(panels), p_copy is not None)
    figure = new_figure(width, height, "-attn_plot")
    x = LEFT
    for i, (matrix, title) in enumerate(panels):
        image = _heatmap(figure, x, matrix, source, rows, title, first=i == 0)
        x += side(len(source)) + GAP
    if p_copy is not None:
        strip = _axes(figure, x, STRIP, side(len(rows)))
        strip.imshow(
            _array(p_copy).reshape(-1, 1),
            aspect="auto",
            cmap="viridis",
            vmin=0.0,
            vmax=1.0,
            interpolation="nearest",
        )
        strip.set_title("p_copy", fontsize=10)
        strip.set_xticks([])
        strip.set_yticks([])
        x += STRIP + GAP
    figure.colorbar(image, cax=_axes(figure, x, COLORBAR, side(len(rows))))
    save_png(figure, path)


def check_directory(directory):
    """Check that matplotlib is there and that ``directory`` is a writable directory or can be made
    (its nearest existing parent a writable directory), before any translating; a UserError
    otherwise. The translation's staged outputs make it (and remove it if the run fails)."""
    require_matplotlib("-attn_plot")
    require_makeable_directory(directory, f"-attn_plot {directory}")


def plot_path(directory, line):
    """``DIR/00001.png`` for input line 1."""
    return os.path.join(directory, f"{line:05d}.png")


def write_attention_plots(results, directory, first=1):
    """A PNG per translated line (``DIR/00001.png`` for line 1; empty lines get none), the first
    result being line ``first``; returns the number written."""
    lines = [i for i, result in enumerate(results, first) if result.attention[0] is not None]
    with Progress(len(lines), "plots", "attn_plot") as progress:
        for line in lines:
            result = results[line - first]
            plot_attention(
                result,
                plot_path(directory, line),
                (result.copy_attention or [None])[0],
                (result.p_copy or [None])[0],
            )
            progress.update(1)
    return len(lines)
