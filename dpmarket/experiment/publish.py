"""An experiment's results, published together: tables, figures and report.html.

The aggregate tables, the figures drawn from them (:mod:`dpmarket.output.figures.sweep`) and the
report page (:mod:`dpmarket.output.report`) are all written into a hidden staging directory inside
the experiment's directory, then moved into place one after the other with Ctrl-C held
(:func:`~dpmarket.experiment.store.held_interrupt`). An interrupt or a failure while they are
being drawn therefore leaves the previous results (or none) and no half-written file; the
finished replications in ``tasks/`` are untouched, so re-running the command redoes only this.

The report leaves out how the experiment was made (executor, workers, scheduler, replications
reused from an earlier run, wall time: all in the JSON file beside it), so that the page, like
the tables and the figures, is byte-identical for a given seed whatever the executor.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pandas as pd

from dpmarket.experiment.store import held_interrupt
from dpmarket.output import report
from dpmarket.output.figures import sweep as sweep_plots
from dpmarket.system import files

STAGING_PREFIX = ".staging."
HOW_MADE = ("executor", "workers", "scheduler", "reused_replications", "wall_seconds")
HOW_MADE_NOTE = ("How this experiment was run (executor, workers, scheduler, replications reused "
                 "from an earlier run, wall time) is in {file} only: this page is the same, byte "
                 "for byte, whatever the executor.")


@contextmanager
def published(directory: Path) -> Iterator[Path]:
    """A staging directory whose files are moved into ``directory`` when the block succeeds."""
    staging = files.staging_dir(directory, STAGING_PREFIX, ".tmp")
    try:
        yield staging
        with held_interrupt():
            for path in sorted(staging.iterdir()):
                files.place(path, directory / path.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def what_was_computed(meta: dict) -> dict:
    """The JSON facts without how they were computed (see :data:`HOW_MADE`)."""
    return {k: v for k, v in meta.items() if k not in HOW_MADE}


def sweep_figures_and_report(staging: Path, meta: dict, plots: bool) -> list[Path]:
    """Draw the sweep's figures (when ``plots``) and its report from the tables in ``staging``."""
    sweep = pd.read_csv(staging / "sweep.csv")
    owners = pd.read_csv(staging / "sweep_owners.csv")
    drawn = sweep_plots.draw_sweep(sweep, owners, meta, staging) if plots else []
    title = f"dpmarket sweep: {meta['scenario']} (seed {meta['seed']})"
    report.sweep_report(staging, title, sweep, owners, what_was_computed(meta), figures=drawn,
                        note=HOW_MADE_NOTE.format(file="sweep.json"))
    return drawn


def band_title(name: str, replications: int, epsilons: list[float]) -> str:
    """The band figure's title: scenario, R and the owners' budget (one ε, or their range)."""
    low, high = min(epsilons), max(epsilons)
    budget = f"ε = {low:g}" if low == high else f"ε = {low:g} … {high:g}"
    return f"{name}: ψ over {replications} replications, {budget}"


def replications_figures_and_report(staging: Path, summary: dict, epsilons: list[float],
                                    plots: bool) -> list[Path]:
    """Draw the ψ band (when ``plots``) and the report of a replicated run in ``staging``."""
    metrics = pd.read_csv(staging / "metrics.csv")
    title = band_title(summary["scenario"], summary["replications"], epsilons)
    drawn = [sweep_plots.draw_band(metrics, staging / "psi_band.png", title)] if plots else []
    report.replications_report(staging, f"dpmarket run: {title}", pd.read_csv(staging / "replications.csv"),
                               drawn, summary=what_was_computed(summary),
                               owners=pd.read_csv(staging / "owners.csv"),
                               note=HOW_MADE_NOTE.format(file="summary.json"))
    return drawn
