"""(ε, δ) accounting benchmark: what calibrating and composing with dp-accounting adds to a run.

Run from the repository root:  python benchmarks/bench_accounting.py [--quick]

1. Import: a fresh interpreter importing the CLI, with and without ``dp_accounting`` (which loads
   scipy.stats, scipy.signal and scipy.optimize), and with only the RDP or the PLD accountant's
   module (the package's ``__init__`` imports everything first, so no cheaper), best of 5
   interleaved; and a check that a basic Laplace run of ny_hospitals never imports it.
2. Run time: ny_hospitals (86 hospitals, request-mode network, posted-price market with the law
   forecast, capped split) under basic Laplace (the reference) and under RDP and PLD with Laplace
   and Gaussian answers at δ = 10⁻⁶, in-process with imports warm and every accounting cache
   cleared before each run (each run calibrates afresh, as a new process would). The time spent in
   dpmarket/privacy/accounting.py (calibrations, ε curves, the forecast's tables) is measured directly by
   wrapping its entry points, and so is the difference of the runs' wall times; both are compared
   with the reference run and with the CLI's end-to-end time of the basic run (a subprocess).
   Target: accounting < 10 % of ny_hospitals' run time (import excluded: it is item 1), in wall
   time and in CPU time (user + system, which two busy shared cores inflate least).
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
from pathlib import Path

from dpmarket.privacy import accounting
from dpmarket.runs import run
from dpmarket.scenario.loading import load

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios/ny_hospitals.toml"
CASES = [("laplace", "rdp"), ("laplace", "pld"), ("gaussian", "basic"), ("gaussian", "rdp"),
         ("gaussian", "pld")]


def fresh_python(code: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
    return time.perf_counter() - start


SUBMODULES = ("dp_accounting.rdp.rdp_privacy_accountant", "dp_accounting.pld.pld_privacy_accountant")


def import_cost(repeats: int) -> float:
    """Best-of wall times of importing the CLI alone, with dp_accounting, and with only the accountant
    submodules dpmarket uses (the package's __init__ runs first either way); returns the difference."""
    plain, with_dp, parts = [], [], {name: [] for name in SUBMODULES}
    for _ in range(repeats):
        plain.append(fresh_python("import dpmarket.cli"))
        with_dp.append(fresh_python("import dpmarket.cli, dp_accounting"))
        for name in SUBMODULES:
            parts[name].append(fresh_python(f"import dpmarket.cli, {name}"))
    extra = min(with_dp) - min(plain)
    print(f"1. import dpmarket.cli: {min(plain):.2f} s; with dp_accounting: {min(with_dp):.2f} s "
          f"(+{extra:.2f} s, paid only by runs with Gaussian answers or an RDP/PLD accountant)")
    for name, times in parts.items():
        print(f"   with only {name}: {min(times):.2f} s (+{min(times) - min(plain):.2f} s)")
    code = ("import sys; from dpmarket.scenario import load; from dpmarket.runs.run import execute; "
            f"execute(load({str(SCENARIO)!r})); print('dp_accounting' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, capture_output=True, text=True)
    loaded = out.stdout.strip() == "True"
    print(f"   a basic Laplace run of ny_hospitals imports dp_accounting: {loaded}   "
          f"{'FAIL' if loaded else 'PASS'}")
    return extra


class Stopwatch:
    """Wraps accounting's entry points and adds up the time spent in them (outermost calls only)."""

    NAMES = ("noise_multiplier", "epsilon_curve", "multipliers")

    def __init__(self) -> None:
        self.total, self.cpu, self.depth, self.saved = 0.0, 0.0, 0, {}

    def __enter__(self) -> Stopwatch:
        for name in self.NAMES:
            self.saved[name] = getattr(accounting, name)
            setattr(accounting, name, self._timed(self.saved[name]))
        original = accounting.EpsilonCurve.after
        self.saved["after"] = original
        accounting.EpsilonCurve.after = self._timed(original)
        return self

    def __exit__(self, *exc) -> None:
        accounting.EpsilonCurve.after = self.saved.pop("after")
        for name, fn in self.saved.items():
            setattr(accounting, name, fn)

    def _timed(self, fn):
        def timed(*args, **kwargs):
            self.depth += 1
            start, cpu = time.perf_counter(), time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self.depth -= 1
                if self.depth == 0:
                    self.total += time.perf_counter() - start
                    self.cpu += time.process_time() - cpu
        return timed


def clear_caches() -> None:
    """Forget every calibration, ε curve, table and accountant evaluation (a new process's state)."""
    for name in ("calibration", "basic_gaussian", "_tight_cached", "epsilon_curve", "multiplier_table"):
        getattr(accounting, name).cache_clear()


def one_run(scenario) -> tuple[float, float, float]:
    """(wall time of run.execute, wall and CPU time inside accounting) with cold accounting caches."""
    clear_caches()
    with Stopwatch() as watch:
        start = time.perf_counter()
        run.execute(scenario)
        wall = time.perf_counter() - start
    return wall, watch.total, watch.cpu


def cli_time(repeats: int) -> tuple[float, float]:
    """Best-of wall and CPU (user + system, every thread) times of ``dpmarket run`` of the basic case:
    CPU time is what two busy shared cores inflate least."""
    times, cpus = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for j in range(repeats):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            subprocess.run([sys.executable, "-m", "dpmarket", "run", str(SCENARIO), "--out",
                            str(Path(tmp) / f"r{j}")], check=True, capture_output=True, cwd=ROOT)
            times.append(time.perf_counter() - start)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return min(times), min(cpus)


def run_cost(repeats: int) -> None:
    import dp_accounting  # noqa: F401  warm: the import is item 1, not part of the run's work

    basic = load(SCENARIO)
    scenarios = {case: load(SCENARIO, [f"privacy.mechanism={case[0]}", f"privacy.accountant={case[1]}",
                                       "privacy.delta=1e-6"]) for case in CASES}
    cli, cli_cpu = cli_time(repeats)
    run.execute(basic)  # warm: the public proxy's summary is cached per dataset, as in any second run
    scenarios[("laplace", "basic")] = basic
    order = [("laplace", "basic"), *CASES]
    walls = {case: [] for case in order}
    inside = {case: [] for case in order}
    cpu = {case: [] for case in order}
    for r in range(repeats):  # interleaved, the order rotated, so that other load weighs on every case
        for case in order[r % len(order):] + order[:r % len(order)]:
            wall, spent, used = one_run(scenarios[case])
            walls[case].append(wall)
            inside[case].append(spent)
            cpu[case].append(used)
    reference = min(walls[("laplace", "basic")])
    print(f"2. ny_hospitals, basic Laplace: run.execute {reference:.2f} s; the CLI end to end {cli:.2f} s, "
          f"{cli_cpu:.2f} s CPU (best of {repeats})")
    print(f"   {'answers, accountant':<22} {'execute':>8} {'in accounting':>14} {'/ execute':>10} "
          f"{'/ CLI run':>10} {'wall difference':>16} {'CPU in acc.':>12} {'/ CLI CPU':>10}")
    for case in CASES:
        spent, wall, used = min(inside[case]), min(walls[case]), min(cpu[case])
        verdict = "PASS" if spent < 0.1 * cli and used < 0.1 * cli_cpu else "FAIL"
        print(f"   {case[0] + ', ' + case[1]:<22} {wall:7.2f}s {spent:13.3f}s {spent / reference:9.1%} "
              f"{spent / cli:9.1%} {wall - reference:+15.2f}s {used:11.3f}s {used / cli_cpu:9.1%}"
              f"   {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    args = parser.parse_args()
    print(f"load average (1 min) at the start: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    import_cost(2 if args.quick else 5)
    run_cost(1 if args.quick else 3)
    print(f"load average (1 min) at the end: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
