"""Replicated runs and sweeps, end to end: plan → tasks on an executor → saved records → tables.

A :class:`Plan` is everything that defines the results (base scenario, grid cells, number of
replications, their seeds); the executor and worker count only change the speed. Replication r
of every cell uses the r-th seed of :func:`dpmarket.rng.replication_seeds` (run seed, R): the
cells are compared on common random numbers, and adding replications later reuses the first
ones (the r-th seed does not depend on R).
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from dpmarket import rng
from dpmarket.errors import _MISSING, ScenarioError
from dpmarket.experiment import publish, tables
from dpmarket.experiment.executors import default_workers, run_tasks
from dpmarket.experiment.grid import Axis, Cell, check_cells, parse_grid, resolve_cells
from dpmarket.experiment.store import Store, write_atomic, write_text_atomic
from dpmarket.experiment.task import Task
from dpmarket.output.results import _write_csv
from dpmarket.output.summary import REPLICATIONS_ORACLE, SWEEP_ORACLE, oracle_statement
from dpmarket.privacy.cohort import check_budgets
from dpmarket.runs.replications import replayable
from dpmarket.scenario.schema import Scenario
from dpmarket.system import counts, files, reproducibility
from dpmarket.system.progress import of as progress_of

MAX_CHUNK = 8  # replications per task: small enough that Ctrl-C waits little, big enough to amortise
BATCH_UPDATES = 20_000_000  # replication-updates per replayed task: a few seconds, so Ctrl-C waits little


@dataclass(frozen=True)
class Plan:
    """What an experiment computes: kind, base scenario, grid axes and cells, R and the seeds."""

    kind: str  # "sweep" or "replications"
    base: Scenario
    axes: list[Axis]
    cells: list[Cell]
    seeds: list[int]

    @property
    def replications(self) -> int:
        """R, the replications per cell."""
        return len(self.seeds)

    def identity(self) -> dict:
        """What must match for a directory to be resumed (R may grow: seeds do not depend on it)."""
        return {"kind": self.kind, "scenario": self.base.model_dump(mode="json", exclude_none=True),
                "grid": [{"key": a.key, "values": list(a.texts)} for a in self.axes]}


# What an experiment holds per replication until its tables are written (measured with tracemalloc:
# 1.3 kB + 125 B per owner for a record, 44 B per seed): lower bounds, so nothing that fits is refused.
RECORD_BYTES, OWNER_BYTES, SEED_BYTES = 1_000, 100, 40


def size_refusal(base: Scenario, cells: int, replications: int) -> str | None:
    """Why ``cells`` × ``replications`` runs of ``base`` cannot fit in memory (their records are kept
    until the tables are written, and their seeds are derived up front), or None."""
    owners = base.data.owners if base.data.source == "synthetic" else 1  # a table's: unknown, at least 1
    return counts.refusal(replications, SEED_BYTES + cells * (RECORD_BYTES + OWNER_BYTES * owners),
                          f"{cells:,} cell{'s' if cells > 1 else ''} x {replications:,} replications of "
                          f"{owners:,} owners")


def make_plan(kind: str, base: Scenario, grid: list[str], replications: int, source: str) -> Plan:
    """Resolve and validate every cell up front (a bad grid value fails before any work); an
    experiment whose results cannot fit in memory is refused first, with the size it would need."""
    if replications < 1:
        raise ScenarioError("--replications", "", _MISSING, f"must be at least 1, got {replications}")
    axes = parse_grid(grid)
    count = check_cells(axes)
    too_large = size_refusal(base, count, replications)
    if too_large:
        raise ScenarioError("--replications", "", replications, too_large)
    cells = resolve_cells(base, axes, source)
    for cell in cells:  # an (ε, δ) no noise reaches, in any cell, fails before the first run
        check_budgets(cell.scenario)
    return Plan(kind, base, axes, cells, rng.replication_seeds(base.seed, replications))


def chunk_size(todo: int, workers: int) -> int:
    """Replications per task: about four tasks per worker, at most :data:`MAX_CHUNK`."""
    return max(1, min(MAX_CHUNK, math.ceil(todo / (4 * max(1, workers)))))


def batch_size(todo: int, workers: int, cells: int, iterations: int) -> int:
    """Replications per task when a cell's replications are replayed together (ideal network): the
    more per task the cheaper each (one kernel pass serves them all), so a cell is split only to
    give every worker work, and at most :data:`BATCH_UPDATES` replication-updates go in one task."""
    pieces = math.ceil(max(1, workers) / max(1, cells))
    return max(1, min(math.ceil(todo / pieces), BATCH_UPDATES // max(1, iterations)))


def pending_tasks(plan: Plan, saved: dict[tuple[int, int], dict], workers: int,
                  keep_metrics: bool) -> tuple[list[Task], int]:
    """Tasks for the replications not ``saved`` yet, in cell order, each a block of consecutive
    replications of one cell (one saved file), and how many were already done."""
    todo = [[r for r in range(plan.replications) if (cell.index, r) not in saved] for cell in plan.cells]
    inline = chunk_size(sum(map(len, todo)), workers)
    tasks = []
    for cell, reps in zip(plan.cells, todo, strict=True):
        size = (batch_size(len(reps), workers, len(plan.cells), cell.scenario.learner.iterations)
                if replayable(cell.scenario) else inline)
        for run in _consecutive(reps):
            for start in range(0, len(run), size):
                part = tuple(run[start:start + size])
                tasks.append(Task(cell.index, cell.scenario, part, tuple(plan.seeds[r] for r in part),
                                  keep_metrics))
    return tasks, len(plan.cells) * plan.replications - sum(map(len, todo))


def _consecutive(replications: list[int]) -> list[list[int]]:
    """``replications`` (increasing) split where one is missing: [0, 1, 2, 5, 6] → [[0, 1, 2], [5, 6]]."""
    runs: list[list[int]] = []
    for r in replications:
        if runs and runs[-1][-1] == r - 1:
            runs[-1].append(r)
        else:
            runs.append([r])
    return runs


@dataclass(frozen=True)
class Execution:
    """How to run the tasks: executor, workers, Dask scheduler address, progress bar."""

    executor: str = "serial"
    workers: int | None = None
    scheduler: str | None = None
    progress: bool = False

    @property
    def worker_count(self) -> int:
        """Workers to use: 1 in serial, else as given or the machine's cores."""
        if self.executor == "serial":
            return 1
        return self.workers if self.workers is not None else default_workers()


