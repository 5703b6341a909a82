"""Run directories (docs/reference/outputs.md): written whole or not at all, with the resolved scenario.

Files are written into a hidden sibling directory which is renamed into place only when the
run succeeded, so a failed or interrupted run never leaves a half-written directory behind
(:mod:`dpmarket.output.directories`). A run directory of the same resolved scenario is replaced (the
same bytes); any other non-empty directory is refused rather than silently overwritten.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from dpmarket.output.directories import Identity, default_directory, run_directory
from dpmarket.output.figures.painter import Painter
from dpmarket.output.summary import budgets, network_load, owner_rows, summary
from dpmarket.runs.run import RunResult, is_async
from dpmarket.system import files
from dpmarket.system.progress import Progress
from dpmarket.system.progress import of as progress_of


def run_identity(scenario) -> Identity:
    """What a run directory of ``scenario`` holds: its resolved scenario."""
    return Identity("run", scenario.to_toml())


def default_run_dir(scenario) -> Path:
    """``outputs/NAME-seedSEED``, or ``-2``, ``-3``…: the first holding this very run, or free."""
    return default_directory(Path("outputs") / f"{scenario.name}-seed{scenario.seed}", run_identity(scenario))


def write_run(result: RunResult, directory: Path, plots: bool = True,
              painter: Painter | None = None, topology: bool = True) -> None:
    """Write every table, the summary and the figures of ``result`` into ``directory``.

    Figures go to ``painter`` (a helper process) when given, else are drawn here;
    ``topology=False`` when the caller already wrote ``topology.graphml`` (its picture, which
    shows the run's load, is drawn here).
    """
    painter = painter or Painter(enabled=False)
    (directory / "scenario.toml").write_text(result.scenario.to_toml(), encoding="utf-8")
    write_metrics(result, directory / "metrics.csv")
    write_owners(result, directory / "owners.csv")
    (directory / "summary.json").write_text(files.dumps(summary(result), indent=2) + "\n",
                                            encoding="utf-8")
    if result.network is not None:
        write_channels(result, directory / "channels.csv")
        if topology or plots:  # the picture waits for the run: it shows the channels' load
            write_topology(result.scenario, result.consortium, directory, painter, budgets(result),
                           graphml=topology, draw=plots, load=network_load(result))
    if plots:
        data = figure_data(result)
        painter.paint("run", data, str(directory))
        if result.market is not None and result.market.dynamic is not None:
            painter.paint("market_timeline", market_timeline_data(directory, data["title"]), str(directory))
    painter.wait()
    from dpmarket.output.report import run_report  # deferred: only runs that are written need it

    run_report(result, directory, plots)


def market_timeline_data(run_dir: Path, title: str) -> dict:
    """The plain series ``market_timeline.png`` draws (:mod:`dpmarket.output.figures.market_timeline`), read
    back from the run directory's events.csv (complete once the run has returned) and metrics.csv,
    so the picture shows exactly what the files say."""
    from dpmarket.output.timeseries import market_series  # deferred: only a market in time needs it

    s = market_series(run_dir)
    return {"title": title, "time": s.time.tolist(), "price": s.price.tolist(),
            "participants": s.participants.tolist(), "spend": s.spend.tolist(),
            "psi_time": s.psi_time.tolist(), "psi": s.psi.tolist()}


def write_channels(result: RunResult, path: Path) -> None:
    """``channels.csv``: per channel, owners, transmissions, collided ones, busy time, utilisation."""
    net, horizon = result.network, result.training.time
    rows = [(ch.index, int(np.sum(net.channel_of == ch.index)), ch.transmissions, ch.collided,
             ch.busy_time, ch.utilisation(horizon)) for ch in net.channels]
    _write_csv(path, ("channel", "owners", "transmissions", "collided", "busy_time",
                      "utilisation"), rows)


def write_topology(scenario, consortium, directory: Path, painter: Painter | None = None,
                   epsilons: list[float] | None = None, graphml: bool = True, draw: bool | None = None,
                   load: dict | None = None) -> None:
    """``topology.graphml`` (if ``graphml``) and ``topology.png`` (if ``draw``, default
    ``output.plots``): learner, channels, owners of a network run, the picture with the run's
    ``load`` (:func:`network_load`) when given.

    ``epsilons`` are the budgets (default: the scenario's; a market run passes what it sold).
    Only plain data cross to the painter, which builds the graph (networkx is imported there).
    """
    N = len(consortium.names)
    if epsilons is None:
        epsilons = [scenario.owner_value(i, "epsilon") for i in range(N)]
    data = {"names": list(consortium.names),
            "channel_of": [scenario.owner_value(i, "channel") for i in range(N)],
            "rates": [scenario.owner_value(i, "clock_rate") for i in range(N)],
            "epsilons": list(epsilons),
            "sizes": [int(n) for n in consortium.sizes], "channels": scenario.network.channels,
            "graphml": graphml, "draw": scenario.output.plots if draw is None else draw, "load": load}
    (painter or Painter(enabled=False)).paint("topology", data, str(directory))


def figure_data(result: RunResult) -> dict:
    """The plain data the run figures need (see :class:`dpmarket.output.figures.run.RunFigures`)."""
    s, m = result.scenario, result.training.metrics
    eps = sorted({o.epsilon for o in result.owners})
    eps_text = f"{eps[0]:g}" if len(eps) == 1 else f"{eps[0]:g}…{eps[-1]:g}"
    return {
        "title": f"{s.name}: N={len(result.owners)}, ε={eps_text}, T={s.learner.iterations}",
        "k": list(m.k), "psi": list(m.psi), "own_psi_median": float(np.median(result.own_psi)),
        "psi_zero": float(result.psi_zero),
        **(result.training.sequence.figure() if is_async(result) else {"sequence": [], "density": None}),
        "owners": len(result.consortium.names),
    }


def write_metrics(result: RunResult, path: Path) -> None:
    """``metrics.csv``: k, time, psi at the recorded iterations (the last one included)."""
    m = result.training.metrics
    _write_csv(path, ("k", "time", "psi"), zip(m.k, m.time, m.psi, strict=True))


def write_owners(result: RunResult, path: Path) -> None:
    """``owners.csv``: one row per owner (absent columns of declining owners left empty)."""
    rows = owner_rows(result)
    header = tuple(max(rows, key=len))
    _write_csv(path, header, ([r.get(key, "") for key in header] for r in rows))


def _write_csv(path: Path, header: tuple, rows) -> None:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(header)
        for row in rows:
            writer.writerow([repr(v) if isinstance(v, float) else v for v in row])


def run_and_write(scenario, out: Path, progress: bool | Progress = False,
                  painter: Painter | None = None) -> RunResult:
    """Run ``scenario`` with its events streamed into a staging copy of ``out``; publish on success.

    ``painter`` may be a figure helper the caller started early (it is closed here); ``progress``
    (True: on stderr when it is a terminal) shows the phases that last.
    """
    from dpmarket.runs.run import execute

    painter, progress = painter or Painter(enabled=scenario.output.plots), progress_of(progress)
    with painter, run_directory(out, run_identity(scenario)) as staging:
        # Drawn while the simulation runs, except in a market run: its budgets are known after the market.
        early = scenario.market is None

        def on_data(consortium) -> None:
            if scenario.network.mode != "ideal" and early:  # the graph now; its picture after the run
                write_topology(scenario, consortium, staging, painter, draw=False)

        result = execute(scenario, staging / "events.csv", on_data, progress)
        with progress.phase("writing tables, figures and report.html"):
            write_run(result, staging, scenario.output.plots, painter, topology=not early)
    return result
