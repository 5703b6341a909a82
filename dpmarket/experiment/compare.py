"""Comparing compensation policies on common random numbers (the ``market`` command's work).

Every policy faces the same owners (same data, same cost coefficients), the same forecast,
and for each replication the same run seed — hence the same clocks, channel and DP noise
streams: owner i's j-th answer carries the same standard Laplace draw under every policy in
which it takes part. Only the policy differs. With one replication the seed is the
scenario's own, so a policy's simulated ψ equals what ``run`` gives with that policy.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from dpmarket import rng as streams
from dpmarket.data.problem import prepare
from dpmarket.errors import _MISSING, ScenarioError
from dpmarket.markets.lab import properties as lab
from dpmarket.markets.lab.welfare import Best
from dpmarket.markets.outcome import Outcome, learner_value
from dpmarket.markets.policies import settle
from dpmarket.markets.stage import sellers_of
from dpmarket.output.directories import Identity
from dpmarket.output.summary import oracle_statement
from dpmarket.privacy.guarantee import stated
from dpmarket.runs import pilots as calibration
from dpmarket.scenario.checks import check_policy
from dpmarket.scenario.schema import POLICIES, Scenario
from dpmarket.scenario.sizes import refuse_impossible_sizes
from dpmarket.system import counts, files, reproducibility
from dpmarket.system.progress import Progress
from dpmarket.system.progress import of as progress_of


@dataclass(frozen=True)
class PolicyResult:
    """One policy: its market outcome and the simulated ψ of each replication."""

    outcome: Outcome
    psi: np.ndarray  # one per replication; empty when nobody takes part


@dataclass(frozen=True)
class Comparison:
    """All policies of one comparison, with the seeds and forecast they shared; with ``properties``,
    each policy's property table (dpmarket/markets/lab/properties.py) and the best welfare found."""

    scenario: Scenario
    results: list[PolicyResult]
    seeds: list[int]
    forecast_source: str
    forecast: dict
    names: list[str]
    records: np.ndarray
    properties: list[lab.Properties] | None = None
    best: tuple[Best, Best] | None = None  # (the reference: within the budget if any; the first best)
    psi_zero: float = float("nan")  # ψ of the untrained model θ = 0 on everyone's data


def parse_policies(text: str, scenario: Scenario, source: str) -> list[str]:
    """``"a,b,c"`` → policy names, each checked against the [market] keys it needs."""
    if scenario.market is None:
        raise ScenarioError(source, "market", _MISSING, "the market command needs a [market] section")
    market = scenario.market
    if market.mode == "dynamic":
        raise ScenarioError(source, "market.mode", market.mode, "the market command compares static "
                            "deals; run a market in time with `run` (one --set market.policy=... each)")
    names = [p.strip() for p in text.split(",") if p.strip()]
    for name in names:
        if name not in POLICIES:
            raise ScenarioError("--policies", "", name, f"unknown policy; known: {', '.join(POLICIES)}")

    def fail(key, value, reason):
        raise ScenarioError(source, key, value, reason)

    for name in names:
        check_policy(market, name, fail)
    if not names:
        raise ScenarioError("--policies", "", text, "name at least one policy")
    return names


# What each replication holds until the comparison ends: its seed (a Python int in a list), and per
# policy its training job and ψ
SEED_BYTES, JOB_BYTES = 40, 64


def replications_refusal(replications: int, policies: int) -> str | None:
    """Why ``replications`` training runs of each of ``policies`` policies cannot be made, before any
    seed is derived (more than numpy counts, or their seeds, jobs and ψ beyond memory), or None."""
    which = "1 policy" if policies == 1 else f"{policies} policies"
    return counts.refusal(replications, SEED_BYTES + policies * JOB_BYTES,
                          f"{replications:,} replications of {which} (each its seed, training jobs and psi)")


def replication_seeds(scenario: Scenario, replications: int, policies: int = 1) -> list[int]:
    """The run seeds every policy shares: the scenario's own for one replication; a count of them that
    cannot be honoured is refused before any is derived (``--replications``)."""
    too_many = replications_refusal(replications, policies)
    if too_many is not None:
        raise ScenarioError("--replications", "", replications, too_many)
    if replications == 1:
        return [scenario.seed]
    return streams.replication_seeds(scenario.seed, replications)


