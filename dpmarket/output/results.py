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

from dpmarket.output import spans, views
from dpmarket.output.directories import Identity, default_directory, run_directory
from dpmarket.output.figures.painter import Painter
from dpmarket.output.summary import budgets, network_load, owner_rows, summary
from dpmarket.privacy import auditing
from dpmarket.runs.audit import AuditResult, ViewAudit
from dpmarket.runs.run import RunResult, is_async
from dpmarket.system import files, reproducibility
from dpmarket.system.progress import Progress
from dpmarket.system.progress import of as progress_of


def run_identity(scenario, oracle: bool = True) -> Identity:
    """What a run directory of ``scenario`` holds: its resolved scenario (and, written with
    ``--no-oracle``, that its summary's oracle measurements were left out)."""
    return Identity("run", scenario.to_toml(), {} if oracle else {"oracle_written": False})


def default_run_dir(scenario, oracle: bool = True) -> Path:
    """``outputs/NAME-seedSEED``, or ``-2``, ``-3``…: the first holding this very run, or free."""
    return default_directory(Path("outputs") / f"{scenario.name}-seed{scenario.seed}",
                             run_identity(scenario, oracle))


def write_run(result: RunResult, directory: Path, plots: bool = True,
              painter: Painter | None = None, topology: bool = True, *, oracle: bool = True) -> None:
    """Write every table, the summary and the figures of ``result`` into ``directory``.

    Figures go to ``painter`` (a helper process) when given, else are drawn here;
    ``topology=False`` when the caller already wrote ``topology.graphml`` (its picture, which
    shows the run's load, is drawn here). ``oracle=False`` (``run --no-oracle``) writes none of the
    oracle measurements (ψ, own-data ψ, who benefits, θ*, …: summary.json's ``oracle`` lists them).
    """
    painter = painter or Painter(enabled=False)
    (directory / "scenario.toml").write_text(result.scenario.to_toml(), encoding="utf-8")
    lanes = view = None
    if WRITE_SPANS and (directory / "events.csv").is_file():
        lanes, view = timeline_sinks(result) if plots else (None, None)
        write_spans(result, directory, [lanes.add, view.add] if plots else [])
    write_metrics(result, directory / "metrics.csv", oracle)
    write_owners(result, directory / "owners.csv", oracle)
    (directory / "summary.json").write_text(files.dumps(summary(result, oracle), indent=2) + "\n",
                                            encoding="utf-8")
    if result.network is not None:
        write_channels(result, directory / "channels.csv")
        if topology or plots:  # the picture waits for the run: it shows the channels' load
            write_topology(result.scenario, result.consortium, directory, painter, budgets(result),
                           graphml=topology, draw=plots, load=network_load(result))
    if plots:
        data = figure_data(result, oracle)
        painter.paint("run", data, str(directory))
        if lanes is not None:
            painter.paint("timeline", lanes.data(data["title"]), str(directory))
        if oracle and result.market is not None and result.market.dynamic is not None:  # ψ panel
            painter.paint("market_timeline", market_timeline_data(directory, data["title"]), str(directory))
    painter.wait()
    from dpmarket.output.report import run_report  # deferred: only runs that are written need it

    run_report(result, directory, plots, view.data() if view is not None else None, oracle)


WRITE_SPANS = True  # benchmarks/bench_timeline.py turns it off to time a run without spans


def span_timing(result: RunResult) -> spans.Timing:
    """What pairing events into spans needs to know of ``result`` (:class:`spans.Timing`)."""
    net = result.scenario.network
    return spans.Timing(net.mode, net.transmission_time, net.latency, not is_async(result),
                        spans.run_end(result.stop_reason, net.horizon, result.training.time))


def timeline_sinks(result: RunResult) -> tuple[views.Lanes, views.Interactive]:
    """What the run's timeline.png and report.html's interactive timeline gather from its spans."""
    s, names = result.scenario, list(result.consortium.names)
    counts, timing = result.training.log.counts, span_timing(result)
    network = s.network.mode != "ideal"
    channel_of = [s.owner_value(i, "channel") if network else 0 for i in range(len(names))]
    exchanges = counts["request"] if s.network.mode == "request" else counts["query"]
    lanes = views.Lanes(names, channel_of, 0.0, timing.end, exchanges=exchanges,
                        iterations=s.learner.iterations)
    return lanes, views.Interactive(names, timing.end)


def write_spans(result: RunResult, directory: Path, sinks: list[spans.Sink] = ()) -> int:
    """``spans.csv``: the run's intervals, paired from its events.csv (:mod:`dpmarket.output.spans`);
    each block of spans also goes to ``sinks``. Returns the number of spans."""
    return spans.write(directory / "events.csv", directory / "spans.csv", list(result.consortium.names),
                       span_timing(result), sinks)


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
                   epsilons: list[float] | None = None, *, graphml: bool = True, draw: bool | None = None,
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


