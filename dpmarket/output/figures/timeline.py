"""The timeline picture: owners' lanes (or heat maps for many owners) over i_k against k."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import numpy as np  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from dpmarket.output.figures.axes import integer_ticks  # noqa: E402
from dpmarket.output.timeline import (  # noqa: E402
    MAX_LANES,
    Run,
    TimelineError,
    channel_table,
    format_tables,
    load_run,
    offline_intervals,
    output_name,
    owner_table,
    select_owners,
)
from dpmarket.system import files

MAX_GROUPS = 100  # heat-map rows: more owners are grouped, so that every owner counts
MAX_DOTS = 5_000  # beyond this many updates the i_k-against-k picture becomes a density


def draw(run: Run, selected: np.ndarray, t0: float, t1: float, path: str) -> None:
    """What each selected owner did in [t0, t1], and the owner of each update k.

    Up to MAX_LANES owners: one lane each over the i_k scatter. Beyond that, a 2 x 2 grid of
    heat maps over groups of consecutive owners (exchanges, collisions, share offline, and
    the owner of each update), binned rather than subsampled, so 10,000 owners stay legible.
    """
    window = run.events[(run.events["time"] >= t0) & (run.events["time"] <= t1)]
    if len(selected) <= MAX_LANES:
        fig = Figure(figsize=(8.0, 7.0))
        fig.subplots_adjust(left=0.17, right=0.97, bottom=0.08, top=0.93, hspace=0.35)
        top, bottom = fig.subplots(2, 1, gridspec_kw={"height_ratios": [2, 1]})
        _lanes(top, run, window, selected, t0, t1)
        _sequence(fig, bottom, window, selected)
    else:
        fig = Figure(figsize=(12.0, 8.0))
        fig.subplots_adjust(left=0.07, right=0.97, bottom=0.07, top=0.91, hspace=0.35, wspace=0.25)
        axes = fig.subplots(2, 2)
        _heat_maps(fig, axes, run, window, selected, t0, t1)
        _sequence(fig, axes[1, 1], window, selected)
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
    size = 9 if len(selected) <= 10 else 7 if len(selected) <= 25 else 5  # as large as the lanes allow
    ax.set_yticks(range(len(selected)), [str(n) for n in run.owners["name"].iloc[selected]], fontsize=size)
    ax.set_xlim(t0, t1)
    ax.set_xlabel("simulated time")
    ax.set_title("exchanges (dots), collisions (x), offline (grey), one lane per owner", fontsize=9)


def _groups(selected: np.ndarray, owners: int) -> tuple[np.ndarray, int, str]:
    """Each owner's heat-map row (-1 if unselected), the number of rows, and the axis label."""
    rows = min(len(selected), MAX_GROUPS)
    row_of = np.full(owners, -1)
    row_of[selected] = np.arange(len(selected)) * rows // len(selected)
    size = len(selected) / rows
    label = "owner (position in selection)" if rows == len(selected) else \
        f"owner group (~{size:.0f} consecutive owners each)"
    return row_of, rows, label


def _image(fig, ax, values: np.ndarray, t0: float, t1: float, cmap: str, title: str, label: str,
           ylabel: str) -> None:
    image = ax.imshow(values, aspect="auto", origin="lower", interpolation="nearest", cmap=cmap,
                      extent=(t0, t1, -0.5, len(values) - 0.5), rasterized=True)
    fig.colorbar(image, ax=ax, label=label, pad=0.01)
    ax.set(xlabel="simulated time", ylabel=ylabel)
    ax.set_title(title, fontsize=9)


def _heat_maps(fig, axes, run: Run, window, selected: np.ndarray, t0: float, t1: float) -> None:
    """Exchanges, collisions and share of time offline per owner group and time bin."""
    bins = np.linspace(t0, t1, 101)
    row_of, rows, ylabel = _groups(selected, len(run.owners))
    edges = [np.arange(rows + 1) - 0.5, bins]
    for ax, kind, cmap in ((axes[0, 0], "update", "Greys"), (axes[0, 1], "collision", "Reds")):
        mine = window[window["kind"] == kind]
        mine = mine[row_of[mine["owner"].clip(lower=0)] >= 0] if len(mine) else mine
        counts, _, _ = np.histogram2d(row_of[mine["owner"]], mine["time"], bins=edges)
        name = "exchanges" if kind == "update" else "collisions"
        _image(fig, ax, counts, t0, t1, cmap, f"{name} per owner group and time bin", f"{name} per bin",
               ylabel)
    offline = _offline_at_centres(run, row_of, rows, bins)
    _image(fig, axes[1, 0], offline, t0, t1, "Blues", "share of the group offline (at bin centres)",
           "share offline", ylabel)
    axes[1, 0].images[0].set_clim(0, 1)


