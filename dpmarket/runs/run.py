"""A whole run, stage by stage: scenario → data → (market) → simulation → results.

Each stage is a function that can be used alone from Python; :func:`execute` chains them and
:mod:`dpmarket.output.results` writes what they produced; the notebook API's ``dpmarket.run``
(:func:`dpmarket.api.run`) calls :func:`execute`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from dpmarket.data import Consortium
from dpmarket.data.problem import Prepared, prepare
from dpmarket.learning import kernels
from dpmarket.learning.learner import AsyncLearner
from dpmarket.learning.objective import Objective
from dpmarket.learning.stepsize import StepSize, floor_law, share_moments
from dpmarket.privacy.owners import DataOwner
from dpmarket.runs.inline import train
from dpmarket.runs.replications import batched, record_reads, scheduled_run
from dpmarket.scenario.schema import Scenario
from dpmarket.schedule.protocol import Training
from dpmarket.schedule.roster import Roster
from dpmarket.system.progress import Progress
from dpmarket.system.progress import of as progress_of

if TYPE_CHECKING:
    from dpmarket.markets.stage import MarketStage
    from dpmarket.schedule.sim import NetworkRun

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
    market: MarketStage | None = None  # the market's outcome, None without a [market] section
    step: StepSize | None = None  # ρ, where it came from, its public stability number

    @cached_property
    def roster(self) -> Roster:
        """The scenario's owners and the slots of those that trained (all of them without a market)."""
        return Roster(len(self.consortium.names), tuple(o.index for o in self.owners))

    @property
    def psi_final(self) -> float:
        """ψ of the published model at the end of the run."""
        return self.training.metrics.psi[-1]

    @cached_property
    def psi_zero(self) -> float:
        """ψ of the untrained model θ = 0 on the whole consortium's f: the honest yardstick, since
        a private model is only worth training where its ψ is below this."""
        return self.objective.psi(np.zeros(self.objective.p))

    @cached_property
    def floor_predicted(self) -> float | None:
        """ψ_T the floor law predicts without noise for this run's N, T and ρ — an oracle
        diagnostic like ψ (it reads f's Hessian and θ*); None for the hinge loss. When the owners'
        answer caps add up to fewer than T, the run cannot make more updates than that, and the
        floor is the law's after those (as the market's forecast, dpmarket/markets/law.py)."""
        if self.step is None or self.objective.loss.name == "hinge" or not is_async(self):
            return None
        from dpmarket.data.proxy import floor_terms  # deferred: only written runs need it

        h, w = floor_terms(self.objective)
        lr = self.scenario.learner
        allowed = sum(o.answers_allowed for o in self.owners)
        updates = np.array(float(allowed)) if allowed < lr.iterations else None
        return floor_law(self.step.rho, len(self.owners), lr.iterations, self.objective.lam, h, weights=w,
                         updates=updates, shares=share_moments([o.data.n for o in self.owners]))

    @cached_property
    def clipped_share(self) -> float | None:
        """Share of the participants' per-example gradients above the clip bound at the final
        model: the bias clipping buys (an oracle diagnostic); None without clipping."""
        clip = self.owners[0].clip if self.owners else None
        if clip is None:
            return None
        theta = self.training.learner.model
        count = sum(o.loss.clipped_count(theta, o.data, clip, o.norm) for o in self.owners)
        return count / sum(o.data.n for o in self.owners)


def execute(scenario: Scenario, events_path: Path | None = None,
            on_data: Callable[[Consortium], None] | None = None, progress: bool | Progress = False,
            prepared: Prepared | None = None, *, market: MarketStage | None = None) -> RunResult:
    """Run ``scenario`` end to end, streaming events to ``events_path`` (or nowhere).

    ``on_data`` is called once the owners' data exist, before training (results use it to
    start drawing the topology while the simulation runs). ``progress`` shows a bar with an
    ETA on stderr when stderr is a terminal. With a [market] section the market runs first
    and only the owners that take part train, at the ε they sold. ``prepared`` (from
    :func:`prepare` on a scenario with the same data and model) skips the data stage:
    experiments reuse it across replications. ``market`` (settled on the same owners by
    :func:`~dpmarket.runs.pilots.market_stage`) skips the market: the replications of an
    experiment train on one negotiated deal.
    """
    start, progress = time.perf_counter(), progress_of(progress)
    prepared = prepare(scenario, progress) if prepared is None else prepared
    consortium, objective = prepared.consortium, prepared.objective
    if on_data is not None:
        on_data(consortium)
    members = epsilons = None
    if scenario.market is not None:
        if market is None:
            from dpmarket.runs.pilots import market_stage  # deferred: only market runs need it

            market = market_stage(scenario, prepared, progress=progress)
        members, epsilons = market.outcome.members, market.outcome.epsilon
    with kernels.decided(record_reads(scenario, consortium.sizes, objective.p)):  # unless an experiment did
        if market is not None and scenario.market.mode == "dynamic":
            from dpmarket.runs.dynamic import train_dynamic  # deferred: only a market in time needs it

            run, market = train_dynamic(scenario, prepared, market, events_path, progress)
        else:
            simulated = scheduled_run if batched(scenario, 1) else train  # the same results either way
            run = simulated(scenario, consortium, objective, members, epsilons, events_path=events_path,
                                progress=progress)
    reason = run.network.stop_reason if run.network else run.training.stop_reason
    return RunResult(scenario, consortium, objective, run.owners, run.training, reason,
                     prepared.own_psi, time.perf_counter() - start, run.curvature, run.network, market,
                     run.step)


def is_async(result: RunResult) -> bool:
    """Whether the run used the asynchronous learner (one owner per update)."""
    return isinstance(result.training.learner, AsyncLearner)


