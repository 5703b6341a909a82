"""Figures of a run: ψ against k, and the owner of each update against k (papers' Figs 4/9).

The drawing functions take :class:`RunFigures`, plain picklable data, so figures can be drawn
in a helper process that imports matplotlib while the main process is still simulating.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import numpy as np  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from dpmarket.output.figures.axes import ZERO_LABEL, ZERO_STYLE, integer_ticks, label_log, legend_below  # noqa: E402

# No timestamps or versions in the files: the same run gives the same bytes.
_METADATA = {"Software": None}


@dataclass(frozen=True)
class RunFigures:
    """What the run figures show, detached from the run's live objects."""

    title: str
    k: list[int]
    psi: list[float]
    own_psi_median: float
    psi_zero: float  # ψ of the untrained model θ = 0, the yardstick a trained model must beat
    sequence: list[int]  # i_k per update; empty for synchronous learners or beyond sequence.EXACT
    owners: int
    density: dict | None = None  # beyond sequence.EXACT: updates counted per owner row and block of k
    oracle: bool = True  # False (run --no-oracle): no ψ, so no psi.png


MAX_DOTS = 5_000  # beyond this many updates, i_k against k is drawn as a density


def draw_run(data: RunFigures, directory: str | Path) -> None:
    """Write ``psi.png`` into ``directory`` — an oracle measurement, not drawn with ``--no-oracle``
    (``timeline.png``, drawn from the run's spans, is
    :func:`dpmarket.output.figures.timeline.draw_lanes`'s)."""
    if data.oracle:
        psi_against_k(data, Path(directory) / "psi.png")


def _save(fig: Figure, path: Path) -> None:
    fig.savefig(path, dpi=100, metadata=_METADATA)


def psi_against_k(data: RunFigures, path: Path) -> None:
    """ψ of the learner's published model on a log axis against the iteration k, with the median
    own-data ψ for scale and ψ of the untrained model θ = 0, below which training has to go to be
    worth anything. Legends in words: a reader need not know the papers' θ_L,k."""
    fig = Figure(figsize=(6.4, 4.0))
    fig.subplots_adjust(left=0.14, right=0.97, bottom=0.12, top=0.9)
    ax = fig.subplots()
    points = [(k, p) for k, p in zip(data.k, data.psi, strict=True) if p > 0]
    if points:
        ax.semilogy(*zip(*points, strict=True), color="black", lw=1.4, label="the learner's model")
    ax.axhline(data.own_psi_median, color="tab:blue", ls="--", lw=1,
               label="an owner's model on its own data (median)")
    if data.psi_zero > 0:  # ψ(0) = 0 only when θ* = 0: nothing to draw on a log axis
        ax.axhline(data.psi_zero, **ZERO_STYLE, label=ZERO_LABEL)
    ax.set_yscale("log")
    label_log(ax, "y")
    ax.set_xlabel("iteration k")
    ax.set_ylabel("relative fitness ψ")
    ax.set_title(data.title, fontsize=10)
    legend_below(fig, ax, fontsize=8, ncol=2)
    _save(fig, path)


def owner_sequence(data: RunFigures, path: Path) -> None:
    """Which owner i_k was served at each update k (one dot per update, or a density)."""
    fig = Figure(figsize=(6.4, 3.6))
    fig.subplots_adjust(left=0.12, right=0.97, bottom=0.14, top=0.9)
    ax = fig.subplots()
    if data.density is None and len(data.sequence) <= MAX_DOTS:
        ax.scatter(range(1, len(data.sequence) + 1), [i + 1 for i in data.sequence], s=4,
                   color="black", lw=0)
    else:  # that many dots merge into a black rectangle: count them per cell instead
        counts, last = _cell_counts(data)
        image = ax.imshow(counts, aspect="auto", origin="lower", interpolation="nearest",
                          cmap="Greys", extent=(1, last, 0.5, data.owners + 0.5), rasterized=True)
        fig.colorbar(image, ax=ax, label="updates per cell", pad=0.01)
    ax.set_xlabel("iteration k")
    ax.set_ylabel("owner served (1…N)")
    ax.set_ylim(0.5, data.owners + 0.5)
    integer_ticks(ax.yaxis)
    ax.set_title(f"{data.title}: owner of each update", fontsize=10)
    _save(fig, path)


def _cell_counts(data: RunFigures) -> tuple[np.ndarray, int]:
    """Updates per (owner row, one of at most 200 bins of k), and the k the last bin ends at.

    From the exact sequence, a 2-D histogram; from counted blocks of k (runs beyond
    ``sequence.EXACT`` updates), cells of whole blocks, as many blocks each (so that cells have
    equal widths and no cell gets a block more than its neighbour), at most 200 of them."""
    bins = 200
    if data.density is None:
        owners, k = np.asarray(data.sequence) + 1, np.arange(1, len(data.sequence) + 1)
        rows = min(data.owners, 100)
        counts, _, _ = np.histogram2d(owners, k, bins=[np.linspace(0.5, data.owners + 0.5, rows + 1),
                                                       np.linspace(1, len(k), bins + 1)])
        return counts, len(k)
    blocks = np.asarray(data.density["counts"])
    per_cell = -(-blocks.shape[1] // bins)
    cells = -(-blocks.shape[1] // per_cell)
    padded = np.zeros((blocks.shape[0], cells * per_cell))
    padded[:, :blocks.shape[1]] = blocks
    counts = padded.reshape(blocks.shape[0], cells, per_cell).sum(axis=2)
    return counts, cells * per_cell * data.density["block"]
