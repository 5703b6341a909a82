"""Sweep benchmark: the papers' grid on the process executor against the same grid run serially.

Run from the repository root:  python benchmarks/bench_sweep.py [--quick] [--workers N]

The grid is the shape of the papers' figures: lending_banks (3 banks, squared loss, T = 1,000
exchanges of Algorithm 1), 5 values of ε × 5 bank sizes n_i × 100 replications = 2,500 runs,
run through :func:`dpmarket.experiment.study.run_sweep` exactly as ``python -m dpmarket sweep``
runs it (data built in the workers, one saved file per replication, the tables at the end) on
the process executor with 2 workers, and serially as the reference.

On a shared machine the load changes during a run, so the two are interleaved: the grid is
cut into its 5 rows (one ε each, 500 runs), each row is run on both executors (alternating
which goes first) into fresh directories with every worker's data cache cold, and each
executor's time is the sum over rows. The two sweep.csv of every row must be byte-identical.
Target: the process executor under 120 s for the whole grid. Prints the load average before and
after. Prints figures and PASS/FAIL; always exits 0 (it is a report, not a test).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from dpmarket.experiment.study import Execution, make_plan, run_sweep
from dpmarket.experiment.task import clear_cache
from dpmarket.scenario.loading import load

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "scenarios" / "lending_banks.toml"
EPSILONS = ("1", "3", "10", "30", "100")
SIZES = "10000,25000,50000,100000,250000"
TARGET = 120.0


def timed_sweep(plan, out: Path, how: Execution) -> float:
    """Wall seconds of one sweep into ``out`` from a cold data cache."""
    clear_cache()  # serial runs in this process, and forked workers would inherit its cache
    start = time.perf_counter()
    run_sweep(plan, out, how)
    return time.perf_counter() - start


def load_text() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10 replications instead of 100")
    parser.add_argument("--workers", type=int, default=2, help="process executor workers (default 2)")
    args = parser.parse_args()
    replications = 10 if args.quick else 100
    base = load(SCENARIO, ["learner.iterations=1000", "output.plots=false"])
    runs = len(EPSILONS) * len(SIZES.split(",")) * replications
    print(f"grid: ε {','.join(EPSILONS)} x n_i {SIZES} x {replications} replications = {runs} runs "
          f"of T = {base.learner.iterations}, {base.data.owners} owners")
    print(f"load average at start: {load_text()} ({os.cpu_count()} cores)")
    totals, same = {"process": 0.0, "serial": 0.0}, True
    hows = {"process": Execution("process", args.workers), "serial": Execution("serial")}
    with tempfile.TemporaryDirectory() as tmp:
        for row, eps in enumerate(EPSILONS):
            plan = make_plan("sweep", base, [f"privacy.epsilon={eps}", f"data.records={SIZES}"],
                             replications, str(SCENARIO))
            order = ("process", "serial") if row % 2 == 0 else ("serial", "process")
            times = {name: timed_sweep(plan, Path(tmp) / f"{name}-{row}", hows[name]) for name in order}
            for name, seconds in times.items():
                totals[name] += seconds
            csvs = {(Path(tmp) / f"{name}-{row}" / "sweep.csv").read_bytes() for name in order}
            same = same and len(csvs) == 1
            print(f"  ε = {eps:>3}: process {times['process']:6.1f} s, serial {times['serial']:6.1f} s")
    parallel, serial = totals["process"], totals["serial"]
    print(f"load average at end:   {load_text()}")
    print(f"process x {args.workers}: {parallel:7.1f} s  ({1000 * parallel / runs:.1f} ms per run)")
    print(f"serial:      {serial:7.1f} s  ({1000 * serial / runs:.1f} ms per run)")
    print(f"speed-up:    {serial / parallel:7.2f} x")
    print(f"sweep.csv identical on both executors: {'yes' if same else 'NO  <<<'}")
    verdict = "PASS" if parallel < TARGET and same else "FAIL  <<<"
    scale = "" if not args.quick else " (quick: 10 replications; the target is for 100)"
    print(f"{verdict}: process executor {parallel:.1f} s vs target {TARGET:.0f} s{scale}")


if __name__ == "__main__":
    main()
