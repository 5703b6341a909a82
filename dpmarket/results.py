"""Run directories (design §7): written whole or not at all, with the resolved scenario.

Files are written into a hidden sibling directory which is renamed into place only when the
run succeeded, so a failed or interrupted run never leaves a half-written directory behind
(:mod:`dpmarket.directories`). A run directory of the same resolved scenario is replaced (the
same bytes); any other non-empty directory is refused rather than silently overwritten.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from dpmarket import files
from dpmarket.directories import Identity, default_directory, run_directory
from dpmarket.market.outcome import learner_value
from dpmarket.painter import Painter
from dpmarket.privacy import is_pure
from dpmarket.progress import Progress
from dpmarket.progress import of as progress_of
from dpmarket.run import RunResult, is_async
from dpmarket.scenario import BUDGET_KEYS
from dpmarket.stepsize import STABILITY_LIMIT


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
        painter.paint("run", figure_data(result), str(directory))
    painter.wait()
    from dpmarket.report import run_report  # deferred: only runs that are written need it

    run_report(result, directory, plots)


def write_channels(result: RunResult, path: Path) -> None:
    """``channels.csv``: per channel, owners, transmissions, collided ones, busy time, utilisation."""
    net, horizon = result.network, result.training.time
    rows = [(ch.index, int(np.sum(net.channel_of == ch.index)), ch.transmissions, ch.collided,
             ch.busy_time, ch.utilisation(horizon)) for ch in net.channels]
    _write_csv(path, ("channel", "owners", "transmissions", "collided", "busy_time",
                      "utilisation"), rows)


def budgets(result: RunResult) -> list[float]:
    """Each owner's budget ε_i in the run: the scenario's, or what it sold in a market (0 if it
    declined)."""
    if result.market is None:
        return [o.epsilon for o in result.owners]
    return [float(e) for e in result.market.outcome.epsilon]


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


def network_load(result: RunResult) -> dict:
    """What went through the network, for the topology picture: exchanges and collisions per
    owner (scenario index; 0 for owners that declined a market), and per channel its
    utilisation, collided and total transmissions."""
    counts, N = result.training.log.counts_by_owner, len(result.consortium.names)
    channels, horizon = result.network.channels, result.training.time
    return {"exchanges": [counts[("update", i)] for i in range(N)],
            "collisions": [counts[("collision", i)] for i in range(N)],
            "utilisation": [ch.utilisation(horizon) for ch in channels],
            "collided": [ch.collided for ch in channels],
            "transmissions": [ch.transmissions for ch in channels]}


def figure_data(result: RunResult) -> dict:
    """The plain data the run figures need (see :class:`dpmarket.plots.RunFigures`)."""
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


def owner_rows(result: RunResult) -> list[dict]:
    """One dict per scenario owner with the columns of ``owners.csv``, every row with the same keys
    (market runs: every owner, with its market columns; an owner that declined has ε = 0, no
    answers, ``participates = false`` and no training or network figures)."""
    counts = result.training.log.counts_by_owner
    roster, network = result.roster, None
    rows = []
    for i, own in enumerate(result.own_psi):
        k = roster.slot(i)
        row = _training_columns(result, k, counts) if k is not None else _absent(result, i)
        row.update({"own_psi": float(own), "benefits": bool(k is not None and result.psi_final < own)})
        if k is not None:
            network = _network_columns(result, k, counts)
            row.update(network)
        rows.append(row)
    blank = dict.fromkeys(network or {}, "")  # a decliner took no part in the network either
    for i, row in enumerate(rows):
        if roster.slot(i) is None:
            row.update(blank)
        if result.market is not None:
            row.update(_market_columns(result.market.outcome, i))
    return rows


def _training_columns(result: RunResult, k: int, counts) -> dict:
    """What training did with the owner in slot k (its position among the participants)."""
    o = result.owners[k]
    return {"owner": o.index, "name": o.name, "records": o.data.n, "epsilon": o.epsilon,
            "queries": counts[("query", o.index)], "answers": o.ledger.answers,
            "refusals": counts[("refusal", o.index)], "epsilon_spent": o.epsilon_spent,
            "answer_cap": o.answers_allowed, "noise_scale": o.scale, "mechanism": o.mechanism,
            "delta": _owner_delta(o), "sensitivity": o.sensitivity}


def _owner_delta(owner) -> float:
    """The δ of the owner's guarantee: 0 for Laplace answers under basic composition (pure ε-DP,
    whatever privacy.delta says), else its δ_i."""
    return 0.0 if is_pure(owner.mechanism, owner.accountant) else float(owner.delta)


def _absent(result: RunResult, i: int) -> dict:
    """The training columns of an owner that declined the market: it answered nothing."""
    return {"owner": i, "name": result.consortium.names[i],
            "records": int(result.consortium.sizes[i]), "epsilon": 0.0, "queries": 0,
            "answers": 0, "refusals": 0, "epsilon_spent": 0.0, "answer_cap": 0, "noise_scale": "",
            "mechanism": "", "delta": "", "sensitivity": ""}


def _market_columns(outcome, i: int) -> dict:
    """The market's terms for owner i."""
    return {"cost_coef": float(outcome.coef[i]),
            "payment": float(outcome.payment[i]), "cost": float(outcome.cost[i]),
            "utility": float(outcome.utility[i]), "participates": bool(outcome.participates[i])}


