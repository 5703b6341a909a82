"""One training run: the protocol between the learner and the owners, logged and measured.

:class:`Training` performs exchanges (query → private answer or refusal → update) and records
every step as an event and ψ(θ_L) at the chosen iterations (the models are kept as the run reaches
them and scored together when it finishes, :func:`dpmarket.learning.measure.psis`: the values
:meth:`Objective.psi` gives each, with the records read once for all of them). *Who* talks *when* is
decided elsewhere: :func:`run_uniform` picks owners uniformly at random at the ticks of superposed
unit-rate Poisson clocks (the papers' model); the SimPy engine will call the same methods.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from dpmarket.learning import measure
from dpmarket.learning.learner import AsyncLearner, SyncAveragedLearner, SyncLearner
from dpmarket.learning.objective import Objective
from dpmarket.privacy.owners import DataOwner
from dpmarket.rng import in_blocks
from dpmarket.schedule.events import BLOCK_ROWS, Event, EventLog
from dpmarket.schedule.sequence import OwnerSequence


@dataclass
class Metrics:
    """ψ of the published model at recorded iterations (rows of ``metrics.csv``)."""

    k: list[int] = field(default_factory=list)
    time: list[float] = field(default_factory=list)
    psi: list[float] = field(default_factory=list)

    def add(self, k: int, time: float, psi: float) -> None:
        """Append one measurement (ignored if iteration k is already recorded)."""
        if not self.k or self.k[-1] != k:
            self.k.append(k)
            self.time.append(time)
            self.psi.append(psi)


def record_points(iterations: int, points: int) -> np.ndarray:
    """About ``points`` iterations evenly spread over 0…T, always including 0 and T."""
    return np.unique(np.linspace(0, iterations, min(points, iterations) + 1).round().astype(int))


FUSED = ("query", "answer", "apply")  # the steps Training.exchange does in one call unless overridden


class Training:
    """State of one run: learner, owners, objective (for ψ), event log and metrics."""

    def __init__(self, learner: AsyncLearner | SyncLearner, owners: list[DataOwner],
                 objective: Objective, log: EventLog, record_at: np.ndarray, *, progress=None,
                 sequence: OwnerSequence | None = None) -> None:
        self.learner, self.owners, self.objective, self.log = learner, owners, objective, log
        self._record = log.record  # called several times per exchange
        self.progress = progress  # anything with update(n), e.g. a tqdm bar
        # the iterations to measure, in increasing order: O(recorded points), whatever T
        self._record_at = iter(np.unique(record_at).tolist())
        self._due = next(self._record_at)
        self.metrics = Metrics()
        self._models: list[np.ndarray] = []  # θ_L at the recorded iterations whose ψ is not measured yet
        self.stop_reason = ""
        # i_k, the owner of the k-th update (papers' Figs 4 and 9); kept exactly up to a million
        # planned updates, counted per block of k beyond (memory bounded whatever T)
        self.sequence = sequence if sequence is not None else OwnerSequence(
            [o.index for o in owners], max((o.index for o in owners), default=-1) + 1, int(np.max(record_at)))
        self._append_owner = self.sequence.append
        self.time = 0.0
        # exchange() does query, answer and apply in one call when a subclass changes none of them; its
        # rows go straight into the log's block (a C call each) unless the log's record() is its own
        self._fused = all(getattr(type(self), m) is getattr(Training, m) for m in FUSED)
        self._rows = log.block
        direct = type(log).record is EventLog.record
        self._row = self._rows.append if direct else (lambda row: log.record(*row))
        self._measure()

    @property
    def k(self) -> int:
        """Completed updates."""
        return self.learner.k

    def exchange(self, owner: int, time: float) -> bool:
        """One instantaneous exchange with ``owner`` at ``time``; False if the owner refused."""
        if not self._fused:
            theta_bar = self.query(owner, time)
            answer = self.answer(owner, theta_bar, time)
            if answer is None:
                return False
            self.apply(owner, theta_bar, answer, time)
            return True
        # query, answer and apply as below, their rows and calls in their order, in one Python call
        self.time = time
        row, learner, who = self._row, self.learner, self.owners[owner]
        row((time, "query", owner, None, None, None, None))
        theta_bar = learner.query_point(owner)
        answer = who.respond(theta_bar)
        if answer is None:
            row((time, "refusal", owner, None, who.epsilon_spent, None, "budget spent"))
            self._settle()
            return False
        row((time, "response", owner, None, who.epsilon_spent, None, None))
        learner.update(owner, theta_bar, answer)
        self._append_owner(owner)
        row((time, "update", owner, learner.k, None, None, None))
        self._settle()
        if learner.k == self._due:
            self._measure()
        if self.progress is not None:
            self.progress.update(1)
        return True

    def _settle(self) -> None:
        """Have the log count and write its block once it is full (rows appended to it directly)."""
        if len(self._rows) >= BLOCK_ROWS:
            self.log.settle()

    def query(self, owner: int, time: float, channel: int | None = None) -> np.ndarray:
        """The learner sends owner i its query point θ̄ (logged); the engine times delivery."""
        self.time = time
        self._record(time, "query", owner, None, None, channel, None)
        return self.learner.query_point(owner)

    def answer(self, owner: int, theta: np.ndarray, time: float,
               channel: int | None = None) -> np.ndarray | None:
        """Owner i answers privately (charging its ledger) or refuses; both are logged."""
        self.time = time
        who = self.owners[owner]
        answer = who.respond(theta)
        if answer is None:
            self._record(time, "refusal", owner, None, who.epsilon_spent, channel, "budget spent")
        else:
            self._record(time, "response", owner, None, who.epsilon_spent, channel, None)
        return answer

    def apply(self, owner: int, theta_bar: np.ndarray, answer: np.ndarray, time: float,
              channel: int | None = None) -> None:
        """The learner applies a delivered answer: the k-th update of Algorithm 1 (logged)."""
        self.time = time
        learner = self.learner
        learner.update(owner, theta_bar, answer)
        self._append_owner(owner)
        self._record(time, "update", owner, learner.k, None, channel, None)
        self._measure()
        if self.progress is not None:
            self.progress.update(1)

    def lost(self, owner: int, time: float) -> None:
        """An answer owner i computed (its ε spent) never reached the learner: collided, lost, or
        dropped with its owner going offline. Nothing to do for the learner; a market in time that
        pays on delivery hears of it here (:class:`dpmarket.runs.dynamic.MarketTraining`)."""

    def leave(self, owner: int, time: float, channel: int | None = None) -> None:
        """Owner i, its budget spent, refuses at its tick and stops taking part (logged once)."""
        self._record(time, "refusal", owner, None, self.owners[owner].epsilon_spent, channel,
                     "budget spent: stops taking part")

    def sync_round(self, time: float) -> bool:
        """One synchronous round (every owner answers); False if any owner refused."""
        self.time = time
        theta = self.learner.query_point()
        answers = []
        for owner in range(len(self.owners)):
            self.log.emit(Event(time, "query", owner))
            answers.append(self.answer(owner, theta, time))
        if any(a is None for a in answers):
            return False
        self.learner.update(np.array(answers))
        self.log.emit(Event(time, "update", -1, self.k))
        self._measure()
        if self.progress is not None:
            self.progress.update(1)
        return True

    def _measure(self) -> None:
        """Keep the published model if this iteration is one to record (k grows by one per update,
        so it meets every recorded point in turn); its ψ is measured when the run finishes."""
        k = self.learner.k
        if k == self._due:
            self._keep(k)
            self._due = next(self._record_at, -1)

    def _keep(self, k: int) -> None:
        """Record iteration k, its time and a copy of the model to score (once per k)."""
        m = self.metrics
        if not m.k or m.k[-1] != k:
            m.k.append(k)
            m.time.append(self.time)
            self._models.append(np.array(self.learner.model, dtype=float))

    def finish(self) -> None:
        """Make sure the last iteration is recorded, whatever stopped the run, and measure ψ of the
        models kept: one batch, each value the one :meth:`Objective.psi` gives it alone."""
        self._keep(self.k)
        if self._models:
            self.metrics.psi.extend(measure.psis(self.objective, np.array(self._models)).tolist())
            self._models = []

    @property
    def all_exhausted(self) -> bool:
        """True when no owner can answer any more."""
        return all(o.exhausted for o in self.owners)

    @property
    def any_exhausted(self) -> bool:
        """True when some owner cannot answer any more (a synchronous round is then impossible)."""
        return any(o.exhausted for o in self.owners)


def run_uniform(training: Training, iterations: int, selection: np.random.Generator,
                clocks: np.random.Generator, rates: np.ndarray | None = None) -> str:
    """Drive ``training`` to T updates in the ideal network: every clock tick is an exchange.

    Exchanges happen at the ticks of N superposed Poisson clocks of rates λ_i (all 1 by
    default), so inter-exchange times are Exp(Σλ) and the ticking owner is i with probability
    λ_i/Σλ (uniform for equal rates, as in the papers). An owner whose budget is spent leaves at
    its next tick, as in the SimPy engine: one refusal row, then its clock is out of the
    superposition (the others' ticks keep their law, by the superposition property). Returns why
    the run stopped: ``"iterations"`` or ``"budgets exhausted"``.
    """
    if not isinstance(training.learner, AsyncLearner):
        return _run_rounds(training, iterations, clocks, float(len(training.owners)) if rates is None
                           else float(np.sum(rates)))
    clock = Superposition(len(training.owners), rates)
    # Exp(Σλ) waits are mean × standard exponential draws (numpy's own formula): drawn in blocks,
    # scaled by the mean of their tick (it changes when an owner leaves) — clocks.exponential's values
    owners, time, waits = training.owners, 0.0, in_blocks(clocks.standard_exponential, 16, WAITS).__next__
    spent = sum(o.exhausted for o in owners)  # budgets spent: only an owner's own answers spend its own
    while training.k < iterations:
        if spent == len(owners):
            training.finish()
            return "budgets exhausted"
        time += clock.mean_wait * waits()
        owner = clock.pick(selection)
        who = owners[owner]
        if who.exhausted:
            training.leave(owner, time)
            clock.remove(owner)
        else:
            training.exchange(owner, time)
            spent += who.exhausted
    training.finish()
    return "iterations"


WAITS = 256  # the most standard exponential waits drawn at once (16 first, then doubling)


def _run_rounds(training: Training, iterations: int, clocks: np.random.Generator, total: float) -> str:
    """The synchronous learners in the ideal network: a round (every owner answers) per tick of
    the superposed clocks; the run stops when an owner's budget is spent (no round is possible)."""
    time = 0.0
    while training.k < iterations:
        if training.any_exhausted:
            training.finish()
            return "budgets exhausted"
        time += clocks.exponential(1.0 / total)
        training.sync_round(time)
    training.finish()
    return "iterations"


class Superposition:
    """The owners whose clocks still tick, and who ticks next: i with probability λ_i/Σλ.

    With equal rates one integer draw picks the owner, else one uniform against the cumulative
    rates: the draws of the papers' model, unchanged until an owner leaves.
    """

    def __init__(self, owners: int, rates: np.ndarray | None) -> None:
        self.ids = list(range(owners))
        self.rates = None if rates is None else np.asarray(rates, dtype=float)
        self._reset()

    def _reset(self) -> None:
        rates = None if self.rates is None else self.rates[self.ids]
        total = float(len(self.ids)) if rates is None else float(np.sum(rates))
        self.mean_wait = 1.0 / total
        self.cumulative = None if rates is None else np.cumsum(rates) / total

    def pick(self, selection: np.random.Generator) -> int:
        """The owner of the next tick."""
        if self.cumulative is None:
            return self.ids[int(selection.integers(len(self.ids)))]
        slot = int(np.searchsorted(self.cumulative, selection.random(), side="right"))
        return self.ids[min(slot, len(self.ids) - 1)]

    def remove(self, owner: int) -> None:
        """``owner``'s clock stops: it left the collaboration."""
        self.ids.remove(owner)
        self._reset()


def make_learner(algorithm: str, sizes: np.ndarray, dim: int, iterations: int, rho: float, *,
                 lam: float, theta_max: float, theta_l_step: str, weighting: str):
    """The learner called ``algorithm`` (async, sync or sync_averaged)."""
    if algorithm == "async":
        return AsyncLearner(sizes, dim, iterations, rho, lam, theta_max=theta_max,
                            theta_l_step=theta_l_step, weighting=weighting)
    cls = {"sync": SyncLearner, "sync_averaged": SyncAveragedLearner}[algorithm]
    return cls(sizes, dim, iterations, rho, lam, theta_max=theta_max)
