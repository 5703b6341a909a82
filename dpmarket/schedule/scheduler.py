"""The schedule of a run: who is asked when, decided before any learning.

Nothing about *who* talks *when* depends on θ: the ticking owner is drawn from the clocks, the
channel decides collisions and losses from times, and an owner refuses only once its ledger cannot
pay another answer, which depends on how many it gave, not on what they said. So a run splits into
schedule → replay → measure: this module writes the exchange *tape* of a run
(:mod:`dpmarket.schedule.tape`), :mod:`dpmarket.replay.kernel` applies the answers of many tapes at once,
:mod:`dpmarket.learning.measure` scores the models.

A schedule emits its tape in chunks of :data:`~dpmarket.schedule.tape.CHUNK` updates as it goes, from the
same streams in the same order as the run exchange by exchange, so the same seed gives the same
tape and memory stays bounded whatever T. In the ideal network the tapes of several replications
are drawn together, a chunk at a time (:class:`IdealSchedules`), as
:func:`dpmarket.schedule.protocol.run_uniform` would draw them; refusals and caps come from the owners'
ledgers (:meth:`DataOwner.answers_left`), so a tape never holds an answer a ledger would refuse, and
:func:`log_chunks` writes its rows, paying every answer from the ledgers. In the SimPy networks the
engine itself drives a :class:`Recorder`, which logs and pays exactly as the run's
:class:`~dpmarket.schedule.protocol.Training` and computes nothing; the engine pauses whenever a chunk is
full (:class:`NetworkSchedule`), so the replay consumes it before the engine goes on.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence

import numpy as np

from dpmarket import rng as streams
from dpmarket.privacy.owners import DataOwner
from dpmarket.schedule.events import BLOCK_ROWS, EventLog
from dpmarket.schedule.protocol import Metrics, Superposition, Training
from dpmarket.schedule.sim.network import Network
from dpmarket.schedule.tape import CHUNK, Chunk, Leave, Tape

LEAVE_DETAIL = "budget spent: stops taking part"
SMALL = 16  # owners up to which answer indices are running counts rather than a sort

__all__ = ["CHUNK", "Chunk", "IdealSchedules", "Leave", "NetworkSchedule", "Recorder", "Tape", "capacities",
           "ideal_tapes", "log_chunks", "log_tape", "network_tape"]


def capacities(owners: list[DataOwner]) -> np.ndarray:
    """How many more answers each owner's ledger can pay: what the schedule may ask of it."""
    return np.array([o.answers_left for o in owners], dtype=np.int64)


