"""Timing helpers shared by the benchmark scripts (run as ``python benchmarks/bench_x.py``)."""

from __future__ import annotations

import time
from collections.abc import Callable


def best_of(repeats: int, work: Callable[[], object]) -> float:
    """The fastest of ``repeats`` wall timings of ``work()``: the one least disturbed by other load."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return min(times)
