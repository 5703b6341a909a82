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