class IdealSchedules:
    """The ideal network's tapes of replications ``seeds`` (each from its ``selection`` and ``clocks``
    streams), drawn a chunk at a time for all of them together: each replication's next ``size``
    picks, their answer indices in one sort and their times in one cumulative sum. A replication in
    which some owner would be asked beyond its ledger goes on alone from that chunk
    (:class:`_Alone`, the owner leaves at that tick). Synchronous learners get rounds. Each
    replication's chunks are :meth:`chunks` (r); its stop reason, leaves and end time are known
    once they are all out."""

    def __init__(self, algorithm: str, capacity: np.ndarray, iterations: int, seeds: Sequence[int],
                 rates: np.ndarray | None, *, size: int = CHUNK) -> None:
        R, N = len(seeds), len(capacity)
        self.capacity, self.iterations, self.size, self.rates = capacity, iterations, size, rates
        self.rounds = algorithm != "async"
        self.clocks = [streams.stream(seed, "clocks") for seed in seeds]
        self.selections = [] if self.rounds else [streams.stream(seed, "selection") for seed in seeds]
        self.clock = Superposition(N, rates)
        self.total = float(N) if rates is None else float(np.sum(rates))
        self.planned = int(min(iterations, int(np.min(capacity)))) if self.rounds else iterations
        self.used = np.zeros((R, N), dtype=np.int64)
        self.last = np.zeros(R)  # each tape's last time so far
        self.done = 0  # updates drawn of the replications drawn together
        self.alone: dict[int, _Alone] = {}
        self.queues: list[deque[Chunk]] = [deque() for _ in seeds]
        self.stop_reason: list[str | None] = [None] * R
        self.leaves = [0] * R
        self.updates = [0] * R

    def chunks(self, r: int) -> Iterator[Chunk]:
        """Replication r's tape, chunk by chunk (at least one chunk, possibly empty)."""
        while True:
            while not self.queues[r] and self.stop_reason[r] is None:
                self._draw()
            if not self.queues[r]:
                return
            chunk = self.queues[r].popleft()
            self.updates[r] = chunk.end
            self.leaves[r] += len(chunk.leaves)
            yield chunk

    def end_time(self, r: int) -> float:
        """Where replication r's clock stops: its last exchange's time (0 without any)."""
        return float(self.last[r])

    def _draw(self) -> None:
        """The next chunk of every replication that is not finished."""
        together = [r for r in range(len(self.queues)) if r not in self.alone and self.stop_reason[r] is None]
        if together:
            (self._draw_rounds if self.rounds else self._draw_together)(together)
        for r, alone in list(self.alone.items()):
            if self.stop_reason[r] is None:
                self._put(r, alone.next(self.size))
                if alone.reason is not None:
                    self.stop_reason[r] = alone.reason

    def _draw_rounds(self, together: list[int]) -> None:
        """Rounds at the ticks of the superposed clocks (total rate ``total``) until T rounds, or until an
        owner cannot answer another (no round is then possible), as the inline driver runs them."""
        n = min(self.size, self.planned - self.done)
        for r in together:
            waits = self.clocks[r].standard_exponential(n) * (1.0 / self.total)  # exponential(1/total)
            self._put(r, Chunk(self.done, np.zeros(0, dtype=np.int64), self._times([r], waits[None])[0],
                               np.arange(self.done, self.done + n, dtype=np.int64), rounds=True))
        self.done += n
        if self.done == self.planned:
            for r in together:
                self.stop_reason[r] = "iterations" if self.planned == self.iterations else "budgets exhausted"

    def _draw_together(self, together: list[int]) -> None:
        """The next picks of the replications ``together``; one asked beyond a ledger goes on alone."""
        n, N = min(self.size, self.iterations - self.done), len(self.capacity)
        states = [self.selections[r].bit_generator.state for r in together]
        picks = np.array([_picks(self.clock, self.selections[r], n) for r in together])
        picks = picks.reshape(len(together), n)
        ranks = row_ranks(picks, N) + np.take_along_axis(self.used[together], picks, axis=1)
        refused = np.any(ranks >= self.capacity[picks], axis=1)
        for row in np.flatnonzero(refused).tolist():  # from this chunk on, drawn alone from where it was
            r = together[row]
            self.selections[r].bit_generator.state = states[row]
            self.alone[r] = _Alone(self, r)
        kept = np.flatnonzero(~refused)
        rows = [together[i] for i in kept.tolist()]
        waits = np.array([self.clocks[r].standard_exponential(n) for r in rows]).reshape(len(rows), n)
        times = self._times(rows, waits * self.clock.mean_wait)  # exponential(mean wait)
        keys = np.arange(len(rows))[:, None] * N + picks[kept]  # (replication, owner) of each pick
        self.used[rows] += np.bincount(keys.ravel(), minlength=len(rows) * N).reshape(len(rows), N)
        for i, r in enumerate(rows):
            self._put(r, Chunk(self.done, picks[kept[i]], times[i], ranks[kept[i]]))
            if self.done + n == self.iterations:
                self.stop_reason[r] = "iterations"
        self.done += n

    def _times(self, rows: list[int], waits: np.ndarray) -> np.ndarray:
        """Tick times after each of replications ``rows``' last (``waits``: a row each): cumulative
        sums going on from it (the same sums, in the same order, as one sum over the whole tape)."""
        times = np.cumsum(np.concatenate((self.last[rows, None], waits), axis=1), axis=1)[:, 1:]
        if waits.shape[1]:
            self.last[rows] = times[:, -1]
        return times

    def _put(self, r: int, chunk: Chunk) -> None:
        self.queues[r].append(chunk)