def _network_columns(result: RunResult, k: int, counts) -> dict:
    """Per-owner communication figures (clock rate, channel, exchanges, losses, downtime) of the
    owner in slot k among the participants (the engine's arrays are per slot, events per owner)."""
    net, i = result.network, result.owners[k].index
    return {
        "clock_rate": result.scenario.owner_value(i, "clock_rate"),
        "channel": int(net.channel_of[k]) if net else "",
        "exchanges": counts[("update", i)], "ticks": counts[(_tick_kind(result), i)],
        "collisions": counts[("collision", i)], "losses": counts[("loss", i)],
        "dropouts": counts[("dropout", i)], "downtime": float(net.downtime[k]) if net else 0.0,
    }


def _tick_kind(result: RunResult) -> str:
    """The event counted as a clock tick: the ideal network logs no ``tick``, every tick there is
    an exchange begun by a ``query`` (see dpmarket.timeline.tick_kind)."""
    return "query" if result.network is None else "tick"


def write_owners(result: RunResult, path: Path) -> None:
    """``owners.csv``: one row per owner (absent columns of declining owners left empty)."""
    rows = owner_rows(result)
    header = tuple(max(rows, key=len))
    _write_csv(path, header, ([r.get(key, "") for key in header] for r in rows))


def summary(result: RunResult) -> dict:
    """The ``summary.json`` content (contract fields of design §7 first)."""
    s, t, counts = result.scenario, result.training, result.training.log.counts
    own = result.own_psi
    return {
        "scenario": s.name, "seed": s.seed, "owners": len(result.consortium.names),
        "records": int(result.consortium.sizes.sum()), "iterations": t.k,
        "psi_final": result.psi_final, "psi_zero": result.psi_zero, "collisions": counts["collision"],
        "dropouts": counts["dropout"],
        "wall_seconds": round(result.wall_seconds, 3),
        "iterations_planned": s.learner.iterations, "stop_reason": result.stop_reason,
        "algorithm": s.learner.algorithm, "loss": s.model.loss,
        "refusals": counts["refusal"], "queries": counts["query"], "losses": counts["loss"],
        "idle_slots": counts["idle"], "ticks": counts[_tick_kind(result)], "requests": counts["request"],
        "network_mode": s.network.mode,
        "channel_utilisation": _utilisation(result),
        "simulated_time": t.time, "sensitivity": result.owners[0].xi,
        **privacy_summary(s),
        "f_star": result.objective.f_star,
        "theta_star": [float(v) for v in result.objective.theta_star],
        "theta_final": [float(v) for v in t.learner.model],
        "own_psi_median": float(np.median(own)),
        "owners_benefiting": int(np.sum((result.psi_final < own) & result.roster.participates)),
        "epsilon_spent_max": max(o.epsilon_spent for o in result.owners),
        "step_curvature_max": result.step_curvature,
        **_learner_summary(result),
        **_data_summary(result),
        **_market_summary(result),
    }


ACCOUNTANT_NAMES = {"rdp": "RDP", "pld": "PLD (privacy-loss distribution)"}


