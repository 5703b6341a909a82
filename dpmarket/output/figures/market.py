"""Figures of a policy comparison: ψ against total payment, and the chosen ε per policy."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
from matplotlib.figure import Figure  # noqa: E402

from dpmarket.output.figures.axes import ZERO_LABEL, ZERO_STYLE, label_log, legend_below  # noqa: E402

_METADATA = {"Software": None}  # no versions in the files: same comparison, same bytes


MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "h")  # one shape per policy, with its colour
DODGE = 0.025  # share of the payment axis between policies that paid the same


def psi_against_payment(rows: list[dict], title: str, path: Path, psi_zero: float = float("nan")) -> None:
    """Simulated ψ (mean, min–max bar over replications; filled) and forecast ψ̂ (hollow) against
    total payment, with ψ of the untrained model θ = 0 (dotted). Each policy has its own colour and
    marker shape, and policies that paid the same are set side by side (the payment axis is
    labelled in exact amounts all the same); the legend sits under the axes."""
    fig = Figure(figsize=(6.4, 4.4))
    fig.subplots_adjust(left=0.14, right=0.97, bottom=0.12, top=0.9)
    ax = fig.subplots()
    colors = matplotlib.colormaps["tab10"]
    offsets = dodge([r["total_payment"] for r in rows], DODGE)
    for j, r in enumerate(rows):
        if r["replications"] == 0:
            continue
        x, color, marker = r["total_payment"] + offsets[j], colors(j % 10), MARKERS[j % len(MARKERS)]
        spread = [[r["psi_mean"] - r["psi_min"]], [r["psi_max"] - r["psi_mean"]]]
        label = f"{r['policy']} ({r['participants']} owners)"
        ax.errorbar([x], [r["psi_mean"]], yerr=spread, fmt=marker, color=color, capsize=3, label=label)
        if 0 < r["psi_forecast"] < float("inf"):
            ax.plot([x], [r["psi_forecast"]], marker=marker, ms=9, ls="none", mfc="none", mec=color, mew=1.4)
    if psi_zero > 0:
        ax.axhline(psi_zero, **ZERO_STYLE, label=ZERO_LABEL)
    ax.set_yscale("log")
    label_log(ax, "y")
    ax.set_xlabel("total payment")
    ax.set_ylabel("ψ (filled: simulated; hollow: forecast)")
    ax.set_title(title, fontsize=10)
    legend_below(fig, ax, fontsize=7, ncol=2)
    fig.savefig(path, dpi=100, metadata=_METADATA)


def dodge(values: list[float], share: float) -> list[float]:
    """Horizontal offsets that set (nearly) equal values side by side: values closer than ``share``
    of their range (of the largest value when all are equal) form a group, whose members are spread
    that far apart around the group's mean, in the order given."""
    span = (max(values) - min(values)) or max(abs(v) for v in values) or 1.0
    order = sorted(range(len(values)), key=lambda j: (values[j], j))
    groups: list[list[int]] = []
    for j in order:
        if groups and values[j] - values[groups[-1][-1]] < share * span:
            groups[-1].append(j)
        else:
            groups.append([j])
    offsets = [0.0] * len(values)
    for members in groups:
        centre = sum(values[j] for j in members) / len(members)
        for rank, j in enumerate(sorted(members)):
            offsets[j] = centre + (rank - (len(members) - 1) / 2) * share * span - values[j]
    return offsets


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
    label_log(ax, "y")
    ax.set_ylabel("chosen ε (participants)")
    ax.set_title(title, fontsize=10)
    fig.savefig(path, dpi=100, metadata=_METADATA)
