"""Sweep benchmark: the papers' grid on the process executor against the same grid run serially.

Run from the repository root:  python benchmarks/bench_sweep.py [--quick] [--workers N]

The grid is the shape of the papers' figures: lending_banks (3 banks, squared loss, T = 1,000
exchanges of Algorithm 1), 5 values of ε × 5 bank sizes n_i × 100 replications = 2,500 runs.
It is run twice through :func:`dpmarket.experiment.study.run_sweep`, exactly as ``python -m
dpmarket sweep`` runs it (one saved file per replication, the aggregate tables at the end):
first on the process executor with 2 workers, then serially as the reference, each into a fresh
directory. The two sweep.csv files must be byte-identical (results do not depend on the
executor). Target: the process executor under 120 s. Prints the load average before and after:
on a shared 2-core machine other jobs slow both runs and shrink the speed-up.
Prints figures and PASS/FAIL; always exits 0 (it is a report, not a test).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from dpmarket.experiment.study import Execution, make_plan, run_sweep
from dpmarket.scenario import load

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "scenarios" / "lending_banks.toml"
EPSILONS = "1,3,10,30,100"
SIZES = "10000,25000,50000,100000,250000"
TARGET = 120.0


def timed_sweep(plan, out: Path, how: Execution) -> float:
    """Wall seconds of one sweep into ``out`` (data builds, runs, saved files, tables)."""
    start = time.perf_counter()
    run_sweep(plan, out, how)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10 replications instead of 100")
    parser.add_argument("--workers", type=int, default=2, help="process executor workers (default 2)")
    args = parser.parse_args()
    replications = 10 if args.quick else 100
    base = load(SCENARIO, ["learner.iterations=1000", "output.plots=false"])
    grid = [f"privacy.epsilon={EPSILONS}", f"data.records={SIZES}"]
    plan = make_plan("sweep", base, grid, replications, str(SCENARIO))
    runs = len(plan.cells) * replications
    print(f"grid: {len(plan.cells)} cells (ε {EPSILONS} x n_i {SIZES}) x {replications} replications "
          f"= {runs} runs of T = {base.learner.iterations}, {base.data.owners} owners")
    print(f"load average at start: {' '.join(f'{v:.2f}' for v in os.getloadavg())} "
          f"({os.cpu_count()} cores)")
    with tempfile.TemporaryDirectory() as tmp:
        parallel = timed_sweep(plan, Path(tmp) / "process", Execution("process", args.workers))
        serial = timed_sweep(plan, Path(tmp) / "serial", Execution("serial"))
        same = (Path(tmp) / "process" / "sweep.csv").read_bytes() == \
            (Path(tmp) / "serial" / "sweep.csv").read_bytes()
    print(f"load average at end:   {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    print(f"process x {args.workers}: {parallel:7.1f} s  ({1000 * parallel / runs:.1f} ms per run)")
    print(f"serial:      {serial:7.1f} s  ({1000 * serial / runs:.1f} ms per run)")
    print(f"speed-up:    {serial / parallel:7.2f} x")
    print(f"sweep.csv identical on both executors: {'yes' if same else 'NO  <<<'}")
    verdict = "PASS" if parallel < TARGET and same else "FAIL  <<<"
    scale = "" if not args.quick else " (quick: 10 replications; the target is for 100)"
    print(f"{verdict}: process executor {parallel:.1f} s vs target {TARGET:.0f} s{scale}")


if __name__ == "__main__":
    main()