def pinned(scenario: Scenario) -> Scenario:
    """The scenario with its data seed fixed (to the run seed unless given): every replication
    and policy trains on the same owners."""
    data_seed = scenario.seed if scenario.data.seed is None else scenario.data.seed
    return scenario.model_copy(update={"data": scenario.data.model_copy(update={"seed": data_seed})})


def compare(scenario: Scenario, policies: list[str], replications: int = 1,
            cache: Path | None = None, workers: int = 1,
            *, progress: bool | Progress = False, properties: bool = False) -> Comparison:
    """Settle every policy on the same sellers and forecast, then train each on the same seeds.

    The data are fixed at the scenario's data seed, so replications vary only the run's
    randomness (clocks, selection, channel, noise), not the owners. The training runs go to
    ``workers`` processes (the numbers do not depend on how many). ``progress`` (True: on a
    terminal) shows the data stage, the pilots and the training runs. ``properties`` adds each
    policy's property table (individual rationality, truthfulness, budget, welfare, fairness,
    replication: dpmarket/markets/lab/properties.py), measured on the same forecast and runs.
    """
    from dpmarket.experiment.policy_runs import final_psi

    refuse_impossible_sizes(scenario, scenario.source, policies)  # the policies' arrays, before any work
    base = pinned(scenario)
    progress = progress_of(progress)
    prepared = prepare(base, progress)
    consortium, objective = prepared.consortium, prepared.objective
    forecast, source = calibration.resolve(base, consortium, objective, cache, progress=progress)
    sellers = sellers_of(base, prepared)
    seeds = replication_seeds(base, replications, len(policies))
    outcomes = [settle(name, sellers, forecast, base.market, base.seed) for name in policies]
    trained = [o for o in outcomes if o.participates.any()]  # nobody takes part: nothing to train
    jobs = [(o.members, o.epsilon, seed) for o in trained for seed in seeds]
    psi = iter(final_psi(base, consortium, objective, jobs, workers, progress=progress))
    results = [PolicyResult(o, np.array([next(psi) for _ in seeds] if o.participates.any() else [],
                                        dtype=float)) for o in outcomes]
    comparison = Comparison(base, results, seeds, source, forecast.to_dict(), list(consortium.names),
                            consortium.sizes, psi_zero=float(objective.psi(np.zeros(objective.p))))
    if not properties:
        return comparison
    with progress.phase("the policies' properties", total=len(results) + 1, unit="policy") as bar:
        best = lab.references(sellers, forecast, base.market, outcomes)
        bar.update()
        table = []
        for r in results:
            table.append(lab.evaluate(r.outcome, r.psi, sellers, forecast, base.market, seed=base.seed,
                                      best=best[0], first_best=best[1]))
            bar.update()
    return replace(comparison, properties=table, best=best)


def policy_rows(c: Comparison) -> list[dict]:
    """``policies.csv``: one row per policy."""
    rows = []
    for r in c.results:
        o, psi = r.outcome, r.psi
        mean = float(psi.mean()) if len(psi) else float("nan")
        rows.append({
            "policy": o.policy, "participants": int(o.participates.sum()),
            "total_payment": o.spend, "price": "" if o.price is None else o.price,
            "psi_forecast": o.psi_forecast, "psi_mean": mean,
            "psi_sd": float(psi.std(ddof=1)) if len(psi) > 1 else "",  # no spread from one run
            "psi_min": float(psi.min()) if len(psi) else float("nan"),
            "psi_max": float(psi.max()) if len(psi) else float("nan"),
            "learner_value": o.value, "learner_surplus": o.surplus,
            "learner_surplus_simulated": learner_value(c.scenario.market.value, mean) - o.spend
            if len(psi) else -o.spend,
            "replications": len(psi),
        })
    return rows


def market_rows(c: Comparison) -> list[dict]:
    """``market.csv``: one row per policy and owner."""
    names, records, rows = c.names, c.records, []
    for r in c.results:
        o = r.outcome
        for i in range(len(o.epsilon)):
            rows.append({"policy": o.policy, "owner": i, "name": names[i], "records": int(records[i]),
                         "cost_coef": float(o.coef[i]), "epsilon": float(o.epsilon[i]),
                         "payment": float(o.payment[i]), "cost": float(o.cost[i]),
                         "utility": float(o.utility[i]), "participates": bool(o.participates[i])})
    return rows


