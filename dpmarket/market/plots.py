"""Figures of a policy comparison: ψ against total payment, and the chosen ε per policy."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
from matplotlib import ticker  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

_METADATA = {"Software": None}  # no versions in the files: same comparison, same bytes


def psi_against_payment(rows: list[dict], title: str, path: Path) -> None:
    """Simulated ψ (mean, min–max bar over replications) and forecast ψ̂ against total payment."""
    fig = Figure(figsize=(6.4, 4.4))
    fig.subplots_adjust(left=0.13, right=0.97, bottom=0.12, top=0.9)
    ax = fig.subplots()
    colors = matplotlib.colormaps["tab10"]
    for j, r in enumerate(rows):
        if r["replications"] == 0:
            continue
        x, color = r["total_payment"], colors(j % 10)
        spread = [[r["psi_mean"] - r["psi_min"]], [r["psi_max"] - r["psi_mean"]]]
        label = f"{r['policy']} ({r['participants']} owners)"
        ax.errorbar([x], [r["psi_mean"]], yerr=spread, fmt="o", color=color, capsize=3, label=label)
        if 0 < r["psi_forecast"] < float("inf"):
            ax.plot([x], [r["psi_forecast"]], marker="x", color=color, ms=8, ls="none")
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(ticker.LogFormatter())
    ax.yaxis.set_minor_formatter(ticker.NullFormatter())
    ax.set_xlabel("total payment")
    ax.set_ylabel("ψ  (o simulated, mean and range; x forecast)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7)
    fig.savefig(path, dpi=100, metadata=_METADATA)


def epsilon_distribution(outcomes: list[tuple[str, list[float]]], title: str, path: Path) -> None:
    """The chosen ε of the participants under each policy (box plot with every owner as a dot)."""
    fig = Figure(figsize=(6.4, 4.0))
    fig.subplots_adjust(left=0.1, right=0.97, bottom=0.26, top=0.9)
    ax = fig.subplots()
    for j, (_, eps) in enumerate(outcomes):
        if eps:
            ax.boxplot([eps], positions=[j], widths=0.5, showfliers=False)
            offsets = [(k / max(len(eps) - 1, 1) - 0.5) * 0.3 for k in range(len(eps))]
            ax.scatter([j + d for d in offsets], eps, s=8, color="tab:blue", alpha=0.7, lw=0)
    ax.set_xticks(range(len(outcomes)), [name for name, _ in outcomes], rotation=30, ha="right",
                  fontsize=8)
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(ticker.LogFormatter())
    ax.yaxis.set_minor_formatter(ticker.NullFormatter())
    ax.set_ylabel("chosen ε (participants)")
    ax.set_title(title, fontsize=10)
    fig.savefig(path, dpi=100, metadata=_METADATA)
