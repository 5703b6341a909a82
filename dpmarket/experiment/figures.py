"""The hook from experiments to the figures of the report stream (``dpmarket/sweep_plots.py``).

The figures (ψ against ε and n, the value-of-collaboration map, per-owner benefit, the ψ-against-k
band) belong to another module built in parallel with this one. Until that module is part of
the package these hooks draw nothing and say so: they return None, and the command prints that
only the CSV and JSON files were written. When it is there, they call it on the files just
written, with the signatures agreed for issue 5:
``draw_sweep(sweep, owners, meta, directory) -> list[Path]`` and
``draw_band(metrics, path, title) -> Path``.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
from pathlib import Path

PLOTS_MODULE = "dpmarket.sweep_plots"


def available() -> bool:
    """Whether the figures module is installed alongside this package."""
    return importlib.util.find_spec(PLOTS_MODULE) is not None


def draw_sweep_figures(directory: Path) -> list[Path] | None:
    """Figures of a finished sweep in ``directory``; None when the figures module is absent."""
    if not available():
        return None
    import pandas as pd

    plots = importlib.import_module(PLOTS_MODULE)
    meta = json.loads((directory / "sweep.json").read_text(encoding="utf-8"))
    return plots.draw_sweep(pd.read_csv(directory / "sweep.csv"),
                            pd.read_csv(directory / "sweep_owners.csv"), meta, directory)


def draw_band_figure(directory: Path, title: str) -> list[Path] | None:
    """The ψ-against-k band of a replicated run in ``directory``; None when the module is absent."""
    if not available():
        return None
    import pandas as pd

    plots = importlib.import_module(PLOTS_MODULE)
    return [plots.draw_band(pd.read_csv(directory / "metrics.csv"), directory / "psi_band.png", title)]