@contextmanager
def experiment_directory(out: Path) -> Iterator[None]:
    """Hold ``out``'s lock for the whole experiment (a second process writing there is refused
    with one line), and make a failing file system one line naming ``out``."""
    with files.writing(out), files.locked(out):
        yield


def execute_plan(plan: Plan, out: Path, how: Execution, keep_metrics: bool) -> tuple[list[list[dict]], int]:
    """Run what is not saved yet, saving each task as it finishes; every record by cell.
    Call it inside :func:`experiment_directory`."""
    store = Store(out, plan.identity(), metrics=keep_metrics)
    created = not out.exists()
    store.open()
    found = store.load(plan.seeds)
    tasks, done = pending_tasks(plan, found, how.worker_count, keep_metrics)
    try:
        with _bar(len(plan.cells) * plan.replications, done, plan.kind, how.progress) as bar:
            def on_done(task: Task, records: list[dict]) -> None:
                store.save(task.cell, task.replications, records)
                found.update(((task.cell, r["replication"]), r) for r in records)
                bar.update(len(records))

            run_tasks(tasks, on_done, how.executor, how.worker_count, how.scheduler,
                      progress=progress_of(how.progress))
    except BaseException:
        if created:
            store.remove_if_empty()  # a failure before any result leaves no directory behind
        raise
    by_cell = [[found[c.index, r] for r in range(plan.replications)] for c in plan.cells]
    return by_cell, done


def _bar(total: int, done: int, kind: str, enabled: bool):
    """tqdm bar with ETA on stderr over replications (off when not a terminal or ``--quiet``)."""
    from tqdm import tqdm

    return tqdm(total=total, initial=done, unit="run", desc=kind, file=sys.stderr, leave=False,
                mininterval=0.5, disable=None if enabled else True)


def write_csv(path: Path, header: tuple, rows) -> None:
    """A CSV table (floats by repr, as every dpmarket table), written atomically."""
    write_atomic(path, lambda temp: _write_csv(temp, header, rows))


