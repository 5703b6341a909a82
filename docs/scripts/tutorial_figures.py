"""Draws the tutorial's figures by replaying the tutorial itself.

Runs every block of ``docs/tutorial.md`` in a temporary directory with the test suite's harness
(``tests/docs/harness.py``: the same commands, their printed lines checked), then copies the figures
those commands drew into ``docs/tutorial/``. Run from the repository root::

    .venv/bin/python docs/scripts/tutorial_figures.py
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "docs"))

from harness import run_page  # noqa: E402

FIGURES = {
    "outputs/first-seed1-2/psi.png": "psi.png",
    "outputs/first-seed1-replications/psi_band.png": "psi_band.png",
    "outputs/first-sweep-privacy.epsilon-seed1/psi_epsilon.png": "psi_epsilon.png",
    "outputs/first-sweep-privacy.epsilon-seed1/owner_benefit.png": "owner_benefit.png",
    "outputs/first-market-market/psi_payment.png": "psi_payment.png",
}


def main() -> None:
    os.environ.pop("DPMARKET_FORECAST_CACHE", None)  # the page's forecast cache: outputs/forecasts/
    target = ROOT / "docs" / "tutorial"
    target.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        blocks = run_page(ROOT / "docs" / "tutorial.md", Path(work))
        for source, name in FIGURES.items():
            shutil.copyfile(Path(work) / source, target / name)
            print(f"docs/tutorial/{name}  (from {source})")
    print(f"{blocks} blocks of docs/tutorial.md ran and printed what the page shows")


if __name__ == "__main__":
    main()