def figure_data(result: RunResult, oracle: bool = True) -> dict:
    """The plain data the run figures need (see :class:`dpmarket.output.figures.run.RunFigures`);
    without ``oracle`` no ψ (psi.png is not drawn)."""
    s, m = result.scenario, result.training.metrics
    eps = sorted({o.epsilon for o in result.owners})
    eps_text = f"{eps[0]:g}" if len(eps) == 1 else f"{eps[0]:g}…{eps[-1]:g}"
    return {
        "title": f"{s.name}: N={len(result.owners)}, ε={eps_text}, T={s.learner.iterations}",
        "k": list(m.k), "psi": list(m.psi), "own_psi_median": float(np.median(result.own_psi)),
        "psi_zero": float(result.psi_zero),
        **(result.training.sequence.figure() if is_async(result) else {"sequence": [], "density": None}),
        "owners": len(result.consortium.names), "oracle": oracle,
    } if oracle else {
        "title": f"{s.name}: N={len(result.owners)}, ε={eps_text}, T={s.learner.iterations}",
        "k": [], "psi": [], "own_psi_median": float("nan"), "psi_zero": float("nan"),
        **(result.training.sequence.figure() if is_async(result) else {"sequence": [], "density": None}),
        "owners": len(result.consortium.names), "oracle": False,
    }


def write_metrics(result: RunResult, path: Path, oracle: bool = True) -> None:
    """``metrics.csv``: k, time, psi at the recorded iterations (the last one included); without
    ``oracle``, k and time only (ψ is an oracle measurement)."""
    m = result.training.metrics
    if not oracle:
        _write_csv(path, ("k", "time"), zip(m.k, m.time, strict=True))
        return
    _write_csv(path, ("k", "time", "psi"), zip(m.k, m.time, m.psi, strict=True))


def write_owners(result: RunResult, path: Path, oracle: bool = True) -> None:
    """``owners.csv``: one row per owner (absent columns of declining owners left empty)."""
    rows = owner_rows(result, oracle)
    header = tuple(max(rows, key=len))
    _write_csv(path, header, ([r.get(key, "") for key in header] for r in rows))


def _write_csv(path: Path, header: tuple, rows) -> None:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(header)
        for row in rows:
            writer.writerow([repr(v) if isinstance(v, float) else v for v in row])


def run_and_write(scenario, out: Path, progress: bool | Progress = False,
                  painter: Painter | None = None, oracle: bool = True) -> RunResult:
    """Run ``scenario`` with its events streamed into a staging copy of ``out``; publish on success.

    ``painter`` may be a figure helper the caller started early (it is closed here); ``progress``
    (True: on stderr when it is a terminal) shows the phases that last; ``oracle=False`` writes no
    oracle measurement (:func:`write_run`).
    """
    from dpmarket.runs.run import execute

    check_oracle_free(scenario, oracle)
    painter, progress = painter or Painter(enabled=scenario.output.plots), progress_of(progress)
    with painter, run_directory(out, run_identity(scenario, oracle)) as staging:
        # Drawn while the simulation runs, except in a market run: its budgets are known after the market.
        early = scenario.market is None

        def on_data(consortium) -> None:
            if scenario.network.mode != "ideal" and early:  # the graph now; its picture after the run
                write_topology(scenario, consortium, staging, painter, draw=False)

        result = execute(scenario, staging / "events.csv", on_data, progress)
        with progress.phase("writing tables, figures and report.html"):
            write_run(result, staging, scenario.output.plots, painter, topology=not early, oracle=oracle)
    return result


def check_oracle_free(scenario, oracle: bool) -> None:
    """A run without oracle measurements cannot have a market whose forecast was fitted to pilot runs on
    the owners' records (``market.pilots.data = "owners"``): its outcome would be one."""
    m = scenario.market
    if oracle or m is None or m.forecast is not None or m.pilots.data != "owners":
        return
    from dpmarket.errors import ScenarioError

    raise ScenarioError(scenario.source, "market.pilots.data", "owners",
                        "the market's forecast is then fitted on the owners' private records, so its outcome "
                        "is an oracle measurement: --no-oracle needs pilots on the public proxy ('proxy')")


# --- an audit's directory (``dpmarket audit``) -----------------------------------------------------
#
# | file | content |
# | --- | --- |
# | ``scenario.toml`` | the resolved scenario audited |
# | ``summary.json`` | the owner, its claim, the canary, each adversary's bound, the detectable ε, verdict |
# | ``audit.csv`` | the table: one row per adversary (error counts, rates and their exact upper bounds, ε) |
# | ``scores.csv`` | every run's score by each adversary (world, run, half: threshold or count) |
# | ``audit_roc.png`` | each adversary's ROC curve against the claimed (ε, δ) frontier |

