"""Forecast benchmark: how close the market's forecast comes to the simulated ψ, and what calibrating costs.

Run from the repository root:  python benchmarks/bench_forecast.py [--quick]

1. The README's comparison (scenarios/banks_market.toml: ten banks, all seven policies, 10
   replications on common random numbers) through ``dpmarket.experiment.compare``, the ``market``
   command's engine, with a fresh forecast cache: the law's multipliers are fitted to pilots on the
   public twin first. Per policy: forecast ψ̂, simulated mean ψ (and its standard error), their
   ratio, and the verdict against the target ×1.5 (goal ×1.25). For reference, the ratio of the
   uncalibrated law (``market.forecast = "law"``) on the same coalitions and budgets.
2. The time of that calibration (60 pilot runs and the fit) against one training run of all ten
   banks at ε = 10, measured in the same process (best of 5).
Prints figures and PASS/FAIL; always exits 0 (it is a report, not a test).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
from timing import best_of

from dpmarket.data import problem
from dpmarket.experiment import compare
from dpmarket.markets.law import LawForecast
from dpmarket.runs import inline
from dpmarket.runs import pilots as calibration
from dpmarket.scenario.loading import load
from dpmarket.scenario.schema import POLICIES

ROOT = Path(__file__).resolve().parents[1]
TARGET, GOAL = 1.5, 1.25


def verdict(ratio: float) -> str:
    """PASS within ×1.5 (and 'goal' within ×1.25), FAIL beyond."""
    worst = max(ratio, 1 / ratio)
    return "PASS (goal)" if worst <= GOAL else "PASS" if worst <= TARGET else "FAIL  <<<"


def accuracy(replications: int, cache: Path) -> tuple[compare.Comparison, float]:
    """The comparison (calibrating into ``cache``) and how long the calibration alone took."""
    scenario = load(ROOT / "scenarios" / "banks_market.toml")
    seed = scenario.seed if scenario.data.seed is None else scenario.data.seed  # as compare() pins it
    base = scenario.model_copy(update={"data": scenario.data.model_copy(update={"seed": seed})})
    prepared = problem.prepare(base)
    start = time.perf_counter()
    calibration.resolve(base, prepared.consortium, prepared.objective, cache)
    calibrate = time.perf_counter() - start
    return compare.compare(scenario, list(POLICIES), replications, cache), calibrate


def report(c: compare.Comparison, prepared: problem.Prepared, cache: Path) -> None:
    """The per-policy table of part 1."""
    forecast, source = calibration.resolve(c.scenario, prepared.consortium, prepared.objective, cache)
    plain = LawForecast(forecast.inputs)  # the same law with multipliers 1 and 1
    sizes = prepared.consortium.sizes
    print(f"1. banks_market, {len(POLICIES)} policies x {len(c.seeds)} replications; forecast {source}")
    print(f"   multipliers c0 = {forecast.c0:.3f} (noise-free terms), c2 = {forecast.c2:.3f} (noise); "
          f"fit RMS relative error {forecast.rms_relative_error:.3f} over {forecast.points} pilot points")
    for row in forecast.by_size:
        print(f"     {row['members']:>3} banks: RMS relative error {row['rms_relative_error']:.3f} "
              f"over {row['points']} points")
    print(f"   {'policy':<20} {'banks':>5} {'forecast':>9} {'simulated':>10} {'se':>8} {'sim/fcst':>8} "
          f"{'law=1,1':>8}  verdict (x{TARGET:g}, goal x{GOAL:g})")
    for r in c.results:
        o, psi = r.outcome, r.psi
        mean, se = float(psi.mean()), float(psi.std(ddof=1) / np.sqrt(len(psi)))
        ratio = mean / o.psi_forecast
        uncalibrated = mean / plain.coalitions(o.epsilon, sizes, o.participates)[0]
        print(f"   {o.policy:<20} {int(o.participates.sum()):>5} {o.psi_forecast:>9.4g} {mean:>10.4g} "
              f"{se:>8.2g} {ratio:>8.3f} {uncalibrated:>8.3f}  {verdict(ratio)}")


def costs(c: compare.Comparison, prepared: problem.Prepared, calibrate: float, repeats: int) -> None:
    """Part 2: the calibration against one training run of all ten banks."""
    N = len(prepared.consortium.owners)
    reference = best_of(repeats, lambda: inline.train(c.scenario, prepared.consortium, prepared.objective,
                                                   np.arange(N), np.full(N, 10.0)))
    pilots = c.scenario.market.pilots
    count = pilots.levels * pilots.subsets * pilots.replications
    print(f"2. calibration ({count} pilot runs on the twin, the fit): {calibrate:.2f} s; one training run "
          f"(10 banks, reference): {reference * 1e3:.0f} ms; ratio {calibrate / reference:.1f} "
          f"(about {calibrate / reference / count:.2f} training runs per pilot, twin included)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 replications instead of 10")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp)
        c, calibrate = accuracy(3 if args.quick else 10, cache)
        prepared = problem.prepare(c.scenario)
        report(c, prepared, cache)
        costs(c, prepared, calibrate, 2 if args.quick else 5)
    print(f"load average (1 min) at the end: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