class _Alone:
    """Algorithm 1's exchanges of one replication in the ideal network once some owner would be asked
    beyond its ledger, drawn a chunk at a time.

    The inline driver draws, per tick, a wait from ``clocks`` and the ticking owner from
    ``selection``; numpy's bulk draws are the same numbers one after another. Picks are drawn for
    the updates still missing in the chunk; the first pick of an owner whose budget is spent is its
    leaving tick: the selection stream is rewound to just after it (the next picks are among fewer
    owners) and drawing goes on. Waits are drawn at the chunk's end, one per tick, each scaled by the
    mean wait of the owners ticking then.
    """

    def __init__(self, schedules: IdealSchedules, r: int) -> None:
        self.s, self.r = schedules, r
        self.clock = Superposition(len(schedules.capacity), schedules.rates)
        self.used, self.done = schedules.used[r], schedules.done
        self.reason: str | None = None

    def next(self, size: int) -> Chunk:
        """The next chunk (possibly empty); ``reason`` is set once the tape ends."""
        s, start = self.s, self.done
        owners, answers, means, leaving = [], [], [], []  # leaving: (tick in chunk, updates before)
        while len(means) < size + len(leaving) and self.done < s.iterations:
            if np.all(self.used >= s.capacity):
                self.reason = "budgets exhausted"
                break
            wanted = min(size - (len(means) - len(leaving)), s.iterations - self.done)
            picks, rank, stop = _accepted(self.clock, s.selections[self.r], wanted, self.used, s.capacity)
            owners.append(picks[:stop])
            answers.append(rank[:stop])
            self.used += np.bincount(picks[:stop], minlength=len(self.used))
            self.done += stop
            means.extend([self.clock.mean_wait] * stop)
            if stop < len(picks) and np.any(self.used < s.capacity):  # the next pick ticks, and leaves
                leaving.append((len(means), self.done, int(picks[stop])))
                means.append(self.clock.mean_wait)
                self.clock.remove(int(picks[stop]))
        if self.done >= s.iterations:
            self.reason = "iterations"
        elif self.reason is None and np.all(self.used >= s.capacity):
            self.reason = "budgets exhausted"
        return self._chunk(start, owners, answers, means, leaving)

    def _chunk(self, start: int, owners: list, answers: list, means: list, leaving: list) -> Chunk:
        waits = self.s.clocks[self.r].standard_exponential(len(means)) * np.array(means)
        times = self.s._times([self.r], waits[None])[0]
        is_leave = np.zeros(len(means), dtype=bool)
        is_leave[[t for t, _, _ in leaving]] = True
        leaves = tuple(Leave(after, float(times[t]), owner) for t, after, owner in leaving)
        return Chunk(start, _joined(owners), times[~is_leave], _joined(answers), leaves=leaves)


def ideal_tapes(algorithm: str, capacity: np.ndarray, iterations: int, seeds: Sequence[int],
                rates: np.ndarray | None, *, size: int = CHUNK) -> list[Tape]:
    """The whole tape of each replication seed (for inspection and tests; runs stream the chunks)."""
    schedules = IdealSchedules(algorithm, capacity, iterations, seeds, rates, size=size)
    tapes = []
    for r in range(len(seeds)):
        chunks = list(schedules.chunks(r))
        tapes.append(Tape.of(chunks, schedules.stop_reason[r], schedules.rounds))
    return tapes


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
    """The event rows of a whole ``tape`` (see :func:`log_chunks`)."""
    log_chunks(tape.chunks(), owners, log)


def log_chunks(chunks: Iterable[Chunk], owners: list[DataOwner], log: EventLog) -> None:
    """The event rows of a tape's ``chunks``, as the inline run records them, paying each answer from
    its owner's ledger in order; a ledger that refuses an answer on the tape is a schedule bug
    (RuntimeError). A leave after update k is written before update k + 1's rows."""
    record = log.record
    for chunk in chunks:
        if chunk.rounds:
            _log_rounds(chunk, owners, log)
            continue
        leaves = list(chunk.leaves)
        for k, (owner, time) in enumerate(zip(chunk.owner.tolist(), chunk.time.tolist(), strict=True),
                                          start=chunk.start):
            while leaves and leaves[0].after == k:
                _log_leave(leaves.pop(0), owners, log)
            record(time, "query", owner, None, None, None, None)
            record(time, "response", owner, None, _pay(owners[owner]), None, None)
            record(time, "update", owner, k + 1, None, None, None)
        for leave in leaves:
            _log_leave(leave, owners, log)


def _log_rounds(chunk: Chunk, owners: list[DataOwner], log: EventLog) -> None:
    record = log.record
    for k, time in enumerate(chunk.time.tolist(), start=chunk.start):
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
    :class:`~dpmarket.schedule.protocol.Training`, and it logs the same rows and pays the same ledgers, but
    computes nothing: a query returns the number of updates done (the iteration whose model the
    query point is made of), an answer the index j of the owner's answer (its j-th noise draw), and
    an update goes on the tape. Nothing the engine decides depends on the model, only on the ledgers
    (an owner refuses once its budget is spent), so the engine runs exactly as it would with the
    learner, and :mod:`dpmarket.replay.kernel` applies the tape afterwards, a chunk at a time: once
    ``size`` updates are waiting, ``on_full`` (if set) is called once, and the engine pauses for the
    chunk to be taken (:meth:`take`).
    """

    k = 0  # completed updates (a plain attribute here: the engine reads it after every update)

    def __init__(self, owners: list[DataOwner], log: EventLog, record_at: np.ndarray,
                 size: int = CHUNK) -> None:
        self.owners, self.log, self._record = owners, log, log.record
        self._rows = log.block
        self._row = self._rows.append  # the rows of every exchange, straight into the log's block
        self.progress, self.stop_reason, self.time = None, "", 0.0
        self._record_at = iter(np.unique(record_at).tolist())
        self._due = next(self._record_at)
        self.metrics = Metrics()  # k and time as the run records them; ψ is measured after the replay
        self.k, self._start, self._size = 0, 0, size
        # the chunk's columns, appended to per update: owner, time, answer j, query's k
        self._owner: list[int] = []
        self._time: list[float] = []
        self._answer: list[int] = []
        self._query: list[int] = []
        self.on_full: Callable[[], None] | None = None
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
        if len(self._owner) >= self._size and self.on_full is not None:
            self.on_full()
            self.on_full = None

    def _measure(self) -> None:
        if self.k == self._due:
            self.metrics.add(self.k, self.time, float("nan"))
            self._due = next(self._record_at, -1)

    def finish(self) -> None:
        self.metrics.add(self.k, self.time, float("nan"))

    def take(self) -> Chunk:
        """The updates recorded since the last chunk was taken, as the next chunk of the tape."""
        owner, answer, query = (np.array(c, dtype=np.int64) for c in (self._owner, self._answer, self._query))
        time = np.array(self._time, dtype=float)
        start, self._start = self._start, self.k
        self._owner, self._time, self._answer, self._query = [], [], [], []
        stale = np.any(query != np.arange(start, self.k))
        return Chunk(start, owner, time, answer, query if stale else None, asked=self._asked(start))

    def _asked(self, start: int) -> tuple[np.ndarray, np.ndarray] | None:
        """Queries a later chunk's update may use: None, as exchanges here never overlap."""
        return None


