"""A whole run, stage by stage: scenario → data → (market) → simulation → results.

Each stage is a function that can be used alone from Python; :func:`execute` chains them and
:mod:`dpmarket.results` writes what they produced.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from dpmarket import rng as streams
from dpmarket.data import Consortium, build_consortium
from dpmarket.events import EventLog
from dpmarket.learner import AsyncLearner
from dpmarket.models import Objective, make_loss
from dpmarket.owners import DataOwner
from dpmarket.privacy import answer_cap
from dpmarket.scenario import Scenario
from dpmarket.training import Training, make_learner, record_points, run_uniform

if TYPE_CHECKING:
    from dpmarket.sim import NetworkRun


@dataclass
class RunResult:
    """Everything a run produced, ready to be written or inspected."""

    scenario: Scenario
    consortium: Consortium
    objective: Objective
    owners: list[DataOwner]
    training: Training
    stop_reason: str
    own_psi: np.ndarray  # ψ(θ_i*): each owner's own-data model scored on the whole f
    wall_seconds: float
    step_curvature: float | None = None
    network: NetworkRun | None = None  # the SimPy engine's report, None in the ideal network

    @property
    def psi_final(self) -> float:
        """ψ of the published model at the end of the run."""
        return self.training.metrics.psi[-1]


def sensitivity(scenario: Scenario, consortium: Consortium) -> float:
    """Ξ: the clipping bound, or the bound derived from the declared data domain (design §3)."""
    if scenario.privacy.sensitivity == "clip":
        return float(scenario.privacy.clip)
    loss = make_loss(scenario.model.loss)
    return loss.l1_sensitivity(consortium.z_l1, consortium.y_max, scenario.model.theta_max)


def build_owners(scenario: Scenario, consortium: Consortium, objective: Objective) -> list[DataOwner]:
    """The owners as protocol participants: budget, answer cap m_i, noise stream, ledger."""
    N, T = len(consortium.owners), scenario.learner.iterations
    xi = sensitivity(scenario, consortium)
    share = 1.0 if scenario.learner.algorithm != "async" else 1.0 / N
    owners = []
    for i, data in enumerate(consortium.owners):
        cap = answer_cap(scenario.privacy.split, T, share, scenario.owner_value(i, "cap"),
                         scenario.privacy.cap_quantile)
        owners.append(DataOwner(i, consortium.names[i], data, objective.loss,
                                scenario.owner_value(i, "epsilon"), cap, xi,
                                streams.stream(scenario.seed, "noise", i),
                                scenario.privacy.clip))
    return owners


@dataclass(frozen=True)
class Prepared:
    """The data stage of a scenario, reusable by runs that differ only outside ``[data]`` and
    ``[model]`` (replications share it: same records, θ*, own-data baselines)."""

    consortium: Consortium
    objective: Objective
    own_psi: np.ndarray


def prepare(scenario: Scenario) -> Prepared:
    """Build the owners' data, the objective with its θ*, and the own-data ψ(θ_i*)."""
    consortium = build_consortium(scenario)
    m = scenario.model
    objective = Objective(make_loss(m.loss), consortium.owners, m.regularization, m.theta_max)
    return Prepared(consortium, objective, objective.psis(objective.own_data_models()))


def execute(scenario: Scenario, events_path: Path | None = None,
            on_data: Callable[[Consortium], None] | None = None, progress: bool = False,
            prepared: Prepared | None = None) -> RunResult:
    """Run ``scenario`` end to end, streaming events to ``events_path`` (or nowhere).

    ``on_data`` is called once the owners' data exist, before training (results use it to
    start drawing the topology while the simulation runs). ``progress`` shows a bar with an
    ETA on stderr when stderr is a terminal. ``prepared`` (from :func:`prepare` on a scenario
    with the same data and model) skips the data stage: experiments reuse it across replications.
    """
    start = time.perf_counter()
    consortium = build_consortium(scenario) if prepared is None else prepared.consortium
    if on_data is not None:
        on_data(consortium)
    m = scenario.model
    objective = (Objective(make_loss(m.loss), consortium.owners, m.regularization, m.theta_max)
                 if prepared is None else prepared.objective)
    owners = build_owners(scenario, consortium, objective)
    lr = scenario.learner
    learner = make_learner(lr.algorithm, consortium.sizes, objective.p, lr.iterations, lr.rho,
                           m.regularization, m.theta_max, lr.theta_l_step, lr.weighting)
    with EventLog(events_path) as log, _bar(lr.iterations, progress) as bar:
        training = Training(learner, owners, objective, log,
                            record_points(lr.iterations, scenario.output.metric_points), bar)
        network = simulate(scenario, training, consortium.names)
    reason = network.stop_reason if network else training.stop_reason
    own_psi = (objective.psis(objective.own_data_models()) if prepared is None
               else prepared.own_psi)
    curvature = step_curvature(learner, objective) if isinstance(learner, AsyncLearner) else None
    return RunResult(scenario, consortium, objective, owners, training, reason, own_psi,
                     time.perf_counter() - start, curvature, network)


def _bar(total: int, enabled: bool):
    """A tqdm progress bar on stderr (auto-disabled when stderr is not a terminal)."""
    from tqdm import tqdm

    return tqdm(total=total, unit="update", file=sys.stderr, leave=False, mininterval=0.5,
                disable=None if enabled else True)


def simulate(scenario: Scenario, training: Training, names: list[str]) -> NetworkRun | None:
    """Decide who talks when: the ideal network's superposed clocks, or the SimPy engine."""
    if scenario.network.mode != "ideal":
        from dpmarket.sim import run_network  # deferred: SimPy is needed only here

        return run_network(scenario, training, names)
    rates = np.array([scenario.owner_value(i, "clock_rate") for i in range(len(names))])
    training.stop_reason = run_uniform(
        training, scenario.learner.iterations, streams.stream(scenario.seed, "selection"),
        streams.stream(scenario.seed, "clocks"), None if np.all(rates == rates[0]) else rates)
    return None


def step_curvature(learner: AsyncLearner, objective: Objective) -> float | None:
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
    for i, data in enumerate(objective.owners):
        curvature = scale * np.linalg.eigvalsh(data.stats.A)[-1] / data.n
        step = learner.step_owner * (objective.lam / learner.N + learner.share[i] * curvature)
        worst = max(worst, step)
    return float(worst)


def is_async(result: RunResult) -> bool:
    """Whether the run used the asynchronous learner (one owner per update)."""
    return isinstance(result.training.learner, AsyncLearner)
