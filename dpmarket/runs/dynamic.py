"""A run whose market lives in simulated time (``market.mode = "dynamic"``), on the inline path.

Who takes part when depends on prices that follow the model's measured progress, so these runs
are never scheduled ahead and replayed (:func:`dpmarket.runs.replications.replayable` says no): the
exchanges drive :class:`MarketTraining` one by one, in one SimPy environment with the market's
processes (:mod:`dpmarket.markets.dynamic`). The ideal network runs there too, as one process
drawing the same clocks as the static path (:mod:`dpmarket.schedule.sim.ideal`), so that a market that
changes nothing reproduces the static run draw for draw.

The simulation's owners (the **roster**) are everyone who may take part: the opening coalition
and the pool under the fixed rule (a constant price never brings a decliner back), every owner
under the progress rule. Algorithm 1's N and n are the roster's, planned from the start.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from dpmarket import rng as streams
from dpmarket.data.problem import Prepared
from dpmarket.data.proxy import resolve_step
from dpmarket.errors import ScenarioError
from dpmarket.learning.learner import AsyncLearner
from dpmarket.learning.objective import Objective, make_loss
from dpmarket.markets.costs import Cost
from dpmarket.markets.dynamic import DynamicMarket
from dpmarket.markets.stage import MarketStage, sellers_of
from dpmarket.privacy.cohort import build_owners, ideal_rates, make_owner, member_view
from dpmarket.privacy.owners import DataOwner
from dpmarket.runs.inline import Trained, step_curvature
from dpmarket.scenario.schema import Scenario
from dpmarket.schedule.events import EventLog
from dpmarket.schedule.protocol import Training, make_learner, record_points
from dpmarket.schedule.sequence import OwnerSequence
from dpmarket.system.progress import Progress
from dpmarket.system.progress import of as progress_of

NOT_A_MEMBER = "not taking part in the market"  # a refusal row's detail: the owner left before its query came


class MarketTraining(Training):
    """Training that tells the market of every answer computed and every answer received."""

    market: DynamicMarket

    def answer(self, owner: int, theta: np.ndarray, time: float,
               channel: int | None = None) -> np.ndarray | None:
        """Owner i answers (or refuses); an answer's ε is paid now or owed until delivery.

        Only a member answers. An owner asks to take part at its tick, but its query arrives later
        (a request's round trip, or the next broadcast slot), and a repricing or a lost answer may
        have made it leave meanwhile: it then declines (a refusal row), spending no ε and owed
        nothing, as its ``leave`` row says it left."""
        if not self.market.member(owner):
            self.time = time
            self._record(time, "refusal", owner, None, self.owners[owner].epsilon_spent, channel,
                         NOT_A_MEMBER)
            return None
        before = self.owners[owner].epsilon_spent
        out = super().answer(owner, theta, time, channel)
        if out is not None:
            self.market.computed(owner, self.owners[owner].epsilon_spent - before, time)
        return out

    def apply(self, owner: int, theta_bar: np.ndarray, answer: np.ndarray, time: float,
              channel: int | None = None) -> None:
        """The learner applies a delivered answer; pay-on-delivery pays for it now."""
        super().apply(owner, theta_bar, answer, time, channel)
        self.market.delivered(owner, time)

    def lost(self, owner: int, time: float) -> None:
        """An answer of owner i never reached the learner: pay-on-delivery will not pay for it."""
        self.market.lost(owner, time)


def roster_of(scenario: Scenario, stage: MarketStage, owners: int) -> list[int]:
    """The owners the simulation holds: whoever may take part during the run (module docstring)."""
    m = scenario.market
    if m.pool >= owners:
        raise ScenarioError(scenario.source, "market.pool", m.pool,
                            f"must leave someone at the start (the scenario has {owners} owners)")
    first_pool = owners - m.pool
    opening = stage.outcome.participates
    keep = [i for i in range(first_pool) if m.rule != "fixed" or opening[i]]
    if not keep:
        raise ScenarioError(scenario.source, "market.pool", m.pool, "no owner outside the pool takes part "
                            "at the opening price")
    return keep + list(range(first_pool, owners))


def opening_budgets(scenario: Scenario, stage: MarketStage, costs: Cost) -> np.ndarray:
    """Each owner's budget as first built: what it sold at the opening price, or (not in the opening
    coalition) its best response to that price, replaced by its best response when it joins."""
    m, o = scenario.market, stage.outcome
    best = np.asarray(costs.best_response(float(o.price), m.epsilon_min, m.epsilon_max), dtype=float)
    best = np.broadcast_to(best, o.epsilon.shape)
    return np.where(o.participates, o.epsilon, best)


def public_quality(scenario: Scenario, prepared: Prepared):
    """ψ of a model on public data (the synthetic twin, or the hold-out): the progress rule's
    measurement, never the owners' records. Returns a function of the model θ."""
    from dpmarket.data import build_consortium
    from dpmarket.data.proxy import SUMMARY_RECORDS, twin_scenario
    from dpmarket.learning.objective import OwnerData

    md, consortium = scenario.model, prepared.consortium
    if scenario.data.source == "synthetic":
        twin = twin_scenario(scenario, np.minimum(consortium.sizes, SUMMARY_RECORDS))
        datas = build_consortium(twin, keep_records=md.loss != "squared").owners
    else:
        datas = [OwnerData.from_block(consortium.holdout, md.intercept, True)]
    public = Objective(make_loss(md.loss), datas, md.regularization, md.theta_max)
    return public.psi