def _offline_at_centres(run: Run, row_of: np.ndarray, rows: int, bins: np.ndarray) -> np.ndarray:
    """Share of each row's owners offline at each bin's centre: a difference array, O(spans)."""
    centres = 0.5 * (bins[:-1] + bins[1:])
    spans = offline_intervals(run.events, run.end)
    spans = spans[row_of[spans["owner"]] >= 0]
    diff = np.zeros((rows, len(centres) + 1))
    row = row_of[spans["owner"]]
    np.add.at(diff, (row, np.searchsorted(centres, spans["start"])), 1)
    np.add.at(diff, (row, np.searchsorted(centres, spans["stop"])), -1)
    members = np.bincount(row_of[row_of >= 0], minlength=rows)
    return np.cumsum(diff, axis=1)[:, :-1] / members[:, None]


def _sequence(fig, ax, window, selected: np.ndarray) -> None:
    """The papers' Figures 4 and 9: i_k against k, as dots or, for many updates, a density."""
    updates = window[window["kind"] == "update"]
    title = "owner of each update (the papers' Figures 4 and 9)"
    if len(updates) <= MAX_DOTS:
        ax.scatter(updates["k"], updates["owner"] + 1, s=3, color="black", lw=0)
    else:
        k0, k1 = float(updates["k"].min()), float(updates["k"].max())
        top = int(updates["owner"].max()) + 1
        counts, _, _ = np.histogram2d(updates["owner"] + 1, updates["k"],
                                      bins=[np.linspace(0.5, top + 0.5, min(top, MAX_GROUPS) + 1),
                                            np.linspace(k0, k1, 201)])
        image = ax.imshow(counts, aspect="auto", origin="lower", interpolation="nearest",
                          cmap="Greys", extent=(k0, k1, 0.5, top + 0.5), rasterized=True)
        fig.colorbar(image, ax=ax, label="updates per cell", pad=0.01)
        title += f": {len(updates):,} updates, counted per cell"
    ax.set_xlabel("iteration k")
    ax.set_ylabel("owner served (1…N)")
    integer_ticks(ax.yaxis)
    ax.set_title(title, fontsize=9)


def _atomic(path: Path, write) -> None:
    """Write ``path`` through a temporary sibling, so it is never seen half-written."""
    files.write_atomic(path, lambda temp: write(str(temp)))


def write(run_dir: str | Path, owners: str | None = None, t0: float | None = None,
           t1: float | None = None) -> str:
    """The timeline command: summarise and draw a run's timeline; writes ``timeline-TAG.csv`` (the
    per-owner table) and ``timeline-TAG.png`` into the run directory (:func:`output_name`)."""
    run = load_run(run_dir)
    start, stop = (0.0 if t0 is None else t0), (run.end if t1 is None else t1)
    if stop <= start:
        raise TimelineError(f"--from {start:g} --to {stop:g}: the window is empty")
    selected = select_owners(owners, list(run.owners["name"]))
    table = owner_table(run, selected, start, stop)
    name = output_name(owners, t0, t1)
    csv_path, png_path = run.path / f"{name}.csv", run.path / f"{name}.png"
    with files.writing(png_path):
        _atomic(csv_path, lambda p: table.to_csv(p, index=False))
        _atomic(png_path, lambda p: draw(run, selected, start, stop, p))
    text = format_tables(table, channel_table(run, start, stop), start, stop, csv_path.name)
    text = f"{text}\nwritten to {png_path} and {csv_path.name}"
    if run.scenario.get("market", {}).get("mode") == "dynamic":  # a market in time
        text += "\n" + _market(run, name, start, stop)
    return text


def _market(run: Run, name: str, start: float, stop: float) -> str:
    """Draw ``market_TAG.png`` (the run's market_timeline.png over the window) and say what it shows."""
    from dpmarket.output.figures import market_timeline
    from dpmarket.output.results import market_timeline_data

    data = market_timeline_data(run.path, run.path.name)
    path = run.path / f"market_{name}.png"
    with files.writing(path):
        _atomic(path, lambda p: market_timeline.draw(data, p, (start, stop)))
    inside = [i for i, t in enumerate(data["time"]) if t <= stop]
    last = inside[-1] if inside else 0
    return (f"market in time (to t = {stop:.4g}): price {data['price'][0]:.4g} -> {data['price'][last]:.4g}, "
            f"{data['participants'][last]} owners taking part, paid {data['spend'][last]:.4g}; "
            f"price, participants, spend and ψ against time drawn in {path.name}")
