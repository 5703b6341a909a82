"""Where numba pays for its start-up: one logistic run end to end under each kernel, at growing T.

Run from the repository root:  python benchmarks/bench_kernel_choice.py [--rounds 3] [--iterations ...]

``DPMARKET_KERNEL=auto`` takes numba for a run that reads at least ``kernels.AUTO_READS`` record × feature
values (its answers and its ψ, :func:`dpmarket.runs.replications.record_reads`): below, numba's start-up
(importing it, loading its cached kernels) costs more than it saves. This script measures the break-even.

The run: the logistic case of ``bench_answers.py`` (card_fraud, 3 owners × 20,000 records, p = 11, the
papers' privacy: no clipping, T answers each; ψ at 200 points; no figures) at each T of ``--iterations``,
as ``python -m dpmarket run`` in a fresh process, once under ``DPMARKET_KERNEL=numpy`` and once under
``numba`` in every round (the order alternating between rounds; numba's cache filled by a first run that
is not counted). Each figure is the median over the rounds of the child's CPU time (user + system:
what other jobs on shared cores inflate least) and of its wall time. For each, a line
``time = a + b · reads`` is fitted to each kernel's medians (least squares); the break-even is where the
two lines cross, ``(a_numba − a_numpy) / (b_numpy − b_numba)`` reads, which AUTO_READS should be near.

Prints the load average at start and end, the table, the lines and break-evens (CPU and wall), and for each
T whether ``auto`` takes the kernel whose CPU time was less; always exits 0 (it is a report).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from dpmarket.data import build_consortium
from dpmarket.learning import kernels
from dpmarket.runs.replications import record_reads
from dpmarket.scenario.loading import load

ROOT = Path(__file__).resolve().parent.parent
FRAUD = ROOT / "scenarios" / "fraud_svm.toml"
LOGISTIC = ["model.loss=logistic", "data.records=20000", "learner.rho=auto", "output.metric_points=200",
            "privacy.preset=paper", "output.plots=false"]
ITERATIONS = (1000, 2000, 4000, 8000, 16000)


def reads_of(iterations: int) -> float:
    """Record × feature reads of the run at T = ``iterations`` (what ``auto`` weighs)."""
    scenario = load(str(FRAUD), overrides=[*LOGISTIC, f"learner.iterations={iterations}"])
    consortium = build_consortium(scenario)
    dim = consortium.owners[0].stats.A.shape[0]
    return record_reads(scenario, consortium.sizes, dim)


def timed_run(kernel: str, iterations: int, out: Path) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of the run in a fresh process under ``DPMARKET_KERNEL=kernel``."""
    settings = [arg for o in [*LOGISTIC, f"learner.iterations={iterations}"] for arg in ("--set", o)]
    command = [sys.executable, "-m", "dpmarket", "run", str(FRAUD), *settings, "--out", str(out), "--quiet"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(command, check=True, env={**os.environ, kernels.VARIABLE: kernel},
                   stdout=subprocess.DEVNULL, cwd=ROOT)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall


def fit(reads: list[float], seconds: list[float]) -> tuple[float, float]:
    """(a, b) of the least-squares line seconds = a + b · reads."""
    b, a = np.polyfit(np.asarray(reads), np.asarray(seconds), 1)
    return float(a), float(b)


def break_even(name: str, reads: list[float], seconds: dict[str, list[float]]) -> None:
    """Print each kernel's fitted line of ``name`` seconds against reads, and where they cross."""
    lines = {k: fit(reads, v) for k, v in seconds.items()}
    for k, (a, b) in lines.items():
        print(f"{name:>4} {k:>6}: {a:.3f} s + {b * 1e9:.3f} ns × reads")
    (a0, b0), (a1, b1) = lines["numpy"], lines["numba"]
    if b0 > b1:
        print(f"{name:>4} break-even: {(a1 - a0) / (b0 - b1):.3g} reads (numba's start-up {a1 - a0:.2f} s, "
              f"{(b0 - b1) * 1e9:.3f} ns saved per read); AUTO_READS = {kernels.AUTO_READS:.3g}")
    else:
        print(f"{name:>4}: numba saves nothing per read here: no break-even")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--iterations", type=lambda s: [int(v) for v in s.split(",")], default=ITERATIONS)
    args = parser.parse_args()
    if not kernels.available():
        print("numba is not installed: nothing to compare")
        return 0
    print(f"load average at start: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    reads = [reads_of(t) for t in args.iterations]
    times: dict[tuple[str, int], list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        timed_run("numba", args.iterations[0], Path(tmp) / "warm")  # fills numba's cache: not counted
        for r in range(args.rounds):
            order = ("numpy", "numba") if r % 2 == 0 else ("numba", "numpy")
            for t in args.iterations:
                for kernel in order:
                    out = Path(tmp) / f"{kernel}-{t}-{r}"
                    times.setdefault((kernel, t), []).append(timed_run(kernel, t, out))
    cpu = {k: statistics.median(c for c, _ in v) for k, v in times.items()}
    wall = {k: statistics.median(w for _, w in v) for k, v in times.items()}
    print(f"\n{'T':>7} {'reads':>10}  {'numpy CPU':>9} {'numba CPU':>9} {'ratio':>6}   {'numpy wall':>10} "
          f"{'numba wall':>10}  auto takes  faster (CPU)")
    for t, n in zip(args.iterations, reads, strict=True):
        takes = "numba" if n >= kernels.AUTO_READS else "numpy"
        faster = "numba" if cpu[("numba", t)] < cpu[("numpy", t)] else "numpy"
        print(f"{t:>7,} {n:>10.3g}  {cpu[('numpy', t)]:>8.2f}s {cpu[('numba', t)]:>8.2f}s "
              f"{cpu[('numba', t)] / cpu[('numpy', t)]:>6.3f}   {wall[('numpy', t)]:>9.2f}s "
              f"{wall[('numba', t)]:>9.2f}s  {takes:>10}  {faster}{'' if takes == faster else '   <<<'}")
    for name, figures in (("CPU", cpu), ("wall", wall)):
        break_even(name, reads, {k: [figures[(k, t)] for t in args.iterations] for k in ("numpy", "numba")})
    print(f"load average at end: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
