"""Comparing compensation policies on common random numbers (the ``market`` command's work).

Every policy faces the same owners (same data, same cost coefficients), the same forecast,
and for each replication the same run seed — hence the same clocks, channel and DP noise
streams: owner i's j-th answer carries the same standard Laplace draw under every policy in
which it takes part. Only the policy differs. With one replication the seed is the
scenario's own, so a policy's simulated ψ equals what ``run`` gives with that policy.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dpmarket import rng as streams
from dpmarket.data.problem import prepare
from dpmarket.errors import _MISSING, ScenarioError
from dpmarket.markets.outcome import Outcome, learner_value
from dpmarket.markets.policies import settle
from dpmarket.markets.stage import sellers_of
from dpmarket.output.directories import Identity
from dpmarket.privacy.guarantee import Guarantee
from dpmarket.runs import pilots as calibration
from dpmarket.scenario.checks import check_policy
from dpmarket.scenario.schema import POLICIES, Scenario
from dpmarket.system import files
from dpmarket.system.progress import Progress
from dpmarket.system.progress import of as progress_of


@dataclass(frozen=True)
class PolicyResult:
    """One policy: its market outcome and the simulated ψ of each replication."""

    outcome: Outcome
    psi: np.ndarray  # one per replication; empty when nobody takes part


@dataclass(frozen=True)
class Comparison:
    """All policies of one comparison, with the seeds and forecast they shared."""

    scenario: Scenario
    results: list[PolicyResult]
    seeds: list[int]
    forecast_source: str
    forecast: dict
    names: list[str]
    records: np.ndarray
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


def replication_seeds(scenario: Scenario, replications: int) -> list[int]:
    """The run seeds every policy shares: the scenario's own for one replication."""
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
            progress: bool | Progress = False) -> Comparison:
    """Settle every policy on the same sellers and forecast, then train each on the same seeds.

    The data are fixed at the scenario's data seed, so replications vary only the run's
    randomness (clocks, selection, channel, noise), not the owners. The training runs go to
    ``workers`` processes (the numbers do not depend on how many). ``progress`` (True: on a
    terminal) shows the data stage, the pilots and the training runs.
    """
    from dpmarket.experiment.policy_runs import final_psi

    base = pinned(scenario)
    progress = progress_of(progress)
    prepared = prepare(base, progress)
    consortium, objective = prepared.consortium, prepared.objective
    forecast, source = calibration.resolve(base, consortium, objective, cache, progress=progress)
    sellers = sellers_of(base, prepared)
    seeds = replication_seeds(base, replications)
    outcomes = [settle(name, sellers, forecast, base.market, base.seed) for name in policies]
    trained = [o for o in outcomes if o.participates.any()]  # nobody takes part: nothing to train
    jobs = [(o.members, o.epsilon, seed) for o in trained for seed in seeds]
    psi = iter(final_psi(base, consortium, objective, jobs, workers, progress))
    results = [PolicyResult(o, np.array([next(psi) for _ in seeds] if o.participates.any() else [],
                                        dtype=float)) for o in outcomes]
    return Comparison(base, results, seeds, source, forecast.to_dict(), list(consortium.names),
                      consortium.sizes, float(objective.psi(np.zeros(objective.p))))


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


def write(c: Comparison, target: Path) -> list[dict]:
    """Write the comparison directory atomically: tables, figures, report.html, summary, scenario."""

    from dpmarket.output.directories import run_directory
    from dpmarket.output.figures import market as plots
    from dpmarket.output.report import market_report
    from dpmarket.output.results import _write_csv

    rows = policy_rows(c)
    what = identity(c.scenario, [r.outcome.policy for r in c.results], c.seeds)
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
                   "forecast": {**c.forecast, "source": c.forecast_source}}
        (staging / "summary.json").write_text(files.dumps(summary, indent=2) + "\n", encoding="utf-8")
        market_report(staging, f"dpmarket market: {title}", summary, rows, market,
                      [staging / "psi_payment.png", staging / "epsilons.png"])
    return rows


def identity(scenario: Scenario, policies: list[str], seeds: list[int]) -> Identity:
    """What a comparison directory holds: the scenario (data seed pinned, as :func:`compare` runs
    it), the policies and the seeds; the same command may write it again, nothing else."""
    return Identity("market", pinned(scenario).to_toml(), {"policies": list(policies), "seeds": list(seeds)})


def guarantee_of(scenario: Scenario) -> dict:
    """Which mechanism and accountant made the owners' guarantee (every policy shares it)."""
    p = scenario.privacy
    return Guarantee.of(p).statement()


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