def train_dynamic(scenario: Scenario, prepared: Prepared, stage: MarketStage, events_path: Path | None,
                  progress: bool | Progress = False) -> tuple[Trained, MarketStage]:
    """Train with the market in time; returns the training and the market stage with the realized
    outcome (payments received, cost of the ε spent) and the market's record."""
    consortium, objective = prepared.consortium, prepared.objective
    sellers = sellers_of(scenario, prepared)
    roster = roster_of(scenario, stage, len(consortium.names))
    budgets = opening_budgets(scenario, stage, sellers.cost)
    owners = build_owners(scenario, consortium, objective, np.array(roster), budgets)
    lr, md = scenario.learner, scenario.model
    sizes = np.array([o.data.n for o in owners], dtype=np.int64)
    step = resolve_step(scenario, consortium, sizes)
    learner = make_learner(lr.algorithm, sizes, objective.p, lr.iterations, step.rho, lam=md.regularization,
                           theta_max=md.theta_max, theta_l_step=lr.theta_l_step, weighting=lr.weighting)
    view = member_view(scenario, roster, consortium.names)
    caps, xi, clip = [o.answers_allowed for o in owners], owners[0].xi, owners[0].clip

    def rebuild(j: int, eps: float) -> DataOwner:
        return make_owner(scenario, consortium, objective, roster[j], eps, answers=caps[j], xi=xi, clip=clip)

    measure = None
    if scenario.market.rule == "progress":
        quality = public_quality(scenario, prepared)
        measure = lambda: quality(learner.model)  # noqa: E731 — the learner's published model, now
    bar = progress_of(progress).phase("training", total=lr.iterations, unit="update")
    renumber = roster if view is not scenario else None
    with EventLog(events_path, renumber, market=True) as log, bar as bar:
        sequence = OwnerSequence(roster, len(consortium.names), lr.iterations)
        training = MarketTraining(learner, owners, objective, log,
                                  record_points(lr.iterations, scenario.output.metric_points), progress=bar,
                                  sequence=sequence)
        market = DynamicMarket(scenario.market, sellers, stage.forecast, stage.outcome, roster,
                               owners=training.owners, record=log.market_row, rebuild=rebuild,
                               measure=measure)
        training.market = market
        network = _simulate(view, training, [o.name for o in owners], market)
        market.finish()
    curvature = step_curvature(learner, objective, training.owners) if isinstance(learner, AsyncLearner) \
        else None
    trained = Trained(training.owners, training, network, curvature, step)
    return trained, replace(stage, outcome=market.realized(), dynamic=market)


def _simulate(view: Scenario, training: MarketTraining, names: list[str], market: DynamicMarket):
    """One SimPy environment: the network (or the ideal clocks) and the market's processes."""
    import simpy  # deferred: only simulations need it

    from dpmarket.schedule.sim.engine import Engine, NetworkRun
    from dpmarket.schedule.sim.ideal import ideal_clocks
    from dpmarket.schedule.sim.network import build_network

    arrivals = streams.stream(view.seed, "arrivals")
    if view.network.mode == "ideal":
        env = simpy.Environment()
        done = env.event()
        market.start(env, _stopper(done), lambda: training.learner.model, arrivals, lambda: training.k)
        selection, clocks = streams.stream(view.seed, "selection"), streams.stream(view.seed, "clocks")
        env.process(ideal_clocks(env, training, view.learner.iterations, selection, clocks,
                                 rates=ideal_rates(view, len(names)), takes_part=market.takes_part,
                                 done=done))
        env.run(until=done)
        training.stop_reason = done.value
        training.finish()
        return None
    engine = Engine(build_network(view, len(training.owners)), training, names)
    engine.takes_part = market.takes_part
    market.start(engine.env, _stopper(engine.done), lambda: training.learner.model, arrivals,
                 lambda: training.k)
    reason = engine.run()
    training.finish()
    downtime = np.array([engine.availability.downtime(i) for i in range(engine.N)])
    return NetworkRun(reason, engine.channels, downtime, engine.rates, engine.channel_of)


def _stopper(done):
    """A callback ending the run with a reason (once)."""
    def stop(reason: str) -> None:
        if not done.triggered:
            done.succeed(reason)
    return stop