def privacy_summary(scenario) -> dict:
    """Which mechanism and accountant made the owners' guarantee, in ``summary.json``."""
    p = scenario.privacy
    pure = is_pure(p.mechanism, p.accountant)
    if pure:
        guarantee = "pure ε-DP: Laplace answers, basic composition (each of m_i answers spends ε_i/m_i)"
    elif p.accountant == "basic":
        guarantee = (f"(ε, δ)-DP: {p.mechanism} answers, basic composition (each of m_i answers spends "
                     "ε_i/m_i and δ_i/m_i)")
    else:
        guarantee = (f"(ε, δ)-DP: m_i {p.mechanism} answers composed by dp-accounting's "
                     f"{ACCOUNTANT_NAMES[p.accountant]} accountant")
    return {"mechanism": p.mechanism, "accountant": p.accountant, "delta": 0.0 if pure else p.delta,
            "sensitivity_norm": "L1" if p.mechanism == "laplace" else "L2", "guarantee": guarantee}


def _learner_summary(result: RunResult) -> dict:
    """ρ and where it came from, its public stability number, the floor law's prediction, and
    the clip bound with the share of per-example gradients it clipped at the final model."""
    step = result.step
    out = {"rho": step.rho, "rho_source": step.source, "stability_number": step.stability,
           "stability_limit": STABILITY_LIMIT, "psi_floor_predicted": result.floor_predicted}
    if result.clipped_share is not None:
        out.update({"clip_bound": result.owners[0].clip, "clipped_share": result.clipped_share})
    return out


def _data_summary(result: RunResult) -> dict:
    """Table data: what was read, held out, dropped and clipped (nothing for synthetic owners)."""
    report = result.consortium.report
    return {} if report is None else {"data": report}


def _market_summary(result: RunResult) -> dict:
    """The market's figures for ``summary.json`` (nothing without a [market] section)."""
    if result.market is None:
        return {}
    o, f = result.market.outcome, result.market.forecast
    return {"policy": o.policy, "participants": int(o.participates.sum()),
            "price": o.price, "psi_forecast": o.psi_forecast, "psi_simulated": result.psi_final,
            "total_payment": o.spend, "learner_value": o.value, "learner_surplus": o.surplus,
            "learner_surplus_simulated": learner_value(result.scenario.market.value,
                                                       result.psi_final) - o.spend,
            "forecast": {**f.to_dict(), "source": result.market.source}}


def _utilisation(result: RunResult) -> list[float]:
    if result.network is None:
        return []
    return [ch.utilisation(result.training.time) for ch in result.network.channels]


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
    from dpmarket.run import execute

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


def summary_table(result: RunResult, out: Path) -> str:
    """A short human-readable summary of a run, for the terminal."""
    s = summary(result)
    eps = sorted({o.epsilon for o in result.owners})
    eps_text = f"{eps[0]:g}" if len(eps) == 1 else f"{eps[0]:g}…{eps[-1]:g}"
    sizes = result.consortium.sizes
    lines = [
        f"scenario      {s['scenario']} (seed {s['seed']})",
        f"owners        {s['owners']}  records {s['records']:,}  "
        f"(per owner {sizes.min():,}…{sizes.max():,})",
        f"model         {s['loss']} loss, {s['algorithm']} learner, ε = {eps_text}, "
        f"Ξ = {s['sensitivity']:.4g} ({s['sensitivity_norm']})",
        f"privacy       {s['guarantee']}" + (f"; δ = {s['delta']:g}" if s["delta"] else ""),
        f"iterations    {s['iterations']} of {s['iterations_planned']} ({s['stop_reason']}); "
        f"queries {s['queries']}, refusals {s['refusals']}",
        *_network_lines(s),
        *_data_lines(s.get("data")),
        f"psi final     {s['psi_final']:.4g}   (untrained θ = 0: {s['psi_zero']:.4g}; median own-data ψ "
        f"{s['own_psi_median']:.4g}; {s['owners_benefiting']} of {s['owners']} owners benefit)",
        f"max ε spent   {s['epsilon_spent_max']:.4g}",
        *_market_lines(s),
        *_learner_lines(s),
        *_yardstick_warning(s["psi_final"], s["psi_zero"], s.get("policy")),
        *_stability_warning(s["step_curvature_max"]),
        f"time          {s['simulated_time']:.4g} simulated, {s['wall_seconds']:.2f} s wall",
        f"written to    {out}",
    ]
    return "\n".join(lines)


