"""One training pass exchange by exchange: the reference semantics of a run.

The owners are built, then who talks when is decided by the ideal network's superposed clocks or
the SimPy engine, each exchange driving :class:`~dpmarket.schedule.protocol.Training`. The batched replay
(:mod:`dpmarket.replay.kernel`) must reproduce it; anything adaptive (a market in time) runs here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from dpmarket import rng as streams
from dpmarket.data import Consortium
from dpmarket.data.proxy import resolve_step
from dpmarket.learning.learner import AsyncLearner, SyncLearner
from dpmarket.learning.objective import Objective
from dpmarket.learning.stepsize import StepSize
from dpmarket.privacy.cohort import build_owners, ideal_rates, member_view
from dpmarket.privacy.owners import DataOwner
from dpmarket.scenario.schema import Scenario
from dpmarket.schedule.events import EventLog
from dpmarket.schedule.protocol import Training, make_learner, record_points, run_uniform
from dpmarket.schedule.sequence import OwnerSequence
from dpmarket.system.progress import Progress
from dpmarket.system.progress import of as progress_of

if TYPE_CHECKING:
    from dpmarket.schedule.sim import NetworkRun


@dataclass
class Trained:
    """What training the participants produced (one pass of the simulation)."""

    owners: list[DataOwner]
    training: Training
    network: NetworkRun | None
    curvature: float | None
    step: StepSize


@dataclass
class Cast:
    """A run's participants and its learner, as every way of running it builds them: the owners
    (``members`` at ``epsilons``), Algorithm 1 planned for them (N, n and the step from public
    sizes), their scenario indices and the scenario as they see it (:func:`member_view`)."""

    owners: list[DataOwner]
    learner: AsyncLearner | SyncLearner
    step: StepSize
    ids: list[int]
    view: Scenario

    @classmethod
    def of(cls, scenario: Scenario, consortium: Consortium, objective: Objective,
           members: np.ndarray | None, epsilons: np.ndarray | None) -> Cast:
        owners = build_owners(scenario, consortium, objective, members, epsilons)
        lr, m = scenario.learner, scenario.model
        sizes = np.array([o.data.n for o in owners], dtype=np.int64)
        step = resolve_step(scenario, consortium, sizes)
        learner = make_learner(lr.algorithm, sizes, objective.p, lr.iterations, step.rho,
                               lam=m.regularization, theta_max=m.theta_max, theta_l_step=lr.theta_l_step,
                               weighting=lr.weighting)
        ids = [o.index for o in owners]
        return cls(owners, learner, step, ids, member_view(scenario, ids, consortium.names))


def train(scenario: Scenario, consortium: Consortium, objective: Objective,
          members: np.ndarray | None = None, epsilons: np.ndarray | None = None,
          *, events_path: Path | None = None, progress: bool | Progress = False) -> Trained:
    """Train with the owners in ``members`` (default all) at ``epsilons``; ψ against the whole f.

    Algorithm 1's N and n are the members'; the published model is scored on everyone's
    data (``objective``), so runs with different participants are comparable. ``progress``
    (True: a bar on a terminal) counts the updates.
    """
    cast = Cast.of(scenario, consortium, objective, members, epsilons)
    owners, learner, step, ids, view = cast.owners, cast.learner, cast.step, cast.ids, cast.view
    lr = scenario.learner
    renumber = ids if view is not scenario else None
    bar = progress_of(progress).phase("training", total=lr.iterations, unit="update")
    with EventLog(events_path, renumber) as log, bar as bar:
        sequence = OwnerSequence(ids, len(consortium.names), lr.iterations)
        training = Training(learner, owners, objective, log,
                            record_points(lr.iterations, scenario.output.metric_points), progress=bar,
                            sequence=sequence)
        network = simulate(view, training, [o.name for o in owners])
    curvature = step_curvature(learner, objective, owners) if isinstance(learner, AsyncLearner) else None
    return Trained(owners, training, network, curvature, step)


def simulate(scenario: Scenario, training: Training, names: list[str]) -> NetworkRun | None:
    """Decide who talks when: the ideal network's superposed clocks, or the SimPy engine."""
    if scenario.network.mode != "ideal":
        from dpmarket.schedule.sim import run_network  # deferred: SimPy is needed only here
        from dpmarket.schedule.sim.network import build_network

        return run_network(build_network(scenario, len(training.owners)), training, names)
    training.stop_reason = run_uniform(
        training, scenario.learner.iterations, streams.stream(scenario.seed, "selection"),
        streams.stream(scenario.seed, "clocks"), ideal_rates(scenario, len(names)))
    return None


def step_curvature(learner: AsyncLearner, objective: Objective,
                   owners: list[DataOwner] | None = None) -> float | None:
    """max_i of owner i's step times the curvature of its term: above 2, Algorithm 1 oscillates.

    Owner i's copy moves by a_i (∇g/(2N) + (n_i/n) Q_i) with a_i = Nρ/(T²σ); along the
    steepest direction of its data term that is a gradient step of length
    a_i (λ/N + (n_i/n) L_i), with L_i the largest eigenvalue of its Hessian, and a gradient step
    longer than 2/curvature diverges. Heavy-tailed sizes make the largest owners the first to
    cross that line. An oracle diagnostic (it reads the data), like ψ; None for the hinge loss.
    """
    scale = {"squared": 2.0, "logistic": 0.25}.get(objective.loss.name)
    if scale is None:
        return None
    worst = 0.0
    datas = objective.owners if owners is None else [o.data for o in owners]
    for i, data in enumerate(datas):
        curvature = scale * np.linalg.eigvalsh(data.stats.A)[-1] / data.n
        step = learner.step_owner * (objective.lam / learner.N + learner.share[i] * curvature)
        worst = max(worst, step)
    return float(worst)
