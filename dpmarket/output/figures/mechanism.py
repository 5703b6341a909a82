"""Figures of the mechanism lab (``market --properties``): welfare against payment, payments against
Shapley values, and each owner's gain from misreporting its cost."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
from matplotlib.figure import Figure  # noqa: E402

from dpmarket.output.figures.market import _METADATA, MARKERS, dodge  # noqa: E402


def welfare_against_payment(rows: list[dict], best: float, first_best: float | None, title: str,
                            path: Path) -> None:
    """Each policy's welfare (simulated: filled, ± one standard error; forecast: hollow) against its
    total payment, with the best welfare any coalition and budgets reach under the forecast (dashed;
    dotted: the first best, when a budget makes them differ)."""
    fig = Figure(figsize=(6.4, 4.4))
    fig.subplots_adjust(left=0.14, right=0.97, bottom=0.12, top=0.9)
    ax = fig.subplots()
    colors = matplotlib.colormaps["tab10"]
    offsets = dodge([r["payment"] for r in rows], 0.025)
    for j, r in enumerate(rows):
        x, color, marker = r["payment"] + offsets[j], colors(j % 10), MARKERS[j % len(MARKERS)]
        label = f"{r['policy']} (efficiency {r['efficiency']:.2f})"
        if r["replications"]:
            ax.errorbar([x], [r["welfare_simulated"]], yerr=[[r["welfare_simulated_se"]]] * 2, fmt=marker,
                        color=color, capsize=3, label=label)
        ax.plot([x], [r["welfare_forecast"]], marker=marker, ms=9, ls="none", mfc="none", mec=color, mew=1.4,
                label=None if r["replications"] else label)
    ax.axhline(best, color="0.3", ls="--", lw=1, label=f"best under the forecast ({best:.4g})")
    if first_best is not None:
        ax.axhline(first_best, color="0.5", ls=":", lw=1, label=f"first best, no budget ({first_best:.4g})")
    ax.set_xlabel("total payment")
    ax.set_ylabel("welfare: value − costs (filled: simulated; hollow: forecast)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7)
    fig.savefig(path, dpi=100, metadata=_METADATA)


def _panels(count: int) -> tuple[int, int]:
    """(rows, columns) of a grid of ``count`` small panels."""
    cols = min(count, 4)
    return math.ceil(count / cols), cols


def _policies(owners: list[dict]) -> list[str]:
    """The policies of owner rows, in their order."""
    return list(dict.fromkeys(r["policy"] for r in owners))


def payments_against_shapley(owners: list[dict], title: str, path: Path) -> None:
    """One panel per policy: each participant's payment against its Shapley value in the game of the
    policy's participants at the ε they sold (bars: ± one standard error where sampled); the line
    is payment = Shapley value."""
    policies = _policies(owners)
    rows, cols = _panels(len(policies))
    fig = Figure(figsize=(2.6 * cols + 0.6, 2.4 * rows + 0.8))
    fig.subplots_adjust(left=0.09, right=0.98, bottom=0.1, top=0.86, hspace=0.55, wspace=0.35)
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax, policy in zip(axes, policies, strict=False):
        mine = [r for r in owners if r["policy"] == policy and r["participates"]]
        phi, pay = [r["shapley"] for r in mine], [r["payment"] for r in mine]
        ax.errorbar(phi, pay, xerr=[r["shapley_se"] for r in mine], fmt="o", ms=3, color="tab:blue",
                    elinewidth=0.6)
        top = max([*phi, *pay, 0.0]) or 1.0
        ax.plot([0, top], [0, top], color="0.5", lw=0.8, ls="--")
        ax.set_title(f"{policy} ({len(mine)})", fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in axes[len(policies):]:
        ax.set_visible(False)
    fig.supxlabel("Shapley value of the learner's value (forecast)", fontsize=8)
    fig.supylabel("payment", fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.savefig(path, dpi=100, metadata=_METADATA)


def misreport_gains(owners: list[dict], title: str, path: Path) -> None:
    """Each owner's best gain from misreporting its cost coefficient (grid ¼ … 4), per policy: a
    heat map, policies down, owners across (white: no gain)."""
    policies = _policies(owners)
    count = max(r["owner"] for r in owners) + 1
    gains = [[0.0] * count for _ in policies]
    for r in owners:
        gains[policies.index(r["policy"])][r["owner"]] = r["misreport_gain"]
    fig = Figure(figsize=(min(12.0, 3.0 + 0.25 * count), 0.45 * len(policies) + 1.6))
    fig.subplots_adjust(left=0.22, right=0.9, bottom=0.2, top=0.85)
    ax = fig.subplots()
    top = max(max(row) for row in gains) or 1.0
    image = ax.imshow(gains, aspect="auto", cmap="Reds", vmin=0.0, vmax=top, interpolation="nearest")
    ax.set_yticks(range(len(policies)), policies, fontsize=8)
    step = max(1, count // 20)
    ax.set_xticks(range(0, count, step), [str(i) for i in range(0, count, step)], fontsize=7)
    ax.set_xlabel("owner")
    colorbar = fig.colorbar(image, ax=ax, fraction=0.04, pad=0.02)
    colorbar.ax.tick_params(labelsize=7)
    colorbar.set_label("best gain from a misreport", fontsize=8)
    ax.set_title(title, fontsize=10)
    fig.savefig(path, dpi=100, metadata=_METADATA)
