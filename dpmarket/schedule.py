"""The schedule of a run: who is asked when, decided before any learning.

Nothing about *who* talks *when* depends on θ: the ticking owner is drawn from the clocks, the
channel decides collisions and losses from times, and an owner refuses only once its ledger cannot
pay another answer, which depends on how many it gave, not on what they said. So a run splits into
schedule → replay → measure (design §9): this module writes the exchange *tape* of a run,
:mod:`dpmarket.replay` applies the answers of many tapes at once, :mod:`dpmarket.measure` scores
the models.

A tape holds what the run exchange by exchange decides, from the same streams in the same order,
so the same seed gives the same tape: the owner and time of every update k, the index j of that
answer among its owner's answers (which noise draw it carries), the iteration whose model its
query point was made of, the ticks at which an owner whose budget is spent refuses and leaves, and
why the run stopped. In the ideal network the tape is drawn in bulk (:func:`ideal_tapes`), as
:func:`dpmarket.training.run_uniform` would draw it; refusals and caps come from the owners'
ledgers (:meth:`DataOwner.answers_left`), so a tape never holds an answer a ledger would refuse, and
:func:`log_tape` writes its rows, paying every answer from the ledgers. In the SimPy networks the
engine itself drives a :class:`Recorder`, which logs and pays exactly as the run's
:class:`~dpmarket.training.Training` and computes nothing (:func:`network_tape`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dpmarket import rng as streams
from dpmarket.events import BLOCK_ROWS, EventLog
from dpmarket.owners import DataOwner
from dpmarket.training import Metrics, Superposition, Training

LEAVE_DETAIL = "budget spent: stops taking part"
SMALL = 16  # owners up to which answer indices are running counts rather than a sort


@dataclass(frozen=True)
class Leave:
    """An owner whose budget is spent ticks, refuses and stops taking part (one refusal row)."""

    after: int  # exchanges completed before this tick
    time: float
    owner: int  # slot


@dataclass(frozen=True)
class Tape:
    """The exchanges of one run, in order (k = 1…K is entry k − 1).

    ``owner`` is the slot asked at each exchange (asynchronous learners) or empty when every owner
    answers each round (synchronous learners, ``rounds`` true); ``answer`` is the index j of that
    answer among its owner's answers (the j-th noise draw of its stream; in rounds, j = k − 1 for
    every owner). ``query`` is, in a network, the number of updates applied when each update's query
    point was computed (several channels let exchanges overlap); None means the one before, k − 1.
    """

    owner: np.ndarray  # int64 (K,), or (0,) for rounds
    time: np.ndarray  # float64 (K,)
    answer: np.ndarray  # int64 (K,)
    leaves: tuple[Leave, ...]
    stop_reason: str
    rounds: bool
    query: np.ndarray | None = None  # int64 (K,): updates done when each update's query was sent

    @property
    def staleness(self) -> int:
        """The most updates applied between an update's query and its own application (0: none)."""
        if self.query is None or not len(self.query):
            return 0
        return int(np.max(np.arange(len(self.query)) - self.query))

    @property
    def updates(self) -> int:
        """K, the updates of the learner."""
        return len(self.time)

    def answers_per_owner(self, owners: int) -> np.ndarray:
        """How many answers each of ``owners`` slots gives on this tape."""
        if self.rounds:
            return np.full(owners, self.updates, dtype=np.int64)
        return np.bincount(self.owner, minlength=owners).astype(np.int64)

    @property
    def end_time(self) -> float:
        """The time of the last exchange (0 without any), where the inline run's clock stops."""
        return float(self.time[-1]) if len(self.time) else 0.0


def capacities(owners: list[DataOwner]) -> np.ndarray:
    """How many more answers each owner's ledger can pay: what the schedule may ask of it."""
    return np.array([o.answers_left for o in owners], dtype=np.int64)


def ideal_tape(algorithm: str, capacity: np.ndarray, iterations: int, selection: np.random.Generator,
               clocks: np.random.Generator, rates: np.ndarray | None) -> Tape:
    """The tape of :func:`~dpmarket.training.run_uniform` with owners that can pay ``capacity``
    answers: asynchronous exchanges, or synchronous rounds for the other learners."""
    if algorithm != "async":
        total = float(len(capacity)) if rates is None else float(np.sum(rates))
        return rounds_tape(capacity, iterations, clocks, total)
    return exchanges_tape(capacity, iterations, selection, clocks, rates)


