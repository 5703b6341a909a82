"""Replications of one cell in the ideal network: schedule → replay → measure (design §9).

The replications of a cell share everything but their seed: the owners' data (``Prepared``), the
market's deal, the owners' budgets, caps and noise scales, the learner's constants. So the owners
are built once; each seed's tape is drawn (:mod:`dpmarket.schedule`), the tapes are replayed
together (:mod:`dpmarket.replay`) and ψ is measured at every recorded iteration of every
replication in one call (:mod:`dpmarket.measure`). Each replication's metrics, stop reason,
refusals and time are those its inline run (:func:`dpmarket.run.execute` with that seed) gives.

The SimPy network modes stay on the inline path (their schedules depend on the channel and have
no tape yet), as does anything that would make the schedule depend on the model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dpmarket import measure
from dpmarket.data import Consortium
from dpmarket.models import Objective
from dpmarket.owners import DataOwner
from dpmarket.replay import Replayed, replay
from dpmarket.run import build_owners, ideal_rates, member_view
from dpmarket.scenario import Scenario
from dpmarket.schedule import Tape, capacities, ideal_tapes
from dpmarket.stepsize import StepSize, resolve_step
from dpmarket.training import Metrics, make_learner, record_points


def replayable(scenario: Scenario) -> bool:
    """Whether the scenario's runs can be scheduled before learning: the ideal network."""
    return scenario.network.mode == "ideal"


@dataclass
class Cell:
    """The replications of a cell: shared owners and step, each seed's tape and metrics."""

    owners: list[DataOwner]  # built once; their ledgers are untouched (nothing paid)
    step: StepSize
    seeds: list[int]
    tapes: list[Tape]
    metrics: list[Metrics]
    replayed: Replayed

    def refusals(self, r: int) -> int:
        """Refusal rows of replication r: owners whose budget was spent, leaving at their tick."""
        return len(self.tapes[r].leaves)


def run_cell(scenario: Scenario, seeds: Sequence[int], consortium: Consortium, objective: Objective,
             members: np.ndarray | None = None, epsilons: np.ndarray | None = None,
             series: bool = True) -> Cell:
    """Every replication ``seeds`` of ``scenario`` (ideal network) on the owners' data ``consortium``
    and ``objective``, with the participants ``members`` at ``epsilons`` (default: everyone at the
    scenario's budgets), as :func:`dpmarket.run.train` runs each. ``series`` false measures ψ only
    at the last update (what pilots and policy comparisons keep)."""
    owners = build_owners(scenario, consortium, objective, members, epsilons)
    lr, m = scenario.learner, scenario.model
    sizes = np.array([o.data.n for o in owners], dtype=np.int64)
    step = resolve_step(scenario, consortium, sizes)
    learner = make_learner(lr.algorithm, sizes, objective.p, lr.iterations, step.rho, m.regularization,
                           m.theta_max, lr.theta_l_step, lr.weighting)
    view = member_view(scenario, [o.index for o in owners], consortium.names)
    rates, capacity = ideal_rates(view, len(owners)), capacities(owners)
    tapes = ideal_tapes(lr.algorithm, capacity, lr.iterations, seeds, rates)
    points = record_points(lr.iterations, scenario.output.metric_points) if series else np.zeros(0, int)
    measured = [measured_at(points, tape.updates) for tape in tapes]
    replayed = replay(learner, owners, tapes, seeds, capacity, sorted(set().union(*measured)))
    metrics = measured_metrics(objective, replayed, tapes, measured)
    return Cell(owners, step, list(seeds), tapes, metrics, replayed)


def final_psis(scenario: Scenario, seeds: Sequence[int], consortium: Consortium, objective: Objective,
               members: np.ndarray | None = None, epsilons: np.ndarray | None = None) -> list[float]:
    """ψ at the end of each replication ``seeds`` (:func:`run_cell` measuring only there)."""
    cell = run_cell(scenario, seeds, consortium, objective, members, epsilons, series=False)
    return [m.psi[-1] for m in cell.metrics]


def measured_at(points: np.ndarray, updates: int) -> list[int]:
    """The iterations the inline run records: every point reached, then the last update."""
    ks = points[points <= updates].tolist()
    return ks if ks and ks[-1] == updates else [*ks, updates]


def measured_metrics(objective, replayed: Replayed, tapes: list[Tape],
                     measured: list[list[int]]) -> list[Metrics]:
    """Each replication's ψ series (k, time of update k, ψ of its model then), ψ in one batch."""
    psi = measure.psis(objective, replayed.models.reshape(-1, replayed.models.shape[-1]))
    psi = psi.reshape(replayed.models.shape[:2])
    at = np.asarray(replayed.at)
    out = []
    for r, (tape, ks) in enumerate(zip(tapes, measured, strict=True)):
        times = np.concatenate(([0.0], tape.time))[ks]  # update k's time; 0 before the first
        out.append(Metrics(list(ks), times.tolist(), psi[np.searchsorted(at, ks), r].tolist()))
    return out