class OverlapRecorder(Recorder):
    """A recorder for networks whose exchanges may overlap (:func:`may_overlap`): it also notes each
    owner's latest query, and a chunk names those sent during its span (``Chunk.asked``), which an
    update of a later chunk may use (an owner has one exchange under way at a time)."""

    def __init__(self, owners: list[DataOwner], log: EventLog, record_at: np.ndarray,
                 size: int = CHUNK) -> None:
        super().__init__(owners, log, record_at, size)
        self._latest = [-1] * len(owners)  # per owner, the updates done at its latest query

    def query(self, owner: int, time: float, channel: int | None = None) -> int:
        self._latest[owner] = self.k
        return Recorder.query(self, owner, time, channel)

    def _asked(self, start: int) -> tuple[np.ndarray, np.ndarray]:
        latest = np.asarray(self._latest, dtype=np.int64)
        owners = np.flatnonzero(latest >= start)
        return owners, latest[owners]


def may_overlap(network: Network) -> bool:
    """Whether an update's query may be older than the update before it: several channels (each
    serves one exchange at a time), or a broadcast slot that applies several answers (no collisions).
    Otherwise exchanges never overlap, and the replay checks that they did not."""
    return network.channels > 1 or (network.mode == "broadcast" and not network.collisions)


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



class NetworkSchedule:
    """One run's schedule in a network: the SimPy engine on ``network`` (its seed: the replication's)
    driving a recorder on copies of ``owners`` that pay their own ledgers, paused at each full chunk.
    :meth:`chunks` runs it; afterwards ``network`` is the engine's report, ``recorder`` holds the
    metrics' k and time, the event counts and the time on the run's clock."""

    def __init__(self, network: Network, owners: list[DataOwner], names: list[str], record_at: np.ndarray,
                 log: EventLog | None = None, *, size: int | None = None) -> None:
        kind = OverlapRecorder if may_overlap(network) else Recorder
        log = log if log is not None else EventLog(None, by_owner=False)  # the run's counts per kind
        self.recorder = kind(fresh(owners), log, record_at, CHUNK if size is None else size)
        self.spec, self.names, self.network = network, names, None

    def chunks(self) -> Iterator[Chunk]:
        """The tape, a chunk at a time, as the engine produces it (at least one chunk)."""
        from dpmarket.schedule.sim.engine import run_in_steps  # deferred: SimPy is needed only here

        steps = run_in_steps(self.spec, self.recorder, self.names, self._arm)
        while True:
            try:
                next(steps)
            except StopIteration as end:
                self.network = end.value
                self.recorder.on_full = None  # the last pause, never to come (it holds the engine)
                break
            yield self.recorder.take()
        last = self.recorder.take()
        if last.updates or not self.recorder.k:
            yield last

    def _arm(self, pause) -> None:
        """The engine's next pause (a SimPy event) comes when the recorder's chunk is full."""
        self.recorder.on_full = pause.succeed


def network_tape(network: Network, owners: list[DataOwner], names: list[str], record_at: np.ndarray,
                 log: EventLog | None = None, *, size: int = CHUNK) -> tuple[Tape, Recorder, object]:
    """The whole tape of :class:`NetworkSchedule` (for inspection and tests), its recorder and the
    engine's report."""
    schedule = NetworkSchedule(network, owners, names, record_at, log, size=size)
    chunks = list(schedule.chunks())
    return Tape.of(chunks, schedule.network.stop_reason, False), schedule.recorder, schedule.network