def ideal_tapes(algorithm: str, capacity: np.ndarray, iterations: int, seeds: Sequence[int],
                rates: np.ndarray | None) -> list[Tape]:
    """The tape of each replication seed (its ``selection`` and ``clocks`` streams), each equal to
    :func:`ideal_tape`'s. Asynchronous tapes are drawn together: every replication's T picks, their
    answer indices in one sort and their times in one cumulative sum; a replication in which some
    owner would be asked beyond its ledger is redrawn alone by :func:`exchanges_tape`."""
    clocks = [streams.stream(seed, "clocks") for seed in seeds]
    if algorithm != "async":
        total = float(len(capacity)) if rates is None else float(np.sum(rates))
        return [rounds_tape(capacity, iterations, c, total) for c in clocks]
    selections = [streams.stream(seed, "selection") for seed in seeds]
    clock = Superposition(len(capacity), rates)
    states = [s.bit_generator.state for s in selections]
    picks = np.array([_picks(clock, s, iterations) for s in selections]).reshape(len(seeds), iterations)
    ranks = row_ranks(picks, len(capacity))
    refused = np.any(ranks >= capacity[picks], axis=1)
    waits = np.array([c.standard_exponential(iterations) for c, r in zip(clocks, refused, strict=True)
                      if not r]).reshape(-1, iterations)
    times = iter(np.cumsum(waits * clock.mean_wait, axis=1))  # exponential(mean wait), tick after tick
    tapes = []
    for r, state in enumerate(states):
        if refused[r]:
            selections[r].bit_generator.state = state
            tapes.append(exchanges_tape(capacity, iterations, selections[r], clocks[r], rates))
        else:
            tapes.append(Tape(picks[r], next(times), ranks[r], (), "iterations", False))
    return tapes


def rounds_tape(capacity: np.ndarray, iterations: int, clocks: np.random.Generator, total: float) -> Tape:
    """Rounds at the ticks of the superposed clocks (total rate ``total``) until T rounds, or until an
    owner cannot answer another (no round is then possible), as the inline driver runs them."""
    rounds = int(min(iterations, int(np.min(capacity))))
    time = np.cumsum(clocks.standard_exponential(rounds) * (1.0 / total))  # exponential(1/total)
    reason = "iterations" if rounds == iterations else "budgets exhausted"
    return Tape(np.zeros(0, dtype=np.int64), time, np.arange(rounds, dtype=np.int64), (), reason, True)


def exchanges_tape(capacity: np.ndarray, iterations: int, selection: np.random.Generator,
                   clocks: np.random.Generator, rates: np.ndarray | None) -> Tape:
    """Algorithm 1's exchanges in the ideal network, drawn in bulk.

    The inline driver draws, per tick, a wait from ``clocks`` and the ticking owner from
    ``selection``; numpy's bulk draws are the same numbers one after another. Picks are drawn for
    the updates still missing; the first pick of an owner whose budget is spent is its leaving
    tick: the selection stream is rewound to just after it (the next picks are among fewer owners)
    and drawing goes on. Waits are drawn at the end, one per tick, each scaled by the mean wait of
    the owners ticking then.
    """
    clock = Superposition(len(capacity), rates)
    used = np.zeros(len(capacity), dtype=np.int64)
    owners, answers, means, ticks_leave, leaves = [], [], [], [], []
    done, ticks, reason = 0, 0, "iterations"
    while done < iterations:
        if np.all(used >= capacity):
            reason = "budgets exhausted"
            break
        picks, rank, stop = _accepted(clock, selection, iterations - done, used, capacity)
        accepted = picks[:stop]
        owners.append(accepted)
        answers.append(rank[:stop])
        used += np.bincount(accepted, minlength=len(used))
        done, ticks = done + stop, ticks + stop
        means.append(np.full(stop, clock.mean_wait))
        if stop < len(picks) and np.any(used < capacity):  # the next pick ticks, and leaves
            leaver = int(picks[stop])
            ticks_leave.append(ticks)
            leaves.append((done, leaver))
            means.append(np.full(1, clock.mean_wait))
            ticks += 1
            clock.remove(leaver)
    time = np.cumsum(clocks.standard_exponential(ticks) * np.concatenate(means or [np.zeros(0)]))
    is_leave = np.zeros(ticks, dtype=bool)
    is_leave[ticks_leave] = True
    rows = tuple(Leave(after, float(time[t]), o) for t, (after, o) in zip(ticks_leave, leaves, strict=True))
    return Tape(_joined(owners), time[~is_leave], _joined(answers), rows, reason, False)