def property_rows(c: Comparison) -> list[dict]:
    """``properties.csv``: one row per policy (empty without properties)."""
    return [lab.policy_row(p, r.outcome) for p, r in zip(c.properties or [], c.results, strict=False)]


def owner_property_rows(c: Comparison) -> list[dict]:
    """``owner_properties.csv``: one row per policy and owner (empty without properties)."""
    return [row for p, r in zip(c.properties or [], c.results, strict=False)
            for row in lab.owner_rows(p, r.outcome, c.names)]


def best_facts(c: Comparison) -> dict:
    """The best welfare found (the efficiency's reference) for summary.json."""
    best, first = c.best
    facts = {"welfare_best": best.welfare, "members": np.flatnonzero(best.members).tolist(),
             "epsilon": [float(e) for e in best.epsilon[best.members]], "psi_forecast": best.psi,
             "within_budget": c.scenario.market.budget, "method": best.method}
    if first is not best:
        facts["welfare_first_best"] = first.welfare
        facts["first_best_members"] = np.flatnonzero(first.members).tolist()
    return facts


def write(c: Comparison, target: Path) -> list[dict]:
    """Write the comparison directory atomically: tables, figures, report.html, summary, scenario
    (with properties: properties.csv, owner_properties.csv, three more figures and a report section)."""

    from dpmarket.output.directories import run_directory
    from dpmarket.output.figures import market as plots
    from dpmarket.output.report import market_report
    from dpmarket.output.results import _write_csv

    rows = policy_rows(c)
    what = identity(c.scenario, [r.outcome.policy for r in c.results], c.seeds, c.properties is not None)
    with run_directory(target, what) as staging:
        (staging / "scenario.toml").write_text(c.scenario.to_toml(), encoding="utf-8")
        _write_csv(staging / "policies.csv", tuple(rows[0]), (r.values() for r in rows))
        market = market_rows(c)
        _write_csv(staging / "market.csv", tuple(market[0]), (r.values() for r in market))
        title = f"{c.scenario.name}: {len(c.names)} owners, {len(c.seeds)} replication(s)"
        plots.psi_against_payment(rows, title, staging / "psi_payment.png", c.psi_zero)
        eps = [(r.outcome.policy, [float(e) for e in r.outcome.epsilon[r.outcome.participates]])
               for r in c.results]
        plots.epsilon_distribution(eps, title, staging / "epsilons.png")
        summary = {"scenario": c.scenario.name, "seed": c.scenario.seed, "seeds": c.seeds,
                   "policies": [r["policy"] for r in rows], **guarantee_of(c.scenario),
                   "forecast": {**c.forecast, "source": c.forecast_source},
                   "oracle": oracle_statement(market_oracle(c.scenario)),
                   "reproducibility": reproducibility.statement()}
        section = None
        if c.properties is not None:
            summary["properties"] = True
            summary["best_welfare"] = best_facts(c)
            section = _write_properties(c, staging, title, _write_csv)
        (staging / "summary.json").write_text(files.dumps(summary, indent=2) + "\n", encoding="utf-8")
        market_report(staging, f"dpmarket market: {title}", summary, rows, market,
                      figures=[staging / "psi_payment.png", staging / "epsilons.png"], properties=section)
    return rows


def market_oracle(scenario: Scenario) -> dict[str, list[str]]:
    """A comparison's oracle measurements by file: the simulated ψ (and, with pilots on the owners'
    records, the forecast and every outcome decided with it)."""
    from dpmarket.output.summary import MARKET_ORACLE

    listed = {k: list(v) for k, v in MARKET_ORACLE.items()}
    m = scenario.market
    if m.forecast is None and m.pilots.data == "owners":
        listed["summary.json"] = ["forecast"]
        listed["policies.csv"] += ["psi_forecast", "participants", "total_payment", "learner_surplus"]
    return listed


