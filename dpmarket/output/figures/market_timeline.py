"""The market in time as a picture: price, participants, cumulative spend and ψ against time.

``market_timeline.png`` of a run with ``market.mode = "dynamic"``: four stacked panels sharing the
simulated-time axis, drawn from :func:`dpmarket.output.timeseries.market_series` (the market rows
of events.csv and the ψ of metrics.csv), so the picture shows exactly what the files say. Only
plain lists cross to the painter process (:func:`dpmarket.output.results.market_timeline_data`).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import numpy as np  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from dpmarket.output.figures.axes import ZERO_LABEL, ZERO_STYLE, integer_ticks, label_log  # noqa: E402

NAME = "market_timeline.png"


def draw(data: dict, path: str | Path, window: tuple[float, float] | None = None) -> None:
    """Price, participants and cumulative spend as step functions (each changes at a market event),
    and ψ of the published model on a log axis, one panel each over the same simulated time
    (the whole run, or ``window``: the timeline command's --from/--to)."""
    fig = Figure(figsize=(6.4, 7.2))
    fig.subplots_adjust(left=0.14, right=0.97, bottom=0.07, top=0.94, hspace=0.12)
    price, people, spend, psi = fig.subplots(4, 1, sharex=True)
    end = max(data["time"][-1:] + data["psi_time"][-1:], default=1.0)
    panels = ((price, "price", "price per unit ε"), (people, "participants", "owners taking part"),
              (spend, "spend", "paid so far"))
    for ax, key, label in panels:
        # Each value holds until the next market event, and the last one until the run ends.
        ax.step(data["time"] + [end], data[key] + data[key][-1:], where="post", color="black", lw=1.2)
        ax.set_ylabel(label, fontsize=9)
    integer_ticks(people.yaxis)
    _draw_psi(psi, data)
    psi.set_xlabel("simulated time")
    psi.set_xlim(*(window or (0.0, end)))
    fig.suptitle(f"{data['title']}: the market in time", fontsize=10)
    fig.savefig(path, format="png", dpi=100, metadata={"Software": None})


def _draw_psi(ax, data: dict) -> None:
    """ψ against time on a log axis (points with ψ ≤ 0 cannot be drawn there and are left out)."""
    t, psi = np.asarray(data["psi_time"]), np.asarray(data["psi"])
    keep = psi > 0
    if keep.any():
        ax.semilogy(t[keep], psi[keep], color="black", lw=1.2)
        if psi[0] > 0:  # metrics.csv's first row is k = 0: the untrained model θ = 0
            ax.axhline(psi[0], **ZERO_STYLE)
            ax.annotate(ZERO_LABEL, (0.99, psi[0]), xycoords=("axes fraction", "data"), ha="right",
                        va="bottom", fontsize=7, color=ZERO_STYLE["color"])
        label_log(ax, "y")
    ax.set_ylabel("ψ of the model", fontsize=9)