def _market_lines(s: dict) -> list[str]:
    if "policy" not in s:
        return []
    return [f"market        {s['policy']}: {s['participants']} of {s['owners']} owners take part, "
            f"total payment {s['total_payment']:.4g}, learner surplus {s['learner_surplus']:.4g}",
            f"forecast      psi {s['psi_forecast']:.4g} forecast vs {s['psi_simulated']:.4g} simulated "
            f"({s['forecast']['source']})"]


def _network_lines(s: dict) -> list[str]:
    if s["network_mode"] == "ideal":
        return []
    use = ", ".join(f"{u:.1%}" for u in s["channel_utilisation"][:8])
    more = " …" if len(s["channel_utilisation"]) > 8 else ""
    return [f"network       {s['network_mode']}: collisions {s['collisions']}, losses {s['losses']}, "
            f"dropouts {s['dropouts']}, idle slots {s['idle_slots']}; channel use {use}{more}"]


def _data_lines(report: dict | None) -> list[str]:
    """Table data: rows held out, dropped on purpose and clipped, so no change goes unseen."""
    if report is None:
        return []
    left_out = report["owners_below_min_records"] + report["owners_beyond_max_owners"]
    rows_out = report["rows_below_min_records"] + report["rows_beyond_max_owners"]
    unseen = sum(report["unseen_categories"].values())
    return [f"data          {report['rows_read']:,} rows read; hold-out {report['holdout_rows']:,}; "
            f"dropped {report['rows_dropped_missing']:,} with missing values; left out {left_out} "
            f"owners ({rows_out:,} rows)",
            f"              {report['features_encoded']} encoded columns -> {report['features']} "
            f"features; clipped {report['feature_values_clipped']:,} feature values "
            f"({report['records_with_clipped_features']:,} records), {report['labels_clipped']:,} "
            f"labels; {unseen:,} category values unseen in the hold-out"]


def yardstick_warning(psi_final: float, psi_zero: float, policy: str | None = None) -> str | None:
    """The sentence saying that training did not beat the untrained model θ = 0, or None.

    A private model is only worth training where its ψ is below ψ(0); at or above it, the noise
    (or too large a step) has outweighed everything the owners' answers taught the learner. The
    advice names the lever on the budgets: privacy.epsilon, or in a market run (``policy``) the
    market's own key, since a market scenario refuses privacy.epsilon.
    """
    if not psi_final >= psi_zero:  # also None when either is NaN
        return None
    lever = "raise privacy.epsilon" if policy is None else budget_lever(policy)
    return (f"the trained model is no better than the untrained θ = 0 (psi {psi_final:.4g} ≥ "
            f"{psi_zero:.4g}): {lever} or revisit learner.rho")


def budget_lever(policy: str) -> str:
    """What buys larger budgets under market ``policy`` (the wording of the refusal of privacy.epsilon)."""
    return f"{BUDGET_KEYS[policy]} (market.policy = {policy!r} sets the budgets)"


def _learner_lines(s: dict) -> list[str]:
    """ρ with its stability number and the floor law's ψ; clipping's bound and share."""
    stability = "" if s["stability_number"] is None else (
        f", stability number {s['stability_number']:.3g} (limit {s['stability_limit']:g})")
    floor = "" if s["psi_floor_predicted"] is None else (
        f"; noise-free floor (law) {s['psi_floor_predicted']:.3g}")
    lines = [f"step          ρ = {s['rho']:.4g} ({s['rho_source'].split(' from ')[0]}){stability}{floor}"]
    if "clip_bound" in s:
        lines.append(f"clipping      {s['sensitivity_norm']} bound {s['clip_bound']:.4g}; "
                     f"{s['clipped_share']:.3%} of per-example gradients clipped at the final model")
    return lines


def _yardstick_warning(psi_final: float, psi_zero: float, policy: str | None) -> list[str]:
    warning = yardstick_warning(psi_final, psi_zero, policy)
    return [] if warning is None else [f"warning       {warning}"]


def _stability_warning(curvature: float | None) -> list[str]:
    if curvature is None or curvature <= 2.0:
        return []
    return [f"warning       largest owner step x curvature = {curvature:.3g} > 2: the largest "
            f"owners' copies oscillate; lower learner.rho"]