def _accepted(clock: Superposition, selection: np.random.Generator, wanted: int, used: np.ndarray,
              capacity: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Up to ``wanted`` next picks, each one's answer index (answers its owner gave before), and how
    many of them are answered: all, or those before the first pick of an owner whose budget is spent
    (or before every budget is spent). ``selection`` is left just after the last pick consumed: the
    answered ones and the leaving tick, if any."""
    state = selection.bit_generator.state
    picks = _picks(clock, selection, wanted)
    rank = used[picks] + answer_ranks(picks, len(used))
    over = np.flatnonzero(rank >= capacity[picks])
    if len(over) == 0:
        return picks, rank, len(picks)
    stop = int(over[0])
    left = int(np.sum(capacity - used))  # answers until every budget is spent
    stop = min(stop, left)
    consumed = stop if stop == left else stop + 1  # every budget spent: the loop ends before a tick
    selection.bit_generator.state = state
    _picks(clock, selection, consumed)
    return picks[:consumed], rank[:consumed], stop


def _picks(clock: Superposition, selection: np.random.Generator, count: int) -> np.ndarray:
    """The owners of the next ``count`` ticks, as :meth:`Superposition.pick` draws them one by one."""
    ids = np.asarray(clock.ids, dtype=np.int64)
    if clock.cumulative is None:
        return ids[selection.integers(len(ids), size=count)]
    slots = np.searchsorted(clock.cumulative, selection.random(count), side="right")
    return ids[np.minimum(slots, len(ids) - 1)]


def answer_ranks(picks: np.ndarray, owners: int) -> np.ndarray:
    """For each pick, how many earlier picks went to the same owner (0 for its first)."""
    if owners <= SMALL:  # a running count per owner: cheaper than sorting for a few owners
        hits = picks[:, None] == np.arange(owners)
        return np.cumsum(hits, axis=0)[np.arange(len(picks)), picks] - 1
    order = np.argsort(picks, kind="stable")
    sorted_picks = picks[order]
    starts = np.flatnonzero(np.concatenate(([True], sorted_picks[1:] != sorted_picks[:-1])))
    counts = np.diff(np.append(starts, len(picks)))
    rank = np.empty(len(picks), dtype=np.int64)
    rank[order] = np.arange(len(picks)) - np.repeat(starts, counts)
    return rank


def row_ranks(picks: np.ndarray, owners: int) -> np.ndarray:
    """:func:`answer_ranks` of each row of ``picks`` (R, T), in one sort."""
    keys = np.arange(picks.shape[0])[:, None] * owners + picks
    return answer_ranks(keys.ravel(), picks.shape[0] * owners).reshape(picks.shape)


def _joined(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, dtype=np.int64)


def log_tape(tape: Tape, owners: list[DataOwner], log: EventLog) -> None:
    """The event rows of ``tape``, as the inline run records them, paying each answer from its owner's
    ledger in order; a ledger that refuses an answer on the tape is a schedule bug (RuntimeError)."""
    if tape.rounds:
        _log_rounds(tape, owners, log)
        return
    record, leaves = log.record, list(tape.leaves)
    for k, (owner, time) in enumerate(zip(tape.owner.tolist(), tape.time.tolist(), strict=True)):
        while leaves and leaves[0].after == k:
            _log_leave(leaves.pop(0), owners, log)
        record(time, "query", owner, None, None, None, None)
        record(time, "response", owner, None, _pay(owners[owner]), None, None)
        record(time, "update", owner, k + 1, None, None, None)
    for leave in leaves:
        _log_leave(leave, owners, log)


def _log_rounds(tape: Tape, owners: list[DataOwner], log: EventLog) -> None:
    record = log.record
    for k, time in enumerate(tape.time.tolist()):
        for i, owner in enumerate(owners):
            record(time, "query", i, None, None, None, None)
            record(time, "response", i, None, _pay(owner), None, None)
        record(time, "update", -1, k + 1, None, None, None)


def _log_leave(leave: Leave, owners: list[DataOwner], log: EventLog) -> None:
    owner = owners[leave.owner]
    log.record(leave.time, "refusal", leave.owner, None, owner.epsilon_spent, None, LEAVE_DETAIL)


def _pay(owner: DataOwner) -> float:
    """Charge one answer to ``owner``'s ledger; its ε spent after it."""
    if not owner.ledger.try_pay(owner.charge):
        raise RuntimeError(f"owner {owner.index}: the tape holds an answer its ledger refuses")
    return owner.epsilon_spent


class Recorder(Training):
    """The schedule of a run in a network: the SimPy engine drives it exactly as it drives a run's
    :class:`~dpmarket.training.Training`, and it logs the same rows and pays the same ledgers, but
    computes nothing: a query returns the number of updates done (the iteration whose model the
    query point is made of), an answer the index j of the owner's answer (its j-th noise draw), and
    an update goes on the tape. Nothing the engine decides depends on the model, only on the ledgers
    (an owner refuses once its budget is spent), so the engine runs exactly as it would with the
    learner, and :mod:`dpmarket.replay` applies the tape afterwards.
    """

    k = 0  # completed updates (a plain attribute here: the engine reads it after every update)

    def __init__(self, owners: list[DataOwner], log: EventLog, record_at: np.ndarray) -> None:
        self.owners, self.log, self._record = owners, log, log.record
        self._rows = log.block
        self._row = self._rows.append  # the rows of every exchange, straight into the log's block
        self.progress, self.stop_reason, self.time = None, "", 0.0
        self._record_at = iter(np.unique(record_at).tolist())
        self._due = next(self._record_at)
        self.metrics = Metrics()  # k and time as the run records them; ψ is measured after the replay
        # the tape's columns, appended to per update: owner, time, answer j, query's k
        self._owner, self._time, self._answer, self._query = [], [], [], []
        self._measure()

    def query(self, owner: int, time: float, channel: int | None = None) -> int:
        self.time = time
        self._row((time, "query", owner, None, None, channel, None))
        return self.k

    def answer(self, owner: int, theta: int, time: float, channel: int | None = None) -> int | None:
        self.time = time
        who = self.owners[owner]
        ledger = who.ledger
        if not ledger.try_pay(who.charge):
            self._record(time, "refusal", owner, None, ledger.spent_float, channel, "budget spent")
            return None
        self._row((time, "response", owner, None, ledger.spent_float, channel, None))
        return ledger.answers - 1  # the answers paid before this one: its noise draw

    def apply(self, owner: int, theta_bar: int, answer: int, time: float, channel: int | None = None) -> None:
        self.time = time
        self._owner.append(owner)
        self._time.append(time)
        self._answer.append(answer)
        self._query.append(theta_bar)
        self.k = k = self.k + 1
        self._row((time, "update", owner, k, None, channel, None))
        if len(self._rows) >= BLOCK_ROWS:
            self.log.settle()
        if k == self._due:
            self._measure()

    def _measure(self) -> None:
        if self.k == self._due:
            self.metrics.add(self.k, self.time, float("nan"))
            self._due = next(self._record_at, -1)

    def finish(self) -> None:
        self.metrics.add(self.k, self.time, float("nan"))

    def tape(self, stop_reason: str) -> Tape:
        """The updates so far as a tape (the engine's events are in the log)."""
        owner, answer, query = (np.array(c, dtype=np.int64) for c in (self._owner, self._answer, self._query))
        return Tape(owner, np.array(self._time, dtype=float), answer, (), stop_reason, False, query)


def fresh(owners: list[DataOwner]) -> list[DataOwner]:
    """Copies of ``owners`` with their ledgers as they are now (a replication pays its own)."""
    out = []
    for owner in owners:
        _ = owner.answers_left  # the ledger caches how many answers fit; every copy inherits it
        twin = _shallow(owner)
        twin.ledger = _shallow(owner.ledger)
        out.append(twin)
    return out


def _shallow(thing: object) -> object:
    """``copy.copy`` of a plain object (its attributes shared), without copy's generic dispatch: a
    replication copies every owner and its ledger."""
    twin = object.__new__(type(thing))
    twin.__dict__.update(thing.__dict__)
    return twin


def network_tape(scenario, owners: list[DataOwner], names: list[str], record_at: np.ndarray,
                 log: EventLog | None = None) -> tuple[Tape, Recorder, object]:
    """Run the SimPy engine of ``scenario`` (its seed: the replication's) on copies of ``owners`` that
    pay their own ledgers; the tape, the recorder (metrics' k and time, event counts) and the
    engine's report."""
    from dpmarket.sim import run_network  # deferred: SimPy is needed only here

    log = log if log is not None else EventLog(None, by_owner=False)  # the run's counts per kind
    recorder = Recorder(fresh(owners), log, record_at)
    network = run_network(scenario, recorder, names)
    return recorder.tape(network.stop_reason), recorder, network