def write_json(path: Path, data: dict) -> None:
    """A JSON document, written atomically (strict: non-finite numbers as null)."""
    write_text_atomic(path, files.dumps(data, indent=2) + "\n")


def run_sweep(plan: Plan, out: Path, how: Execution) -> dict:
    """Run a sweep into ``out``: sweep.csv, sweep_owners.csv, sweep.json, the figures and
    report.html, published together (:func:`~dpmarket.experiment.publish.published`); returns
    sweep.json with the names of the figures drawn under ``figures``."""
    with experiment_directory(out):
        return _sweep(plan, out, how, time.perf_counter())


def _sweep(plan: Plan, out: Path, how: Execution, start: float) -> dict:
    by_cell, reused = execute_plan(plan, out, how, keep_metrics=False)
    rows, fit, why = tables.sweep_rows(plan.cells, by_cell)
    head, owner_head = tables.sweep_header(plan.axes, any(map(tables.market_cell, by_cell)))
    meta = {**_meta(plan, how, reused), "privacy": tables.guarantees(plan.cells),
            "forecast": fit.to_dict() if fit else {"error": why},
            "oracle": oracle_statement(SWEEP_ORACLE)}
    with publish.published(out) as staging:
        write_csv(staging / "sweep.csv", head, tables.blank_undefined(head, rows))
        write_csv(staging / "sweep_owners.csv", owner_head, tables.sweep_owner_rows(plan.cells, by_cell))
        drawn = publish.sweep_figures_and_report(staging, meta, plan.base.output.plots)
        meta = {**meta, "figures": [p.name for p in drawn],
                "wall_seconds": round(time.perf_counter() - start, 3)}
        write_json(staging / "sweep.json", meta)
    return meta


def run_replications(plan: Plan, out: Path, how: Execution) -> dict:
    """A replicated run into ``out``: metrics.csv, replications.csv, owners.csv, summary.json, the
    ψ band and report.html, published together; returns summary.json (figures under ``figures``)."""
    with experiment_directory(out):
        return _replications(plan, out, how, time.perf_counter())


def _replications(plan: Plan, out: Path, how: Execution, start: float) -> dict:
    (records,), reused = execute_plan(plan, out, how, keep_metrics=True)
    summary = {**_meta(plan, how, reused), **tables.cell_summary(records),
               **tables.cell_guarantee(plan.cells[0].scenario),
               "stop_reasons": _count(r["stop_reason"] for r in records),
               "oracle": oracle_statement(REPLICATIONS_ORACLE)}
    with publish.published(out) as staging:
        write_text_atomic(staging / "scenario.toml", plan.cells[0].scenario.to_toml())
        write_csv(staging / "metrics.csv", ("replication", "k", "time", "psi"), tables.metric_rows(records))
        write_csv(staging / "replications.csv", tables.REPLICATION_COLUMNS, tables.replication_rows(records))
        write_csv(staging / "owners.csv", tables.owner_header(records), tables.owner_rows(records))
        owners = records[0]["owners"]
        epsilons = [e for e, m in zip(owners["epsilon"], tables.participants(owners), strict=True) if m]
        drawn = publish.replications_figures_and_report(staging, summary, epsilons, plan.base.output.plots)
        summary = {**summary, "figures": [p.name for p in drawn],
                   "wall_seconds": round(time.perf_counter() - start, 3)}
        write_json(staging / "summary.json", summary)
    return summary


def _meta(plan: Plan, how: Execution, reused: int) -> dict:
    """What every experiment's JSON says about how it was made."""
    return {"scenario": plan.base.name, "kind": plan.kind, "seed": plan.base.seed,
            "data_seed": plan.cells[0].scenario.data.seed, "replications": plan.replications,
            "seeds": "dpmarket.rng.replication_seeds(seed, replications), the same for every cell",
            "grid": [{"key": a.key, "values": list(a.values)} for a in plan.axes],
            "cells": len(plan.cells), "executor": how.executor,
            "workers": None if how.scheduler else how.worker_count,  # a given cluster has its own
            "scheduler": how.scheduler, "reused_replications": reused,
            "reproducibility": reproducibility.statement()}


def _count(items) -> dict[str, int]:
    counts: dict[str, int] = {}
    for item in items:
        counts[item] = counts.get(item, 0) + 1
    return counts
