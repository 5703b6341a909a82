"""Runaway-schedule guard: simulated time per wall second while every owner is offline.

Run from the repository root:  python benchmarks/bench_offline.py [--quick]

The case of issue 24: ny_hospitals cut to 4 owners, each allowed 3 answers (``privacy.split =
"capped"``, ``privacy.cap = 3``), T = 100,000, and owner 0 offline from 0 to L by an outage window
on top of the scenario's exponential dropout periods (20 on, 2 off). The other three spend their
budgets within a few time units; from then until L no owner can answer. The engine must sleep
through that: its clocks stop, and owner 0's periods pause under the outage
(:mod:`dpmarket.schedule.sim.availability`), so a run costs the same whatever L.

Measured in-process (``run.execute``, no files), best of 5, interleaved, for L = 10³ … 10¹²: the
wall time of the run and the simulated time per wall second while every owner is offline,
L / (t(L) − t(10³)), the difference taken against the run with the shortest outage (a lower bound
when the difference is within the timer's noise). Reference in the same run: the engine before the
fix (periods alternating through the outage, emulated by making the window's pin a plain hold) at
L = 10⁵, whose rate is what the 148 s of issue 24 came from. Target, at the longest outage: ≥ 10⁹
simulated per wall second (the issue's L = 10⁹ within a second). Prints PASS/FAIL; always exits 0.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from dpmarket.runs.run import execute
from dpmarket.scenario.loading import load
from dpmarket.schedule.sim import availability

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "scenarios" / "ny_hospitals.toml"
TARGET = 1e9  # simulated time units per wall second while every owner is offline


def scenario(outage_end: float):
    return load(str(SCENARIO), ["data.owners=4", 'privacy.split="capped"', "privacy.cap=3",
                                f"owners=[{{outages=[{{start=0.0, end={outage_end!r}}}]}}]",
                                "learner.iterations=100000", "output.plots=false"])


def timed(outage_end: float) -> tuple[float, float]:
    """(wall seconds of one run, simulated time it reached)."""
    s = scenario(outage_end)
    start = time.perf_counter()
    result = execute(s, None)
    return time.perf_counter() - start, float(result.training.time)


def before_fix(outage_end: float) -> float:
    """Wall seconds of the run with the periods alternating through the outage (the pin a plain hold)."""
    pin, unpin = availability.Availability.pin, availability.Availability.unpin
    availability.Availability.pin = availability.Availability.hold
    availability.Availability.unpin = availability.Availability.release
    try:
        return timed(outage_end)[0]
    finally:
        availability.Availability.pin, availability.Availability.unpin = pin, unpin


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="two repeats, fewer lengths")
    args = parser.parse_args()
    repeats = 2 if args.quick else 5
    lengths = [1e3, 1e9] if args.quick else [1e3, 1e6, 1e9, 1e12]
    print(f"load average at start: {os.getloadavg()[0]:.2f} (2 cores: figures are noisy above ~1)")
    timed(1e3)  # warm the imports and the data caches
    walls: dict[float, list[float]] = {L: [] for L in lengths}
    reached: dict[float, float] = {}
    for _ in range(repeats):
        for L in lengths:
            wall, reached[L] = timed(L)
            walls[L].append(wall)
    best = {L: min(w) for L, w in walls.items()}
    noise = max(max(w) - min(w) for w in walls.values())
    old = min(before_fix(1e5) for _ in range(max(1, repeats // 2)))
    old_rate = (1e5 - 1e3) / max(old - best[1e3], 1e-9)
    print(f"\n{'outage L':>10} {'run wall (best)':>16} {'simulated to':>13} "
          f"{'simulated / wall s offline':>28}")
    shortest = lengths[0]
    print(f"{shortest:>10.0e} {best[shortest]:>14.3f} s {reached[shortest]:>13.4g} "
          f"{'(reference length)':>28}")
    judged = 0.0  # the rate at the longest outage: what the target is about
    for L in lengths[1:]:
        extra = best[L] - best[shortest]
        judged = L / max(extra, noise, 1e-9)
        shown = f">= {judged:.3g} (within noise {noise * 1e3:.1f} ms)" if extra <= noise else f"{judged:.3g}"
        print(f"{L:>10.0e} {best[L]:>14.3f} s {reached[L]:>13.4g} {shown:>28}")
    print(f"\nreference: periods alternating through the outage (before the fix), L = 1e5: "
          f"{old:.3f} s, {old_rate:.3g} simulated per wall second -> L = 1e9 would take "
          f"{1e9 / old_rate:.0f} s")
    verdict = "PASS" if judged >= TARGET else "FAIL  <<<"
    print(f"\nsimulated time per wall second while every owner is offline (L = {lengths[-1]:.0e}): "
          f">= {judged:.3g} (target >= {TARGET:.0e})  {verdict}")


if __name__ == "__main__":
    main()
