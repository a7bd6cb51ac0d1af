"""matplotlib helpers for the plots (attention heatmaps, training curves).

matplotlib is optional (``pip install -e '.[plot]'``): it is imported only when a figure is drawn,
on the Agg backend of a bare ``Figure`` (no pyplot, no global backend switch).
"""

import io

from onmt_lite.utils.errors import UserError
from onmt_lite.utils.files import write_bytes

DPI = 100


def require_matplotlib(what):
    """``(Figure, FigureCanvasAgg)``; a UserError naming ``what`` when matplotlib is not
    installed."""
    try:
        # first: a cached submodule would hide matplotlib set to None
        import matplotlib  # noqa: F401
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise UserError(
            f"{what} needs matplotlib (pip install matplotlib, or pip install -e '.[plot]')"
        ) from None
    return Figure, FigureCanvasAgg


def new_figure(width, height, what, **kwargs):
    """A matplotlib Figure of ``width x height`` pixels on the Agg canvas."""
    figure_class, canvas_class = require_matplotlib(what)
    figure = figure_class(figsize=(width / DPI, height / DPI), dpi=DPI, **kwargs)
    canvas_class(figure)
    return figure


def save_png(figure, path):
    """Render ``figure`` to PNG in memory and write it to ``path`` atomically."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI)
    write_bytes(buffer.getvalue(), path)
