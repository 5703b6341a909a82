"""The training runs of a policy comparison: in this process or on forked workers, same numbers.

Each run is a pure function of (scenario, data, participants, their ε, run seed), so where it
runs changes only the speed: results come back in the order the runs were given. Workers are
forked with the data already built (no pickling of the owners' records; elsewhere than Linux they
receive a pickled copy), ignore Ctrl-C (the parent decides) and use one BLAS thread each, as the
experiment executors' workers do (dpmarket/experiment/executors.py).
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from concurrent.futures import ProcessPoolExecutor, as_completed

import numpy as np

from dpmarket.runs.inline import train
from dpmarket.runs.replications import batched
from dpmarket.system import processes
from dpmarket.system.progress import Progress
from dpmarket.system.progress import of as progress_of

Job = tuple[np.ndarray, np.ndarray, int]  # participants (indices), ε of every owner, run seed
_SHARED: tuple | None = None  # (scenario, consortium, objective) in a worker


def final_psi(scenario, consortium, objective, jobs: list[Job], workers: int = 1,
              *, progress: bool | Progress = False) -> list[float]:
    """ψ at the end of each run of ``jobs``, in their order, on ``workers`` processes (1: here);
    ``progress`` counts the runs."""
    shared = (scenario, consortium, objective)
    with progress_of(progress).phase("training the policies' runs", total=len(jobs), unit="run") as bar:
        seeds = len({seed for _, _, seed in jobs})  # every policy's runs share the seeds
        if batched(scenario, seeds):  # each policy's replications replayed together, here
            return _replayed(shared, jobs, bar)
        if workers <= 1 or len(jobs) <= 1:
            out = []
            for job in jobs:
                out.append(_train(shared, job))
                bar.update()
            return out
        return _on_pool(shared, jobs, workers, bar)


def _replayed(shared: tuple, jobs: list[Job], bar) -> list[float]:
    """The runs of ``jobs`` through schedule → replay → measure: consecutive jobs of one deal (members
    and ε) form a cell whose seeds are replayed together; ψ comes back in the jobs' order."""
    from dpmarket.runs.replications import final_psis

    scenario, consortium, objective = shared
    out: list[float] = []
    start = 0
    while start < len(jobs):
        members, epsilons, _ = jobs[start]
        end = start + 1
        while end < len(jobs) and _same_deal(jobs[end], jobs[start]):
            end += 1
        seeds = [seed for _, _, seed in jobs[start:end]]
        out.extend(final_psis(scenario, seeds, consortium, objective, members, epsilons=epsilons))
        bar.update(end - start)
        start = end
    return out


def _same_deal(a: Job, b: Job) -> bool:
    """Whether two jobs train the same participants at the same budgets."""
    return np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])


def _train(shared: tuple, job: Job) -> float:

    scenario, consortium, objective = shared
    members, epsilons, seed = job
    run = train(scenario.model_copy(update={"seed": seed}), consortium, objective, members, epsilons)
    return float(run.training.metrics.psi[-1])


def _on_pool(shared: tuple, jobs: list[Job], workers: int, bar) -> list[float]:
    """The runs on a process pool; on Ctrl-C queued runs are cancelled and nothing is returned."""
    context = multiprocessing.get_context("fork" if sys.platform.startswith("linux") else None)
    pool = ProcessPoolExecutor(max_workers=min(workers, len(jobs)), mp_context=context,
                               initializer=_start_worker, initargs=(shared, os.getpid()))
    try:
        futures = {pool.submit(_run_job, job): i for i, job in enumerate(jobs)}
        out: list[float] = [float("nan")] * len(jobs)
        for future in as_completed(futures):
            out[futures[future]] = future.result()
            bar.update()
        return out
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _start_worker(shared: tuple, parent: int) -> None:
    """A worker keeps the data, leaves Ctrl-C to the parent, dies with it (even a killed one:
    :func:`dpmarket.system.processes.init_helper`) and runs BLAS on one thread."""
    global _SHARED
    from threadpoolctl import threadpool_limits

    processes.init_helper(parent)
    threadpool_limits(1)
    _SHARED = shared


def _run_job(job: Job) -> float:
    return _train(_SHARED, job)
