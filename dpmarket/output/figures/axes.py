"""Axis ticks a person can read, shared by every figure of dpmarket.

matplotlib labels a log axis at powers of ten only, so an axis spanning less than a decade or two
(ψ between 0.012 and 0.03, budgets between 2 and 30) shows one label or none. :func:`label_log`
picks the coarsest of decades, 1-2-5 steps and every integer multiple that puts enough labels
inside the axis' limits, and falls back to evenly spaced values on very narrow ranges. Labels are
plain text (``0.02``, ``1e-05``): mathtext labels double the drawing time of a small figure.
"""

from __future__ import annotations

import numpy as np
from matplotlib import ticker

MIN_LABELS = 3  # fewer labelled ticks than this and the reader cannot tell the scale
_CANDIDATES = ((1.0,), (1.0, 2.0, 5.0), tuple(float(k) for k in range(1, 10)))


def log_locator(lo: float, hi: float) -> ticker.Locator:
    """The coarsest locator with at least MIN_LABELS ticks in [lo, hi] (lo > 0)."""
    for subs in _CANDIDATES:
        ticks = ticker.LogLocator(base=10.0, subs=subs, numticks=100).tick_values(lo, hi)
        inside = ticks[(ticks >= lo * (1 - 1e-9)) & (ticks <= hi * (1 + 1e-9))]
        if len(inside) >= MIN_LABELS:
            return ticker.FixedLocator(_thin(inside))
    return ticker.MaxNLocator(nbins=6, steps=[1, 2, 2.5, 5, 10], min_n_ticks=MIN_LABELS)


def _thin(ticks: np.ndarray, most: int = 9) -> np.ndarray:
    """Every second (third…) tick when there are more than ``most``, so labels never overlap."""
    step = int(np.ceil(len(ticks) / most))
    return ticks[::step]


def plain(value: float, _position: int | None = None) -> str:
    """A tick label as plain text: whole numbers from 1,000 to 999,999 with separators (``20,000``,
    not ``2e+04``), anything else with three significant digits (``0.02``, ``1e-05``, ``2e+06``)."""
    if 1_000 <= abs(value) < 1_000_000 and float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:.3g}"


def label_log(ax, which: str = "y") -> None:
    """Label the log-scaled ``which`` axis ("x" or "y") of ``ax`` readably. Call it once the data
    are drawn: it reads the axis' limits (and fixes them, so the ticks stay where they are)."""
    axis = ax.yaxis if which == "y" else ax.xaxis
    lo, hi = sorted(ax.get_ylim() if which == "y" else ax.get_xlim())
    if not (lo > 0 and np.isfinite(hi)):
        return
    (ax.set_ylim if which == "y" else ax.set_xlim)(lo, hi)
    axis.set_major_locator(log_locator(lo, hi))
    axis.set_major_formatter(ticker.FuncFormatter(plain))
    axis.set_minor_locator(ticker.LogLocator(base=10.0, subs=tuple(range(2, 10)), numticks=100))
    axis.set_minor_formatter(ticker.NullFormatter())


def integer_ticks(axis) -> None:
    """Ticks at whole numbers only (owner numbers, counts): no "2.5" between owners 2 and 3."""
    axis.set_major_locator(ticker.MaxNLocator(integer=True))


def text_colour(rgba) -> str:
    """Black or white, whichever reads better on a background of colour ``rgba`` (WCAG relative
    luminance: white text from about the luminance where both contrasts are equal, 0.18)."""
    channels = np.asarray(rgba, dtype=float)[:3]
    linear = np.where(channels <= 0.04045, channels / 12.92, ((channels + 0.055) / 1.055) ** 2.4)
    luminance = float(linear @ [0.2126, 0.7152, 0.0722])
    return "black" if luminance > 0.179 else "white"


LEGEND_ROW = 1.55  # a legend row's height, in font sizes
ZERO_STYLE = {"color": "tab:red", "ls": ":", "lw": 1.4}  # ψ of the untrained model θ = 0, on every ψ figure
ZERO_LABEL = "untrained model θ = 0"


