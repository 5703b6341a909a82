"""Core benchmark: the learner's cost per update against a bare numpy loop, and ny_hospitals end to end.

Run from the repository root:  python benchmarks/bench_core.py [--quick]

1. Cost per update. The package's exchange path (Training.exchange: query point, the owner's
   answer from sufficient statistics, Laplace noise, the exact privacy ledger, Algorithm 1's
   update, event emission, ψ at the recorded iterations) against a bare numpy loop of
   Algorithm 1 written below, on the same 86 hospitals, the same owner sequence and the same
   noise scales. Both are first checked to compute the same θ_L from the same noise.
   Target: package ≤ 1.5 × bare loop.
2. End to end: `python -m dpmarket run scenarios/ny_hospitals.toml` as a subprocess (interpreter,
   imports, 1.7 M records generated, T = 1,000 exchanges, θ*, own-data models, every file and
   figure), in the scenario's request-mode network and in the ideal network. Target: < 2 s.
   Reference measured in the same run: a bare `python -c "import numpy, matplotlib.figure"`.
Prints figures and PASS/FAIL; always exits 0 (it is a report, not a test).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from dpmarket.data import build_consortium
from dpmarket.events import EventLog
from dpmarket.models import Objective, make_loss
from dpmarket.run import build_owners
from dpmarket.scenario import load
from dpmarket.training import Training, make_learner, record_points

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "scenarios" / "ny_hospitals.toml"


def setup(updates: int):
    """ny_hospitals' owners, in the ideal network, with T = ``updates`` so nobody refuses."""
    scenario = load(SCENARIO, [f"learner.iterations={updates}", "network.mode=ideal",
                               "network.transmission_time=0.0", "network.latency=0.0",
                               "network.loss_probability=0.0", "network.dropout={}"])
    consortium = build_consortium(scenario)
    m = scenario.model
    objective = Objective(make_loss(m.loss), consortium.owners, m.regularization, m.theta_max)
    return scenario, consortium, objective


def package_run(scenario, consortium, objective, sequence):
    """Time Training.exchange over ``sequence``; returns (seconds, final θ_L)."""
    owners = build_owners(scenario, consortium, objective)
    lr, m = scenario.learner, scenario.model
    learner = make_learner("async", consortium.sizes, objective.p, lr.iterations, lr.rho,
                           m.regularization, m.theta_max, lr.theta_l_step, lr.weighting)
    training = Training(learner, owners, objective, EventLog(None),
                        record_points(lr.iterations, scenario.output.metric_points))
    start = time.perf_counter()
    for k, i in enumerate(sequence):
        training.exchange(int(i), float(k))
    return time.perf_counter() - start, learner.theta_L.copy()


def bare_run(scenario, consortium, objective, sequence, noise=None):
    """Algorithm 1 as a plain numpy loop on the same statistics; ``noise(i)`` gives w, else numpy."""
    owners = build_owners(scenario, consortium, objective)
    A = [o.data.stats.A for o in owners]
    b = [o.data.stats.b for o in owners]
    n_i = consortium.sizes.astype(float)
    scale = [o.scale for o in owners]
    N, p, T, rho = len(owners), objective.p, scenario.learner.iterations, scenario.learner.rho
    lam, tmax = objective.lam, objective.theta_max
    a_i, a_L, share = N * rho / (T * T * 2 * lam), (N - 1) * rho / (N * T * T * 2 * lam), n_i / n_i.sum()
    theta_L, theta = np.zeros(p), np.zeros((N, p))
    gen = np.random.default_rng(0)
    start = time.perf_counter()
    for i in sequence:
        bar = 0.5 * (theta_L + theta[i])
        q = (2.0 / n_i[i]) * (A[i] @ bar - b[i])
        q += noise(i) if noise else gen.laplace(0.0, scale[i], p)
        g = 2 * lam * bar
        theta[i] = np.clip(bar - a_i * (g / (2 * N) + share[i] * q), -tmax, tmax)
        theta_L = np.clip(bar - a_L * g, -tmax, tmax)
    return time.perf_counter() - start, theta_L


def per_update(updates: int, repeats: int) -> dict:
    scenario, consortium, objective = setup(updates)
    sequence = np.random.default_rng(1).integers(0, len(consortium.owners), updates)
    check = build_owners(scenario, consortium, objective)  # the same noise streams as the package
    _, ours = package_run(scenario, consortium, objective, sequence[:2000])
    _, theirs = bare_run(scenario, consortium, objective, sequence[:2000], lambda i: check[i].noise.draw())
    agree = bool(np.allclose(ours, theirs, rtol=1e-10, atol=1e-12))
    pkg, bare = [], []
    for _ in range(repeats):  # interleaved, so a slow spell of the machine hits both sides
        pkg.append(package_run(scenario, consortium, objective, sequence)[0])
        bare.append(bare_run(scenario, consortium, objective, sequence)[0])
    pkg, bare = min(pkg), min(bare)
    return {"updates": updates, "package_us": 1e6 * pkg / updates, "bare_us": 1e6 * bare / updates,
            "ratio": pkg / bare, "agree": agree}


def wall(cmd: list[str], repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True, cwd=ROOT)
        times.append(time.perf_counter() - start)
    return times


def end_to_end(repeats: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        run = [sys.executable, "-m", "dpmarket", "run", str(SCENARIO), "--out", f"{tmp}/run"]
        ideal = run + ["--set", "network.mode=ideal", "--set", "network.transmission_time=0.0",
                       "--set", "network.latency=0.0", "--set", "network.loss_probability=0.0",
                       "--set", "network.dropout={}"]
        wall(run, 1)  # warm the file cache
        out = {"request": wall(run, repeats), "ideal": wall(ideal, repeats),
               "imports": wall([sys.executable, "-c", "import numpy, matplotlib.figure"], repeats)}
    scenario = load(SCENARIO)
    start = time.perf_counter()
    build_consortium(scenario)
    out["data_generation"] = [time.perf_counter() - start]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer updates and repeats")
    args = parser.parse_args()
    updates, repeats = (5_000, 2) if args.quick else (20_000, 9)
    cost = per_update(updates, repeats)
    e2e = end_to_end(2 if args.quick else 5)
    print(f"learner cost per update ({cost['updates']:,} updates, 86 owners, p = 11, best of {repeats})")
    print(f"  package exchange path  {cost['package_us']:8.2f} µs")
    print(f"  bare numpy loop        {cost['bare_us']:8.2f} µs")
    verdict = "PASS" if cost["ratio"] <= 1.5 else "FAIL"
    print(f"  ratio                  {cost['ratio']:8.2f} x   target <= 1.5 x   {verdict}")
    print(f"  same θ_L from the same noise: {'yes' if cost['agree'] else 'NO'}")
    print("end to end: python -m dpmarket run scenarios/ny_hospitals.toml (subprocess, seconds)")
    for key in ("request", "ideal", "imports", "data_generation"):
        ts = e2e[key]
        print(f"  {key:16s} min {min(ts):6.3f}  median {statistics.median(ts):6.3f}")
    for key in ("request", "ideal"):
        verdict = "PASS" if statistics.median(e2e[key]) < 2.0 else "FAIL"
        print(f"  {key} network: median {statistics.median(e2e[key]):.2f} s, target < 2 s   {verdict}")


if __name__ == "__main__":
    main()
