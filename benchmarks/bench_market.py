"""Market benchmark: what the market adds to a run, and what a policy comparison costs.

Run from the repository root:  python benchmarks/bench_market.py [--quick]

1. Settling each policy on ny_hospitals' 86 hospitals (sellers built, the uncalibrated law), against
   one training run of the same scenario measured in the same process (``inline.train``, T = 1,000
   in its request-mode network). Target: every policy < 0.25 × one training run, so the market
   stage never dominates a run or a comparison.
2. The README's comparison (banks_market, 7 policies × 5 replications, forecast cached) as a
   subprocess, against 35 in-process training runs of the same scenario (the work it cannot
   avoid). Target: < 2 × the training runs, and < 60 s.
Prints figures and PASS/FAIL; always exits 0 (it is a report, not a test).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from timing import best_of

from dpmarket.data import problem
from dpmarket.markets.policies import settle
from dpmarket.markets.stage import sellers_of
from dpmarket.runs import inline
from dpmarket.runs import pilots as calibration
from dpmarket.scenario.loading import load
from dpmarket.scenario.schema import POLICIES

ROOT = Path(__file__).resolve().parents[1]
ALL = ",".join(POLICIES)


def settle_costs(repeats: int) -> None:
    s = load(ROOT / "scenarios/ny_hospitals.toml", ["market.offer_epsilon=10", "market.budget=800",
                                                     "market.price_per_record=1e-5"])
    prepared = problem.prepare(s)
    consortium, objective = prepared.consortium, prepared.objective
    reference = best_of(repeats, lambda: inline.train(s, consortium, objective))
    sellers = sellers_of(s, prepared)
    forecast, _ = calibration.resolve(s, consortium, objective)  # market.forecast = "law": no pilots
    print(f"1. one training run of ny_hospitals (reference): {reference * 1e3:.0f} ms "
          f"(forecast: {forecast.form})")
    for name in POLICIES:
        t = best_of(repeats, lambda name=name: settle(name, sellers, forecast, s.market, s.seed))
        verdict = "PASS" if t < 0.25 * reference else "FAIL"
        print(f"   {name:<20} {t * 1e3:8.1f} ms  = {t / reference:6.3f} x training   {verdict}")


def comparison_cost(replications: int) -> None:
    path = ROOT / "scenarios/banks_market.toml"
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "dpmarket", "market", str(path), "--policies", ALL,
               "--replications", str(replications), "--out", str(Path(tmp) / "cmp")]
        subprocess.run(cmd, check=True, capture_output=True, cwd=ROOT)  # warm: forecast cached
        start = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True, cwd=ROOT)
        wall = time.perf_counter() - start
    s = load(path)
    prepared = problem.prepare(s)
    consortium, objective = prepared.consortium, prepared.objective
    N = len(consortium.owners)
    runs = len(POLICIES) * replications
    start = time.perf_counter()
    for j in range(runs):
        inline.train(s.model_copy(update={"seed": j}), consortium, objective, np.arange(N), np.full(N, 10.0))
    reference = time.perf_counter() - start
    verdict = "PASS" if wall < 2 * reference + 2 and wall < 60 else "FAIL"
    print(f"2. market command, {len(POLICIES)} policies x {replications} replications: {wall:.2f} s; "
          f"{runs} bare training runs: {reference:.2f} s; ratio {wall / reference:.2f}   {verdict}")
    print("   (the command also starts Python, imports matplotlib, generates the data and draws 2 figures)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats and replications")
    args = parser.parse_args()
    settle_costs(2 if args.quick else 5)
    comparison_cost(1 if args.quick else 5)
    print(f"load average (1 min) at the end: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