def legend_below(fig, ax, *, fontsize: float = 7.0, ncol: int = 1) -> None:
    """The legend of ``ax`` under the axes and outside them, so that it never covers data: the figure
    grows by the legend's height, the axes keep their size and the margins theirs."""
    handles, labels = ax.get_legend_handles_labels()
    if not labels:
        return
    rows = -(-len(labels) // ncol)
    extra = (rows * fontsize * LEGEND_ROW + 8.0) / 72.0  # inches
    width, height = fig.get_size_inches()
    params = fig.subplotpars
    bottom, top = params.bottom * height, (1.0 - params.top) * height  # margins, inches
    fig.set_size_inches(width, height + extra)
    fig.subplots_adjust(bottom=(bottom + extra) / (height + extra), top=1.0 - top / (height + extra))
    fig.legend(handles, labels, loc="lower left", bbox_to_anchor=(0.01, 0.005), fontsize=fontsize,
               ncol=ncol, frameon=False, borderaxespad=0.2, handlelength=2.2)


def integer_colorbar(fig, mappable, values, **kw):
    """A colour bar for counts: whole-number ticks only, and for a few distinct counts (at most 12)
    one colour band per count, so a colour reads as a count rather than a range."""
    from matplotlib import colors, ticker

    values = np.asarray(values, dtype=float)
    lo, hi = (float(values.min()), float(values.max())) if values.size else (0.0, 1.0)
    if hi - lo <= 12:
        bounds = np.arange(np.floor(lo) - 0.5, np.ceil(hi) + 1.0, 1.0)
        mappable.set_norm(colors.BoundaryNorm(bounds, mappable.get_cmap().N))
        bar = fig.colorbar(mappable, boundaries=bounds, ticks=np.arange(np.floor(lo), np.ceil(hi) + 1), **kw)
    else:
        bar = fig.colorbar(mappable, **kw)
        bar.locator = ticker.MaxNLocator(integer=True)
    bar.formatter = ticker.FuncFormatter(lambda v, _=None: f"{int(round(v)):,}")
    bar.update_ticks()
    return bar


def keep_texts_inside(fig, ax, texts, pad: float = 4.0) -> None:
    """Widen ``ax``'s limits until every text in ``texts`` lies inside the axes (names are never cut
    at the figure's edge): the texts are measured once drawn, the axes' pixel box is grown by their
    overhang and turned back into limits (log axes included). Texts anchored to data points keep
    their offsets in points, so one widening, by a tenth more than measured, is enough."""
    if not texts:
        return
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = fig.canvas if isinstance(fig.canvas, FigureCanvasAgg) else FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    box = ax.get_window_extent(renderer)
    left = right = bottom = top = 0.0
    for text in texts:
        ext = text.get_window_extent(renderer)
        left, right = max(left, box.x0 - ext.x0 + pad), max(right, ext.x1 - box.x1 + pad)
        bottom, top = max(bottom, box.y0 - ext.y0 + pad), max(top, ext.y1 - box.y1 + pad)
    if not (left or right or bottom or top):
        return
    grow = 1.1
    inverse = ax.transData.inverted()
    (x0, y0), (x1, y1) = inverse.transform([(box.x0 - grow * left, box.y0 - grow * bottom),
                                            (box.x1 + grow * right, box.y1 + grow * top)])
    ax.set_xlim(x0, x1)
    ax.set_ylim(y0, y1)


def separate_texts(fig, texts, gap: float = 1.0) -> None:
    """Move labels (annotations offset from their points) down, one after another, until no two
    overlap: names of nearby points stay readable. Placed in order of height, each below the ones it
    would cover."""
    if len(texts) < 2:
        return
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = fig.canvas if isinstance(fig.canvas, FigureCanvasAgg) else FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    placed = []
    for text in sorted(texts, key=lambda t: -t.get_window_extent(renderer).y1):
        for _ in range(len(texts) + 1):
            ext = text.get_window_extent(renderer)
            hit = next((p for p in placed if ext.overlaps(p)), None)
            if hit is None:
                break
            dx, dy = text.xyann
            text.xyann = (dx, dy - (ext.y1 - hit.y0 + gap) * 72.0 / fig.dpi)
        placed.append(text.get_window_extent(renderer))
