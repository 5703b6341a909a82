"""``timeline.png``: lanes over simulated time (owners, or channels or owner groups for many owners)
above the owner of each update against k, from the plain data :class:`dpmarket.output.views.Lanes`
gathers from spans.csv (drawn in the painter process for a run, in the command for a selection)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import numpy as np  # noqa: E402
from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402
from matplotlib.collections import PolyCollection  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from dpmarket.output.figures.axes import integer_ticks  # noqa: E402

COLOURS = {
    "applied": "#2ca02c",
    "lost_collision": "#d62728",
    "lost_loss": "#ff7f0e",
    "refused": "#9467bd",
    "dropped_offline": "#8c564b",
    "unfinished": "#7f7f7f",
}
LABELS = {
    "applied": "applied",
    "lost_collision": "lost to collision",
    "lost_loss": "lost to loss",
    "refused": "refused",
    "dropped_offline": "dropped offline",
    "unfinished": "unfinished at the end",
}
PLOT_INCHES = 7.5  # the time axis' width, whatever the names need beside it


def draw_lanes(data: dict, path: str | Path) -> None:
    """``timeline.png``: time on x, one lane per owner (or per channel or owner group beyond
    :data:`dpmarket.output.views.MAX_LANES` owners), exchanges coloured by outcome (one bar each, or
    stacked counts per time bin), outages shaded, collisions marked; below, the owner of each update
    against k (the papers' Figures 4 and 9). The names' column is as wide as the longest name."""
    lanes = len(data["labels"])
    height = max(1.2, 0.17 * lanes)
    fig = Figure(figsize=(PLOT_INCHES + 3.0, height + SEQUENCE_INCHES + 2.6))
    canvas = FigureCanvasAgg(fig)
    top, bottom = fig.add_axes((0.2, 0.5, 0.7, 0.4)), fig.add_axes((0.2, 0.1, 0.7, 0.3))
    if data["binned"]:
        _counted_lanes(top, data)
    else:
        _owner_lanes(top, data)
    top.set_yticks(range(lanes), data["labels"], fontsize=8 if lanes <= 25 else 6)
    top.set_ylim(lanes - 0.5, -0.5)
    top.set_xlim(data["t0"], data["t1"])
    top.set_xlabel("simulated time")
    _legend(top, data)
    _sequence_panel(fig, bottom, data)
    fig.suptitle(f"{data['title']}\n{_what(data)}", fontsize=9, y=1 - 0.08 / fig.get_size_inches()[1])
    _place(fig, canvas, top, bottom, height)
    fig.savefig(path, format="png", dpi=100, metadata={"Software": None})


SEQUENCE_INCHES = 2.2
TOP, GAP, BOTTOM, RIGHT = 1.0, 1.0, 0.55, 1.4  # inches around the panels: title and legend, labels


def _place(fig, canvas, top, bottom, height: float) -> None:
    """Size the figure around the panels, with room on the left for the longest name, measured as
    drawn: a name is never clipped."""
    renderer = canvas.get_renderer()
    widest = max([t.get_window_extent(renderer).width for t in top.get_yticklabels()] + [30.0]) / fig.dpi
    left = widest + 0.3
    width, tall = left + PLOT_INCHES + RIGHT, TOP + height + GAP + SEQUENCE_INCHES + BOTTOM
    fig.set_size_inches(width, tall)
    top.set_position(
        (left / width, (BOTTOM + SEQUENCE_INCHES + GAP) / tall, PLOT_INCHES / width, height / tall)
    )
    bottom.set_position((left / width, BOTTOM / tall, PLOT_INCHES / width, SEQUENCE_INCHES / tall))
    for image in bottom.images:  # the density's colour bar, beside the panel
        image.colorbar.ax.set_position(
            ((left + PLOT_INCHES + 0.15) / width, BOTTOM / tall, 0.15 / width, SEQUENCE_INCHES / tall)
        )
    fig.suptitle(fig._suptitle.get_text(), fontsize=9, y=1 - 0.08 / tall, va="top")


def _owner_lanes(ax, data: dict) -> None:
    """One bar per exchange, coloured by outcome; outages grey, budgets exhausted lilac, collisions x.
    Each colour is one collection of rectangles (an artist per lane would cost seconds for 100 lanes)."""
    for key, colour in (("outages", "0.82"), ("exhausted", "#e8d9f1")):
        if data[key]:
            lane, a, b = (np.array(v, dtype=float) for v in zip(*data[key], strict=True))
            ax.add_collection(_rectangles(lane, a, b, 0.45, facecolor=colour, lw=0, zorder=1))
    if data["bars"]:
        lane, a, b, outcome = (np.array(v) for v in zip(*data["bars"], strict=True))
        for code, name in enumerate(data["outcomes"]):
            mine = outcome == code
            if name in COLOURS and mine.any():
                # an edge as wide as a line: an exchange of a millisecond stays visible on a long run
                ax.add_collection(_rectangles(lane[mine], a[mine], b[mine], 0.3, facecolor=COLOURS[name],
                                              edgecolor=COLOURS[name], lw=0.6, zorder=2,
                                              label=f"exchange {name}"))
    if data["collisions"]:
        lanes, times = zip(*data["collisions"], strict=True)
        ax.scatter(times, lanes, marker="x", s=14, color="black", lw=0.8, zorder=3, label="collision")


def _rectangles(lane: np.ndarray, start: np.ndarray, end: np.ndarray, half: float, **style) -> PolyCollection:
    """Rectangles [start, end] × [lane − half, lane + half], as one collection."""
    lane = np.asarray(lane, dtype=float)
    corners = np.stack([np.stack([start, lane - half], 1), np.stack([end, lane - half], 1),
                        np.stack([end, lane + half], 1), np.stack([start, lane + half], 1)], 1)
    return PolyCollection(corners, **style)


def _counted_lanes(ax, data: dict) -> None:
    """Per lane and time bin, exchanges stacked by outcome (scaled to the lane's busiest bin), over a
    grey background as dark as the share of the lane's owners offline."""
    edges = np.asarray(data["edges"])
    counts = np.asarray(data["counts"])  # lane, outcome, bin
    offline = np.asarray(data["offline"])
    ax.imshow(
        offline,
        aspect="auto",
        interpolation="nearest",
        cmap="Greys",
        vmin=0,
        vmax=2.5,
        extent=(edges[0], edges[-1], len(offline) - 0.5, -0.5),
        zorder=0,
    )
    for lane in range(counts.shape[0]):
        total = counts[lane].sum(axis=0)
        scale = 0.85 / max(total.max(), 1)
        bottom = np.zeros(len(edges) - 1)
        for code, outcome in enumerate(data["outcomes"]):
            if outcome not in COLOURS or not counts[lane, code].any():
                continue
            top = bottom + counts[lane, code] * scale
            # one polygon per lane and outcome (a bar per bin would be thousands of patches)
            ax.fill_between(
                edges,
                lane + 0.425 - np.r_[bottom, bottom[-1]],
                lane + 0.425 - np.r_[top, top[-1]],
                step="post",
                color=COLOURS[outcome],
                lw=0,
                zorder=2,
                label=f"exchange {outcome}",
            )
            bottom = top


def _legend(ax, data: dict) -> None:
    """One entry per outcome drawn, and the shading's meaning, above the lanes (never over them)."""
    from matplotlib.patches import Patch

    drawn = {h.get_label() for h in ax.containers + ax.collections}
    handles = [Patch(color=COLOURS[o], label=LABELS[o]) for o in COLOURS if f"exchange {o}" in drawn]
    handles.append(
        Patch(color="0.82", label="offline" if not data["binned"] else "share offline (darker: more)")
    )
    if data["collisions"]:
        marks = [c for c in ax.collections if c.get_label() == "collision"]
        handles += marks
    ax.legend(
        handles=handles,
        loc="lower left",
        bbox_to_anchor=(0, 1.0),
        ncol=4,
        fontsize=7,
        frameon=False,
        borderaxespad=0.2,
    )


def _what(data: dict) -> str:
    """What a lane is, in words (the figure's second title line)."""
    what = {
        "owner": "one lane per owner",
        "channel": "one lane per channel, exchanges counted per time bin",
        "group": "one lane per group of consecutive owners, exchanges counted per time bin",
    }[data["by"]]
    if data["by"] == "owner" and data["binned"]:
        what += " (too many exchanges for bars: counted per time bin)"
    return what


def _sequence_panel(fig, ax, data: dict) -> None:
    """The papers' Figures 4 and 9: the owner served at each update k, as dots, or counted per cell."""
    title = "owner of each update (the papers' Figures 4 and 9)"
    if data["dots"] is not None:
        if data["dots"]:
            k, owner = zip(*data["dots"], strict=True)
            ax.scatter(k, np.asarray(owner) + 1, s=3, color="black", lw=0)
    else:
        cells = np.asarray(data["cells"])
        image = ax.imshow(
            cells,
            aspect="auto",
            origin="lower",
            interpolation="nearest",
            cmap="Greys",
            extent=(1, data["iterations"], 0.5, data["owners"] + 0.5),
            rasterized=True,
        )
        fig.colorbar(image, ax=ax, label="updates per cell")
        title += ": counted per cell"
    ax.set_xlabel("iteration k")
    ax.set_ylabel("owner served (1…N)")
    ax.set_ylim(0.5, data["owners"] + 0.5)
    integer_ticks(ax.yaxis)
    ax.set_title(title, fontsize=9)