def _write_properties(c: Comparison, staging: Path, title: str, write_csv) -> dict:
    """properties.csv, owner_properties.csv and the lab's three figures; what the report shows of them."""
    from dpmarket.output.figures import mechanism

    table, owners = property_rows(c), owner_property_rows(c)
    write_csv(staging / "properties.csv", tuple(table[0]), (r.values() for r in table))
    write_csv(staging / "owner_properties.csv", tuple(owners[0]), (r.values() for r in owners))
    best, first = c.best
    names = ("welfare_payment.png", "payment_shapley.png", "misreport_gain.png")
    figures = [staging / name for name in names]
    mechanism.welfare_against_payment(table, best.welfare, None if first is best else first.welfare, title,
                                      figures[0])
    mechanism.payments_against_shapley(owners, title, figures[1])
    mechanism.misreport_gains(owners, title, figures[2])
    return {"rows": table, "owners": owners, "figures": figures, "method": best.method}


def identity(scenario: Scenario, policies: list[str], seeds: list[int], properties: bool = False) -> Identity:
    """What a comparison directory holds: the scenario (data seed pinned, as :func:`compare` runs
    it), the policies and the seeds (and whether it has the property table); the same command may
    write it again, nothing else."""
    facts = {"policies": list(policies), "seeds": list(seeds)}
    if properties:
        facts["properties"] = True
    return Identity("market", pinned(scenario).to_toml(), facts)


def property_table(rows: list[dict]) -> str:
    """The property table for the terminal: one line per policy (``properties.csv`` has every column)."""
    lines = [f"{'policy':<20} {'IR viol':>7} {'lie: gain>0':>11} {'max':>8} {'split4 max':>10} "
             f"{'efficiency':>10} {'r(pay,Shap)':>11} {'share dist':>10} {'surplus sim':>11}"]
    for r in rows:
        lines.append(f"{r['policy']:<20} {r['ir_violation_share']:>7.2f} {r['misreport_gain_share']:>11.2f} "
                     f"{r['misreport_gain_max']:>8.3g} {r.get('sybil4_gain_max', float('nan')):>10.3g} "
                     f"{r['efficiency']:>10.3f} {r['payment_shapley_correlation']:>11.3f} "
                     f"{r['payment_shapley_share_distance']:>10.3f} {r['surplus_simulated']:>11.4g}")
    lines.append("IR viol: share of owners below zero utility; lie: share gaining from a misreported cost, "
                 "largest gain; split4: largest gain from 4 fake owners; share dist: payment shares against "
                 "Shapley shares (0: in proportion); all columns in properties.csv")
    return "\n".join(lines)


def guarantee_of(scenario: Scenario) -> dict:
    """Which mechanism and accountant made the owners' guarantee (every policy shares it)."""
    return stated(scenario)


def table(rows: list[dict], out: Path, source: str = "", scenario: Scenario | None = None) -> str:
    """The comparison as a terminal table, with where the forecast came from (``source``).

    Both surpluses are shown: the forecast's (value of ψ̂ − payment, what the policy optimised)
    and the simulated one (value of the simulated mean ψ − payment); ``sd`` is blank with one
    replication.
    """
    lines = [f"{'policy':<20} {'owners':>6} {'payment':>10} {'psi fcst':>9} {'psi sim':>9} "
             f"{'sd':>8} {'sim/fcst':>8} {'surplus fcst':>12} {'surplus sim':>11}"]
    for r in rows:
        ratio = r["psi_mean"] / r["psi_forecast"] if r["psi_forecast"] > 0 else float("nan")
        sd = "" if r["psi_sd"] == "" else f"{r['psi_sd']:.3g}"
        lines.append(f"{r['policy']:<20} {r['participants']:>6} {r['total_payment']:>10.4g} "
                     f"{r['psi_forecast']:>9.4g} {r['psi_mean']:>9.4g} {sd:>8} "
                     f"{ratio:>8.3g} {r['learner_surplus']:>12.4g} {r['learner_surplus_simulated']:>11.4g}")
    if source:
        lines.append(f"forecast: {source}")
    if scenario is not None:
        facts = guarantee_of(scenario)
        delta = f"; δ = {facts['delta']:g}" if facts["delta"] else ""
        lines.append(f"privacy: {facts['guarantee']}{delta}")
    lines.append(f"written to {out}")
    return "\n".join(lines)
