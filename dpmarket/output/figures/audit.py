"""An audit's ROC curves against the region its claimed (ε, δ) allows (``audit_roc.png``).

Each adversary's curve is drawn from the runs its error rates were counted on (true-positive rate
against false-positive rate, log-log as privacy audits draw them, so that the low false-positive
rates where ε shows are visible); the claimed guarantee's frontier min(e^ε α + δ, 1 − e^−ε(1 − δ − α))
is the largest true-positive rate any test may reach, and the point each bound was proved at is
marked with its confidence box (the rates' exact upper bounds). A curve above the frontier by more
than the sampling error is a violation. Only plain lists arrive here (from
:mod:`dpmarket.output.audit`).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import numpy as np  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from dpmarket.privacy.auditing import claimed_frontier  # noqa: E402

NAME = "audit_roc.png"
COLOURS = {"answers": "tab:blue", "model": "tab:orange"}


def draw(data: dict, path: str | Path) -> None:
    """``data``: title, epsilon, delta, and per adversary (``curves``) its view, fpr, tpr, the proved
    point (fpr, tpr) and the rates' upper bounds, and ε lower."""
    fig = Figure(figsize=(6.0, 5.2))
    fig.subplots_adjust(left=0.13, right=0.97, bottom=0.11, top=0.9)
    ax = fig.subplots()
    floor = min([1e-4] + [1.0 / max(2, c["runs"]) for c in data["curves"]])
    grid = np.geomspace(floor / 2, 1.0, 400)
    bound = claimed_frontier(grid, data["epsilon"], data["delta"])
    ax.loglog(grid, bound, color="black", lw=1.4,
              label=f"claimed (ε = {data['epsilon']:g}, δ = {data['delta']:g}): the most any test may reach")
    ax.fill_between(grid, bound, 1.0, color="0.9", lw=0)
    ax.loglog(grid, grid, color="0.6", lw=0.8, ls=":", label="guessing")
    for c in data["curves"]:
        colour = COLOURS.get(c["view"], "tab:green")
        fpr, tpr = np.maximum(c["fpr"], floor / 2), np.maximum(c["tpr"], floor / 2)
        ax.step(fpr, tpr, where="post", color=colour, lw=1.2,
                label=f"adversary sees {c['view']}: ε ≥ {c['epsilon_lower']:.3g}")
        x, y = max(c["point"][0], floor / 2), max(c["point"][1], floor / 2)
        ax.plot([x], [y], "o", color=colour, ms=5)
        ax.plot([x, max(c["fpr_upper"], floor / 2)], [y, y], color=colour, lw=0.8)  # α up to ᾱ
        low = max(1.0 - c["fnr_upper"], floor / 2)
        ax.plot([x, x], [y, low], color=colour, lw=0.8)  # 1 − β down to 1 − β̄
    ax.set_xlim(floor / 2, 1.0)
    ax.set_ylim(floor / 2, 1.05)
    ax.set_xlabel("false-positive rate (world 0 said world 1)")
    ax.set_ylabel("true-positive rate")
    ax.legend(fontsize=7, loc="lower right")
    ax.set_title(data["title"], fontsize=9)
    fig.savefig(path, format="png", dpi=100, metadata={"Software": None})
