"""The timeline picture: owners' lanes (or heat maps for many owners) over i_k against k."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import numpy as np  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from dpmarket.timeline import MAX_LANES, Run, offline_intervals  # noqa: E402


def draw(run: Run, selected: np.ndarray, t0: float, t1: float, path: str) -> None:
    """Top: what each selected owner did in [t0, t1]; bottom: the owner of each update k."""
    fig = Figure(figsize=(8.0, 7.0))
    fig.subplots_adjust(left=0.17, right=0.97, bottom=0.08, top=0.93, hspace=0.35)
    top, bottom = fig.subplots(2, 1, gridspec_kw={"height_ratios": [2, 1]})
    window = run.events[(run.events["time"] >= t0) & (run.events["time"] <= t1)]
    if len(selected) <= MAX_LANES:
        _lanes(top, run, window, selected, t0, t1)
    else:
        _heat_maps(fig, top, run, window, selected, t0, t1)
    _sequence(bottom, window)
    fig.suptitle(f"{run.path.name}: {len(selected)} owners, t in [{t0:.4g}, {t1:.4g}]", fontsize=10)
    fig.savefig(path, format="png", dpi=100, metadata={"Software": None})


def _lanes(ax, run: Run, window, selected: np.ndarray, t0: float, t1: float) -> None:
    lane = {int(i): row for row, i in enumerate(selected)}
    spans = offline_intervals(run.events, run.end)
    for i, group in spans[spans["owner"].isin(selected)].groupby("owner"):
        bars = [(max(a, t0), min(b, t1) - max(a, t0)) for a, b in zip(group["start"], group["stop"],
                                                                        strict=True) if b > t0 and a < t1]
        ax.broken_barh(bars, (lane[int(i)] - 0.35, 0.7), color="0.85", lw=0)
    for kind, style in (("update", dict(marker="o", s=8, color="black")),
                        ("collision", dict(marker="x", s=14, color="tab:red"))):
        rows = window[(window["kind"] == kind) & window["owner"].isin(selected)]
        ax.scatter(rows["time"], rows["owner"].map(lane), label=kind, lw=1, **style)
    ax.set_yticks(range(len(selected)), [str(n) for n in run.owners["name"].iloc[selected]], fontsize=6)
    ax.set_xlim(t0, t1)
    ax.set_xlabel("simulated time")
    ax.set_title("exchanges (dots), collisions (x), offline (grey), one lane per owner", fontsize=9)


def _heat_maps(fig, ax, run: Run, window, selected: np.ndarray, t0: float, t1: float) -> None:
    bins = np.linspace(t0, t1, 101)
    rows = window[(window["kind"] == "update") & window["owner"].isin(selected)]
    position = np.full(len(run.owners), -1)
    position[selected] = np.arange(len(selected))
    counts, _, _ = np.histogram2d(position[rows["owner"]], rows["time"],
                                  bins=[np.arange(len(selected) + 1) - 0.5, bins])
    image = ax.imshow(counts, aspect="auto", origin="lower", interpolation="nearest", cmap="Greys",
                      extent=(t0, t1, -0.5, len(selected) - 0.5), rasterized=True)
    fig.colorbar(image, ax=ax, label="exchanges per bin", pad=0.01)
    offline = _offline_at_centres(run, position, len(selected), bins)
    ax.imshow(np.ma.masked_equal(offline, 0), aspect="auto", origin="lower", interpolation="nearest",
              cmap="Reds", vmin=0, vmax=2, alpha=0.6, extent=(t0, t1, -0.5, len(selected) - 0.5),
              rasterized=True)
    ax.set_ylabel("owner (position in selection)")
    ax.set_xlabel("simulated time")
    ax.set_title(f"exchanges per owner and time bin (grey), offline (red); {len(selected)} owners "
                 "are too many for lanes", fontsize=9)


def _offline_at_centres(run: Run, position: np.ndarray, rows: int, bins: np.ndarray) -> np.ndarray:
    """1 where an owner is offline at a bin's centre: a difference array over the spans, O(spans)."""
    centres = 0.5 * (bins[:-1] + bins[1:])
    spans = offline_intervals(run.events, run.end)
    spans = spans[position[spans["owner"]] >= 0]
    diff = np.zeros((rows, len(centres) + 1))
    row = position[spans["owner"]]
    np.add.at(diff, (row, np.searchsorted(centres, spans["start"])), 1)
    np.add.at(diff, (row, np.searchsorted(centres, spans["stop"])), -1)
    return (np.cumsum(diff, axis=1)[:, :-1] > 0).astype(float)


def _sequence(ax, window) -> None:
    updates = window[window["kind"] == "update"]
    ax.scatter(updates["k"], updates["owner"] + 1, s=3, color="black", lw=0)
    ax.set_xlabel("iteration k")
    ax.set_ylabel("owner i_k")
    ax.set_title("owner of each update (the papers' Figures 4 and 9)", fontsize=9)
