"""Replications of one cell: schedule → replay → measure (design §9).

The replications of a cell share everything but their seed: the owners' data (``Prepared``), the
market's deal, the owners' budgets, caps and noise scales, the learner's constants. So the owners
are built once; each seed's tape is drawn (:mod:`dpmarket.schedule`: the ideal network's clocks in
bulk, or the SimPy engine driving a :class:`~dpmarket.schedule.Recorder`), the tapes are replayed
together (:mod:`dpmarket.replay`) and ψ is measured at every recorded iteration of every
replication in one call (:mod:`dpmarket.measure`). Each replication's metrics, stop reason, event
counts and time are those its run exchange by exchange (:func:`dpmarket.run.execute` with that
seed) gives. Who talks when never depends on the model in any network dpmarket simulates; a learner
that chose owners from the model would have to stay on the inline path (:func:`replayable`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dpmarket import measure
from dpmarket.cohort import build_owners, ideal_rates, member_view
from dpmarket.data import Consortium
from dpmarket.models import Objective
from dpmarket.owners import DataOwner
from dpmarket.replay import Replayed, replay
from dpmarket.scenario import Scenario
from dpmarket.schedule import Tape, capacities, ideal_tapes, network_tape
from dpmarket.stepsize import StepSize, resolve_step
from dpmarket.training import Metrics, make_learner, record_points

SCHEDULED = ("ideal", "request", "broadcast")  # network modes whose schedule ignores the model


BATCH_MIN = 2  # replications from which a batch pays: one run alone is 1.4–1.6 × faster exchange by exchange


def replayable(scenario: Scenario) -> bool:
    """Whether the scenario's runs can be scheduled before learning (who talks when does not depend
    on the model): every network mode dpmarket has, unless a market in time runs beside it (its
    prices, hence who takes part when, follow the model's measured progress)."""
    dynamic = scenario.market is not None and scenario.market.mode == "dynamic"
    return scenario.network.mode in SCHEDULED and not dynamic


def batched(scenario: Scenario, replications: int) -> bool:
    """Whether ``replications`` runs of ``scenario`` go through schedule → replay → measure: when
    they can, and there are at least :data:`BATCH_MIN` of them (the results are the same either way)."""
    return replayable(scenario) and replications >= BATCH_MIN


@dataclass(frozen=True)
class Facts:
    """What a replication's run reports besides its model: why it stopped, its events per kind, and
    the time on its clock when it stopped."""

    stop_reason: str
    counts: Counter
    time: float


@dataclass
class Cell:
    """The replications of a cell: shared owners and step, each seed's tape, metrics and facts."""

    owners: list[DataOwner]  # built once; their ledgers are untouched (each replication pays copies)
    step: StepSize
    seeds: list[int]
    tapes: list[Tape]
    metrics: list[Metrics]
    facts: list[Facts]
    replayed: Replayed


def run_cell(scenario: Scenario, seeds: Sequence[int], consortium: Consortium, objective: Objective,
             members: np.ndarray | None = None, epsilons: np.ndarray | None = None,
             series: bool = True) -> Cell:
    """Every replication ``seeds`` of ``scenario`` on the owners' data ``consortium`` and
    ``objective``, with the participants ``members`` at ``epsilons`` (default: everyone at the
    scenario's budgets), as :func:`dpmarket.run.train` runs each. ``series`` false measures ψ only
    at the last update (what pilots and policy comparisons keep)."""
    owners = build_owners(scenario, consortium, objective, members, epsilons)
    lr, m = scenario.learner, scenario.model
    sizes = np.array([o.data.n for o in owners], dtype=np.int64)
    step = resolve_step(scenario, consortium, sizes)
    learner = make_learner(lr.algorithm, sizes, objective.p, lr.iterations, step.rho, m.regularization,
                           m.theta_max, lr.theta_l_step, lr.weighting)
    view = member_view(scenario, [o.index for o in owners], consortium.names)
    points = record_points(lr.iterations, scenario.output.metric_points)
    if scenario.network.mode == "ideal":
        tapes, measured, facts = _ideal(view, owners, seeds, points if series else np.zeros(0, int))
    else:
        tapes, measured, facts = _network(view, owners, seeds, points)
        measured = measured if series else [Metrics([m.k[-1]], [m.time[-1]], [m.psi[-1]]) for m in measured]
    at = sorted(set().union(*(m.k for m in measured)))
    replayed = replay(learner, owners, tapes, seeds, capacities(owners), at)
    metrics = measured_psi(objective, replayed, measured)
    return Cell(owners, step, list(seeds), tapes, metrics, facts, replayed)


def final_psis(scenario: Scenario, seeds: Sequence[int], consortium: Consortium, objective: Objective,
               members: np.ndarray | None = None, epsilons: np.ndarray | None = None) -> list[float]:
    """ψ at the end of each replication ``seeds`` (:func:`run_cell` measuring only there)."""
    cell = run_cell(scenario, seeds, consortium, objective, members, epsilons, series=False)
    return [m.psi[-1] for m in cell.metrics]


def _ideal(view: Scenario, owners: list[DataOwner], seeds: Sequence[int], points: np.ndarray) -> tuple:
    """The ideal network's tapes, the iterations and times each run records, and its facts."""
    lr, rates = view.learner, ideal_rates(view, len(owners))
    tapes = ideal_tapes(lr.algorithm, capacities(owners), lr.iterations, seeds, rates)
    measured, facts = [], []
    for tape in tapes:
        ks = measured_at(points, tape.updates)
        times = np.concatenate(([0.0], tape.time))[ks]  # update k's time; 0 before the first
        measured.append(Metrics(ks, times.tolist(), []))
        asked = tape.updates * (len(owners) if tape.rounds else 1)  # every owner answers each round
        counts = Counter(query=asked, response=asked, update=tape.updates, refusal=len(tape.leaves))
        facts.append(Facts(tape.stop_reason, counts, tape.end_time))
    return tapes, measured, facts


def _network(view: Scenario, owners: list[DataOwner], seeds: Sequence[int], points: np.ndarray) -> tuple:
    """The SimPy engine's tapes (one engine run per seed, on copies of the owners' ledgers), the
    iterations and times each run records, and its facts."""
    names = [o.name for o in owners]
    tapes, measured, facts = [], [], []
    for seed in seeds:
        tape, recorder, network = network_tape(view.model_copy(update={"seed": seed}), owners, names, points)
        tapes.append(tape)
        measured.append(recorder.metrics)
        facts.append(Facts(network.stop_reason, recorder.log.counts, recorder.time))
    return tapes, measured, facts


def measured_at(points: np.ndarray, updates: int) -> list[int]:
    """The iterations the inline run records: every point reached, then the last update."""
    ks = points[points <= updates].tolist()
    return ks if ks and ks[-1] == updates else [*ks, updates]


def measured_psi(objective: Objective, replayed: Replayed, measured: list[Metrics]) -> list[Metrics]:
    """Each replication's ψ series (k and time as recorded, ψ of its model after update k), ψ of
    every replication's models in one batch."""
    psi = measure.psis(objective, replayed.models.reshape(-1, replayed.models.shape[-1]))
    psi = psi.reshape(replayed.models.shape[:2])
    at = np.asarray(replayed.at)
    return [Metrics(list(m.k), list(m.time), psi[np.searchsorted(at, m.k), r].tolist())
            for r, m in enumerate(measured)]
