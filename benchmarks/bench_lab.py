"""Mechanism-lab benchmark: what the property table costs, exact Shapley values of 20 owners, and how the
table's conclusions move with the forecast's error.

Run from the repository root:  python benchmarks/bench_lab.py [--quick]

1. ``dpmarket market banks_market`` with all seven policies × 10 replications, as subprocesses with
   the forecast cached, with and without ``--properties``, interleaved (best of 3 each). Target: the
   command with the property table takes at most 3 × the comparison without it (wall time; CPU time
   of the process tree printed beside it).
2. Exact Shapley values of 20 owners (banks_market with ``data.owners = 20``, its calibrated law, every
   owner at ε = 10): 2^20 = 1,048,576 coalitions through the forecast's batched evaluation, best of 3.
   Target: < 10 s. Reference in the same run: the forecast of the same coalitions given as a (2^20, 20)
   mask, and the efficiency check Σφ = V(N).
3. Sensitivity to the forecast's error: banks_market's property table with the law's noise multiplier
   c₂ scaled by 1/1.5 and 1.5 (the worst error the forecast benchmark tolerates), no training: which
   columns keep their sign and ranking.
Prints figures and PASS/FAIL; always exits 0 (it is a report, not a test).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
from timing import best_of

from dpmarket.data import problem
from dpmarket.experiment.compare import pinned
from dpmarket.markets import policies as pm
from dpmarket.markets.lab import properties
from dpmarket.markets.stage import sellers_of
from dpmarket.runs import pilots as calibration
from dpmarket.scenario.loading import load
from dpmarket.scenario.schema import POLICIES

ROOT = Path(__file__).resolve().parents[1]
BANKS = ROOT / "scenarios" / "banks_market.toml"
ALL = ",".join(POLICIES)


def children_cpu() -> float:
    """CPU seconds (user + system) of every finished child process so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def command_cost(replications: int, rounds: int, cache: Path) -> None:
    """Part 1: `market` against `market --properties`, interleaved."""
    env = {**os.environ, "DPMARKET_FORECAST_CACHE": str(cache)}
    with tempfile.TemporaryDirectory() as tmp:
        def run(extra: list[str], out: str) -> tuple[float, float]:
            cmd = [sys.executable, "-m", "dpmarket", "market", str(BANKS), "--policies", ALL,
                   "--replications", str(replications), "--out", str(Path(tmp) / out), "--quiet", *extra]
            cpu, start = children_cpu(), time.perf_counter()
            subprocess.run(cmd, check=True, capture_output=True, cwd=ROOT, env=env)
            return time.perf_counter() - start, children_cpu() - cpu

        run([], "warm")  # calibrates the forecast into the cache once
        plain, lab = [], []
        for k in range(rounds):
            plain.append(run([], f"plain{k}"))
            lab.append(run(["--properties"], f"lab{k}"))
    (wall_p, cpu_p), (wall_l, cpu_l) = min(plain), min(lab)
    ratio = wall_l / wall_p
    print(f"1. market banks_market, {len(POLICIES)} policies x {replications} replications "
          f"(best of {rounds}):")
    print(f"   without --properties {wall_p:.2f} s wall, {cpu_p:.2f} s CPU; with {wall_l:.2f} s wall, "
          f"{cpu_l:.2f} s CPU; ratio {ratio:.2f} wall, {cpu_l / cpu_p:.2f} CPU   "
          f"{'PASS' if ratio <= 3 else 'FAIL  <<<'} (target <= 3)")


def shapley_cost(repeats: int, cache: Path) -> None:
    """Part 2: exact Shapley values of 20 owners."""
    s = pinned(load(BANKS, ["data.owners=20"]))
    prepared = problem.prepare(s)
    forecast, _ = calibration.resolve(s, prepared.consortium, prepared.objective, cache)
    sellers = sellers_of(s, prepared)
    eps, everyone = np.full(20, 10.0), np.ones(20, bool)
    phi = pm.shapley(sellers, forecast, s.market, eps, everyone, seed=s.seed)
    t = best_of(repeats, lambda: pm.shapley(sellers, forecast, s.market, eps, everyone, seed=s.seed))
    codes = np.arange(1 << 20)
    masks = ((codes[:, None] >> np.arange(19, -1, -1)) & 1).astype(bool)
    reference = best_of(1, lambda: forecast.coalitions(eps, sellers.records, masks))
    grand = pm.coalition_values(sellers, forecast, s.market, eps, everyone[None, :])[0]
    print(f"2. exact Shapley values of 20 owners ({forecast.form} forecast, 1,048,576 coalitions): "
          f"{t:.2f} s (best of {repeats})   {'PASS' if t < 10 else 'FAIL  <<<'} (target < 10 s)")
    print(f"   reference: the forecast of the same coalitions as a (2^20, 20) mask, {reference:.2f} s; "
          f"sum of the values {phi.sum():.6f} = V(N) {grand:.6f} "
          f"(relative gap {abs(phi.sum() / grand - 1):.1e})")


def sensitivity(cache: Path) -> None:
    """Part 3: the property table on the forecast alone, c₂ scaled by 1/1.5, 1 and 1.5."""
    s = pinned(load(BANKS))
    prepared = problem.prepare(s)
    forecast, _ = calibration.resolve(s, prepared.consortium, prepared.objective, cache)
    sellers = sellers_of(s, prepared)
    print("3. banks_market's properties on the forecast with its noise multiplier c2 scaled (no training):")
    print(f"   {'c2 x':>5} {'policy':<20} {'owners':>6} {'psi fcst':>9} {'efficiency':>10} "
          f"{'lie gain>0':>10} {'lie max':>8} {'split4 max':>10} {'r(pay,Shap)':>11}")
    for scale in (1 / 1.5, 1.0, 1.5):
        f = replace(forecast, c2=forecast.c2 * scale)
        outcomes = [pm.settle(name, sellers, f, s.market, s.seed) for name in POLICIES]
        best, first_best = properties.references(sellers, f, s.market, outcomes)
        for o in outcomes:
            table = properties.evaluate(o, np.array([]), sellers, f, s.market, seed=s.seed, best=best,
                                        first_best=first_best)
            row = properties.policy_row(table, o)
            print(f"   {scale:>5.2f} {o.policy:<20} {row['participants']:>6} {o.psi_forecast:>9.4g} "
                  f"{row['efficiency']:>10.3f} {row['misreport_gain_share']:>10.2f} "
                  f"{row['misreport_gain_max']:>8.3g} {row['sybil4_gain_max']:>10.3g} "
                  f"{row['payment_shapley_correlation']:>11.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one round, one repeat")
    args = parser.parse_args()
    print(f"load average (1 min) at the start: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp)
        command_cost(10, 1 if args.quick else 3, cache)
        shapley_cost(1 if args.quick else 3, cache)
        sensitivity(cache)
    print(f"load average (1 min) at the end: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
