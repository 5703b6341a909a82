"""The unit of work of an experiment: replications of one cell → small, plain result records.

A task is a pure function of (cell scenario, replication indices and seeds): it runs on any
executor (this process, a process pool, a Dask worker) and gives the same records, float for
float. Replication r of a cell is the cell's scenario with ``seed`` = the r-th replication seed;
its ``data.seed`` is pinned (see :mod:`dpmarket.experiment.grid`), so the replications of a cell
share one dataset, which each worker builds once and keeps (:func:`prepared_for`).
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from dpmarket.data.problem import Prepared, prepare
from dpmarket.learning import kernels
from dpmarket.runs.replications import batched, record_reads, run_cell
from dpmarket.runs.run import execute
from dpmarket.scenario.loading import file_digests
from dpmarket.scenario.schema import Scenario
from dpmarket.schedule.roster import Roster

if TYPE_CHECKING:
    from dpmarket.markets.stage import MarketStage

# Each worker keeps the data of the last few datasets it used: tasks arrive in cell order, so a
# cell's replications (and the next cells, when only ε or the network changes) find their data
# here instead of rebuilding it. Raw records (logistic, hinge, clipping) are bounded in total.
_CACHE: OrderedDict[str, Prepared] = OrderedDict()
CACHE_DATASETS = 8
CACHE_RECORDS = 2_000_000
_LOCK = threading.Lock()  # Dask may run several tasks of one worker in threads


@dataclass(frozen=True)
class Task:
    """Replications ``replications`` (indices) with ``seeds`` of cell ``cell``."""

    cell: int
    scenario: Scenario
    replications: tuple[int, ...]
    seeds: tuple[int, ...]
    keep_metrics: bool  # the ψ-against-k series (replicated runs draw bands from it)


def data_key(scenario: Scenario) -> str:
    """Everything the data stage reads (records, θ*, own-data ψ): equal keys, equal data.

    The owners' data depend on ``[data]`` (with the pinned data seed), the per-owner tables
    (sizes, shifts, names), the model (loss, intercept; θ* also λ and θmax) and whether records
    are kept for clipping — not on ε, the learner or the network; and on a table's content (a file
    rewritten at the same path is another dataset).
    """
    dump = scenario.model_dump(mode="json", include={"data", "model", "owners"})
    dump["sensitivity"] = scenario.privacy.sensitivity
    dump["data_seed"] = scenario.seed if scenario.data.seed is None else scenario.data.seed
    dump.update(file_digests(scenario, ("data.path",)))
    return json.dumps(dump, sort_keys=True)


def clear_cache() -> None:
    """Forget every cached dataset (benchmarks time cold starts with it)."""
    with _LOCK:
        _CACHE.clear()


def _kept_records(prepared: Prepared) -> int:
    return sum(o.n for o in prepared.consortium.owners if o.Z is not None)


def prepared_for(scenario: Scenario) -> Prepared:
    """The data stage of ``scenario``, built once per worker and dataset (see :func:`data_key`)."""
    key = data_key(scenario)
    with _LOCK:
        if key in _CACHE:
            _CACHE.move_to_end(key)
            return _CACHE[key]
    prepared = prepare(scenario)
    with _LOCK:
        _CACHE[key] = prepared
        while len(_CACHE) > 1 and (len(_CACHE) > CACHE_DATASETS or
                                   sum(map(_kept_records, _CACHE.values())) > CACHE_RECORDS):
            _CACHE.popitem(last=False)
    return prepared


def run_task(task: Task) -> list[dict]:
    """Run every replication of ``task``; one JSON-ready record each, in the task's order.

    A cell with a [market] negotiates once, under the cell's own seed, as ``run`` and the
    ``market`` command do: its replications train on that one deal (the same participants and
    budgets) and vary only the run's randomness, so the cell has one owner table. The replications
    are scheduled, replayed together and measured in one batch (:mod:`dpmarket.runs.replications`), with
    the records the runs exchange by exchange give.
    """
    prepared = prepared_for(task.scenario)
    reads = record_reads(task.scenario, prepared.consortium.sizes, prepared.objective.p)
    with kernels.decided(reads, replicated=True):  # the cell's kernel, whatever the task's share of it
        market = None
        if task.scenario.market is not None:
            from dpmarket.runs.pilots import market_stage  # deferred: only market cells need it

            market = market_stage(task.scenario, prepared)
        if batched(task.scenario, len(task.seeds)):
            return replayed_records(task, prepared, market)
        return [replicate(task, r, seed, prepared, market)
                for r, seed in zip(task.replications, task.seeds, strict=True)]


def replicate(task: Task, replication: int, seed: int, prepared: Prepared,
              market: MarketStage | None = None) -> dict:
    """One replication: the cell's scenario under ``seed``, reduced to what the tables need.

    The owner lists run over every owner of the scenario; in a market, ``participates`` says who
    trained and an owner that declined has ε = 0.
    """
    result = execute(task.scenario.model_copy(update={"seed": seed}), prepared=prepared, market=market)
    counts, m = result.training.log.counts, result.training.metrics
    run = {"psi_final": float(result.psi_final), "psi_zero": float(result.psi_zero),
           "iterations": int(result.training.k), "stop_reason": result.stop_reason,
           "collisions": counts["collision"], "dropouts": counts["dropout"], "losses": counts["loss"],
           "refusals": counts["refusal"], "simulated_time": float(result.training.time)}
    owners = owner_record(prepared, result.roster, result.owners, result.market is not None)
    return make_record(task, replication, seed, run, owners, metrics=m)


def replayed_records(task: Task, prepared: Prepared, market: MarketStage | None) -> list[dict]:
    """Every replication of ``task`` through schedule → replay → measure."""
    members, epsilons = (None, None) if market is None else (market.outcome.members, market.outcome.epsilon)
    cell = run_cell(task.scenario, task.seeds, prepared.consortium, prepared.objective, members,
                    epsilons=epsilons)
    psi_zero = float(prepared.objective.psi(np.zeros(prepared.objective.p)))
    roster = Roster(len(prepared.consortium.names), tuple(o.index for o in cell.owners))
    owners = owner_record(prepared, roster, cell.owners, market is not None)
    records = []
    for r, (replication, seed) in enumerate(zip(task.replications, task.seeds, strict=True)):
        m, facts = cell.metrics[r], cell.facts[r]
        counts = facts.counts
        run = {"psi_final": float(m.psi[-1]), "psi_zero": psi_zero, "iterations": facts.updates,
               "stop_reason": facts.stop_reason, "collisions": counts["collision"],
               "dropouts": counts["dropout"], "losses": counts["loss"], "refusals": counts["refusal"],
               "simulated_time": float(facts.time)}
        records.append(make_record(task, replication, seed, run, owners, metrics=m))
    return records


def owner_record(prepared: Prepared, roster: Roster, owners: list, market: bool) -> dict:
    """The owner lists of a record, over every owner of the scenario."""
    consortium = prepared.consortium
    record = {"name": list(consortium.names), "records": [int(n) for n in consortium.sizes],
              "epsilon": roster.spread([float(o.epsilon) for o in owners], 0.0),
              "own_psi": [float(v) for v in prepared.own_psi]}
    if market:
        record["participates"] = roster.participates.tolist()
    return record


def make_record(task: Task, replication: int, seed: int, run: dict, owners: dict, *, metrics) -> dict:
    """One replication's JSON-ready record: identity, the run's figures, owners, metrics if kept."""
    record = {"cell": task.cell, "replication": replication, "seed": seed, **run, "owners": owners}
    if task.keep_metrics:
        record["metrics"] = {"k": [int(k) for k in metrics.k], "time": [float(t) for t in metrics.time],
                             "psi": [float(p) for p in metrics.psi]}
    return record