def audit_identity(result_or_scenario, facts: dict) -> Identity:
    """What an audit directory holds: its kind, the resolved scenario and the audit's settings."""
    scenario = getattr(result_or_scenario, "scenario", result_or_scenario)
    return Identity("audit", scenario.to_toml(), facts)


def audit_settings(owner: int | None, runs: int, view: str, method: str, confidence: float) -> dict:
    """The audit's own settings (summary.json keys), which a directory's identity includes."""
    return {"owner_asked": owner, "runs": runs, "view": view, "method": method, "confidence": confidence}


def default_audit_dir(scenario, facts: dict) -> Path:
    """``outputs/NAME-audit-seedSEED``, or ``-2``…: the first holding this very audit, or free."""
    return default_directory(Path("outputs") / f"{scenario.name}-audit-seed{scenario.seed}",
                             audit_identity(scenario, facts))


def audit_summary(result: AuditResult, facts: dict) -> dict:
    """``summary.json`` of an audit."""
    return {"scenario": result.scenario.name, "seed": result.scenario.seed, **facts,
            "owner": result.owner, "name": result.name, "epsilon_claimed": result.epsilon,
            "delta": result.delta, "mechanism": result.mechanism, "accountant_used": result.accountant,
            "answer_cap": result.answers_allowed, "noise_scale": result.noise_scale,
            "sensitivity": result.sensitivity, "answers_seen_per_run": result.answers_seen,
            "neighbouring": "replace-one: the two worlds differ in one record of this owner, n_i unchanged",
            "canary": result.canary, "epsilon_lower": result.epsilon_lower,
            "epsilon_detectable": result.epsilon_detectable if result.power_measured else None,
            "leak_detectable": result.leak_detectable, "verdict": result.verdict,
            "passed": result.passed, "conclusion": result.conclusion, "adversaries": result.rows(),
            "reproducibility": reproducibility.statement()}


def write_audit(result: AuditResult, out: Path, facts: dict, plots: bool = True) -> None:
    """The audit's directory (see the module's table), written whole or not at all."""
    with run_directory(out, audit_identity(result, facts)) as staging:
        (staging / "scenario.toml").write_text(result.scenario.to_toml(), encoding="utf-8")
        (staging / "summary.json").write_text(files.dumps(audit_summary(result, facts), indent=2) + "\n",
                                              encoding="utf-8")
        _write_rows(staging / "audit.csv", result.rows())
        _write_rows(staging / "scores.csv", score_rows(result))
        curves = roc_data(result)
        if plots and curves["curves"]:
            painter = Painter(enabled=False)
            painter.paint("audit_roc", curves, str(staging))


def score_rows(result: AuditResult) -> list[dict]:
    """Every run's score by each adversary of a two-world audit (none for the audit by one run)."""
    rows = []
    for a in result.audits:
        if not isinstance(a, ViewAudit):
            continue
        for world, scores in enumerate(a.scores):
            for run, score in enumerate(scores.tolist()):
                rows.append({"view": a.view, "world": world, "run": run,
                             "half": "threshold" if run < a.calibration else "count", "score": score})
    return rows


def roc_data(result: AuditResult) -> dict:
    """The plain lists ``audit_roc.png`` draws (:func:`dpmarket.output.figures.sweep.draw_roc`)."""
    curves = []
    for a in result.audits:
        if not isinstance(a, ViewAudit):
            continue
        fpr, tpr = auditing.roc(*a.evaluated())
        r = a.rates
        curves.append({"view": a.view, "fpr": fpr.tolist(), "tpr": tpr.tolist(), "runs": r.negatives,
                       "point": [r.false_positive_rate, 1.0 - r.false_negative_rate],
                       "fpr_upper": r.false_positive_upper, "fnr_upper": r.false_negative_upper,
                       "epsilon_lower": a.epsilon_lower})
    title = (f"{result.scenario.name}: audit of owner {result.owner} ({result.name}), "
             f"{result.runs:,} runs per world")
    return {"title": title, "epsilon": result.epsilon, "delta": result.delta, "curves": curves}


def _write_rows(path: Path, rows: list[dict]) -> None:
    """Rows of dicts as CSV (floats as repr: every digit), columns in order of first appearance."""
    header: list[str] = []
    for row in rows:
        header += [k for k in row if k not in header]
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(header)
        for row in rows:
            writer.writerow([_cell(row.get(k, "")) for k in header])


def _cell(value):
    return repr(value) if isinstance(value, float) else value
