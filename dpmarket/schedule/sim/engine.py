"""The SimPy engine: owners' clocks, availability, channels and the learner agent.

Request mode: when an owner's Poisson clock ticks while it is online (and not already in an
exchange), it sends a request on its channel. A request that gets through, while the learner
is free on that channel, becomes one exchange: query (learner → owner, on the downlink),
the owner's DP answer (uplink), update. Broadcast mode: every Δ the learner broadcasts a query
on each channel; each online owner whose clock has ticked since its last answer responds;
exactly one response is an exchange, two or more collide and are all lost, none is an idle
slot. Every uplink message occupies its channel for ``transmission_time`` and overlapping
messages are lost (pure ALOHA); a message may also be lost at random, and arrives after
``latency``. With carrier sensing (request mode only) an owner that hears a busy channel
backs off before each new attempt. An owner going offline during its exchange loses the
exchange, at the engine's next check: when the query arrives, when the answer arrives, or, if
it is backing off, at its next attempt — an offline owner puts nothing on the air; a message
already on the air completes. ε is charged when the owner computes its answer, so an answer
that is then lost (or never sent) is still spent.

With one channel exchanges never overlap, so the learner applies Algorithm 1 exactly; with
several, an update uses the query point computed when its exchange began.

An owner leaves for good when its budget is spent (at its next tick: one refusal row), when its
trace ends, or when it goes offline until the horizon or later; its availability then stops. The
run ends at T updates, at the horizon, or once every owner has left and the exchanges on the air
are resolved. While no owner that has not left is online, clocks and broadcasters sleep.
"""

from __future__ import annotations

import gc
import math
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from heapq import heappush

import numpy as np
import simpy

from dpmarket import rng as streams
from dpmarket.schedule.events import BLOCK_ROWS
from dpmarket.schedule.protocol import Training
from dpmarket.schedule.sim import availability as avail
from dpmarket.schedule.sim.channel import Channel
from dpmarket.schedule.sim.exchange import Requests, Slot
from dpmarket.schedule.sim.network import Network
from dpmarket.schedule.sim.queue import NORMAL, Link, Stage, drain

# What an uplink message calls with its owner's link (owner, time): once it reached the learner
# (a one-element callbacks list, SimPy's own form, so that a latency stage can run it directly),
# or once it was lost.
Arrived = list[Callable[[Link], None]]
Lost = Callable[[Link], None]


@dataclass
class NetworkRun:
    """What the engine reports besides the training: why it stopped and the channels' load."""

    stop_reason: str
    channels: list[Channel]
    downtime: np.ndarray
    rates: np.ndarray
    channel_of: np.ndarray


class Engine:
    """One simulation: the environment, the processes and their shared state."""

    def __init__(self, network: Network, training: Training, names: list[str]) -> None:
        self.net, self.training = network, training
        self.env = simpy.Environment()
        self.schedule = self.env.schedule  # every tick and every stage of a message is a Stage
        # the hot paths put a stage on SimPy's queue as Environment.schedule does, without its call:
        # enqueue((at, priority, next(event_ids), stage)), ``at`` being now + delay, the same float
        self.enqueue, self.event_ids = partial(heappush, self.env._queue), self.env._eid
        N = len(training.owners)
        if network.owners != N:
            raise ValueError(f"a network of {network.owners} owners cannot run {N} owners' training")
        self.N, self.T = N, network.iterations
        self.rates = np.array(network.rates)
        # clock waits drawn ahead per owner, 16 at first and twice as many each time up to about
        # 16,384 floats in all (16 to 256 per owner): a short run draws few it does not use
        self._waits_ahead = max(16, min(256, 16_384 // N))
        self.channel_of = np.array(network.channel_of)
        self.owner_channel = self.channel_of.tolist()  # the same, as Python ints for the hot paths
        self.channels = [Channel(self.env, c, self.net.collisions) for c in range(self.net.channels)]
        self.availability = avail.Availability(self.env, N, self._availability_changed, self._gone,
                                               self.net.horizon)
        self._epoch, self._holds = self.availability.epoch, self.availability.holds
        # per-owner and per-channel flags as Python lists: read at every tick and message
        self.in_exchange = [False] * N
        self.slots_on_air = 0  # broadcast slots whose messages are not all resolved yet
        self.learner_busy = [False] * self.net.channels
        self.ready: list[set[int]] = [set() for _ in range(self.net.channels)]
        self.channel_rng = streams.stream(network.seed, "channel")
        # Without carrier sensing the channel stream only decides random losses, so its
        # uniforms can be drawn in blocks (the same sequence); back-offs interleave other draws.
        self._loss_draws = (streams.in_blocks(self.channel_rng.random, 1024)
                            if not self.net.carrier_sense else iter(self.channel_rng.random, None))
        self.done = self.env.event()
        self.departed: set[int] = set()  # owners that will never answer again
        self._reachable = N  # owners online that have not left: while none is, nothing can happen
        self.awake: simpy.Event | None = None  # while none is, clocks and broadcasts sleep on it
        self.closing: str | None = None  # why the run ends, once every owner has left
        self._away: str | None = None  # why the last owner that left offline did so
        self._names = names
        self.record = training.log.record  # a row of events.csv, given as Event's fields
        # the rows logged at every tick and message go straight into the log's block (a tuple of
        # Event's fields each); every tick settles the block (written once full)
        self._log, self._rows = training.log, training.log.block
        self.row = self._rows.append
        self._owners = training.owners
        self._next_wait: list[Callable[[], float]] = [float] * N  # each clock's next wait, drawn in blocks
        self._clocks = [Stage(i) for i in range(N)]  # each owner's next tick
        self.links = [Link(i) for i in range(N)]  # each owner's message in flight
        # what SimPy calls when a stage fires (lists shared by every stage of a kind)
        self._on_tick, self._on_transmitted = [self._tick], [self._transmitted]
        self._on_backed_off = [self._backed_off]
        self.requests = Requests(self) if self.net.mode == "request" else None
        # what a tick of an online owner that is free and can pay does: request, or get ready
        self._act = self.requests.start if self.requests is not None else self._ready
        net = self.net  # settings read at every message, as plain Python values
        self._tau, self._latency = net.transmission_time, net.latency
        self._loss = net.loss_probability
        self.downlink = net.transmission_time + net.latency  # the query's delivery
        # uplink(i, c, epoch, now, arrived=, lost=): send one message of owner i on channel c at
        # time now, then arrived[0](link) once it reached the learner, at link.at, or lost(link)
        # (collision, random loss, or carrier sensing gave up or found the owner offline).
        # Every stage is a SimPy event whose callback runs the next one: a message costs no
        # process of its own.
        self.uplink = self._sense_then_send if net.carrier_sense else self._send
        # A market in time (dpmarket/markets/dynamic.py) says whether owner i takes part now; None: always
        self.takes_part: Callable[[int], bool] | None = None

    # -- logging -------------------------------------------------------------------------
    def emit(self, kind: str, owner: int, channel: int | None = None, detail: str | None = None):
        self.record(self.env.now, kind, owner, None, None, channel, detail)

    def _availability_changed(self, owner: int, online: bool) -> None:
        self.emit("reconnect" if online else "dropout", owner, self.owner_channel[owner])
        if not online:
            self.ready[self.owner_channel[owner]].discard(owner)
        if owner not in self.departed:
            self._count_reachable(1 if online else -1)

    def _count_reachable(self, change: int) -> None:
        """Track the online owners that have not left; the engine sleeps while there are none.

        Nothing but offline ticks and idle slots can happen then, so the clocks and broadcasters
        sleep until one comes back (or the run ends) instead of logging them: a clock's ticks
        during the wait are not drawn, and its next tick is Exp(λ) after the wake-up (memoryless,
        so the ticks after it have their law). Without this, an owner offline until t = 10⁹
        after the others left would make the run tick to 10⁹.
        """
        self._reachable += change
        if self._reachable == 0 and self.awake is None and len(self.departed) < self.N:
            self.awake = self.env.event()
        elif self._reachable > 0 and self.awake is not None:
            self.awake.succeed()
            self.awake = None

    # -- processes -----------------------------------------------------------------------
    def start(self) -> None:
        """Start every owner's clock and availability processes, and the learner's."""
        trace, seed, periods = self._trace(), self.net.seed, self.net.periods
        alternating = [i for i in range(self.N) if periods[i][0] is not None]
        gens = streams.streams([(seed, "clocks", i) for i in range(self.N)]
                               + [(seed, "availability", i) for i in alternating])
        periodic = dict(zip(alternating, gens[self.N:], strict=True))
        for i in range(self.N):
            self._start_clock(i, gens[i])
            self._start_availability(i, periods[i], periodic.get(i), trace)
        if self.net.mode == "broadcast":
            for c in range(self.net.channels):
                self.env.process(self.broadcaster(c))

    def _trace(self) -> dict[int, list[tuple[float, float]]]:
        return avail.read_trace(self.net.availability, self._names) if self.net.availability else {}

    def _start_availability(self, i: int, periods: tuple[float | None, float | None],
                            gen: np.random.Generator | None, trace: dict) -> None:
        """Owner i's availability: exponential online and offline ``periods`` (drawn from ``gen``),
        outage windows, its trace's gaps, or none of them (always online)."""
        on, off = periods
        if on is not None:
            avail.Alternating(self.availability, i, on, off, gen)
        spans = list(self.net.outages[i])
        if i in trace:
            spans += avail.offline_gaps(trace[i])
        if spans:
            self.env.process(avail.windows(self.availability, i, spans))

    def _start_clock(self, i: int, gen: np.random.Generator) -> None:
        """Owner i's Poisson clock: a chain of stages, each tick's callback scheduling the next
        (a process would cost a generator resume per tick and two events of its own)."""
        waits = streams.in_blocks(partial(gen.exponential, 1.0 / self.rates[i]), 16, self._waits_ahead)
        self._next_wait[i] = waits.__next__
        self._wind(i)

    def _wind(self, i: int, _event: simpy.Event | None = None) -> None:
        """Owner i's clock goes on: its next tick Exp(λ_i) from now."""
        wait, clock = self._next_wait[i](), self._clocks[i]
        clock.callbacks, clock.at = self._on_tick, self.env.now + wait
        self.schedule(clock, NORMAL, wait)

    def _tick(self, clock: Stage) -> None:
        """Owner ``clock.owner``'s clock ticks; what it does depends on the access mode (``_act``).

        This runs at every tick of every owner: it reads lists and bound methods only.
        """
        i = clock.owner
        if self.awake is not None:  # no owner can answer: sleep until one is back
            self.awake.callbacks.append(partial(self._wind, i))
            return
        now, c = clock.at, self.owner_channel[i]
        if len(self._rows) >= BLOCK_ROWS:
            self._log.settle()
        self.row((now, "tick", i, None, None, c, None))
        takes_part = self.takes_part  # a market in time says who takes part now; None: everyone
        if not (self._holds[i] or self.in_exchange[i]) and (takes_part is None or takes_part(i)):
            owner = self._owners[i]  # read at every tick: a market in time rebuilds a joiner's owner
            if not owner.ledger.can_pay(owner.charge):  # owner.exhausted, without the property's call
                self.training.leave(i, now, c)
                self._depart(i, "budgets exhausted")
                return
            self._act(i, c, now)
        at = now + self._next_wait[i]()
        clock.callbacks, clock.at = self._on_tick, at
        self.enqueue((at, NORMAL, next(self.event_ids), clock))

    def _ready(self, i: int, c: int, _now: float) -> None:
        """Broadcast mode: owner i will answer the next query on channel c."""
        self.ready[c].add(i)

    def _depart(self, owner: int, reason: str) -> None:
        """Owner i will never answer again (budget spent, its trace ended, or offline past the
        horizon): its availability stops, and the run ends when no owner is left."""
        online = self._holds[owner] == 0
        self.departed.add(owner)
        self.availability.left[owner] = True
        if reason != "budgets exhausted":
            self._away = reason  # "budgets exhausted" only if every owner spent its budget
        if len(self.departed) == self.N and not self.done.triggered:
            self.closing = self._away or reason
            self.settled()
        if online:
            self._count_reachable(-1)

    def settled(self) -> None:
        """End the run if no owner is left and no exchange or slot is still on the air.

        The last owner may leave with a message on the air: in request mode by going offline (its
        trace ended, or past the horizon), in broadcast mode also when its budget is spent after it
        answered a slot (it leaves at its next tick, which may come before its answer arrives). The
        run ends once every such message is resolved (applied, lost, or collided), so the answers
        paid for reach the learner and the channels' counts are whole.
        """
        if (self.closing is not None and not self.done.triggered and not self.slots_on_air
                and not any(self.in_exchange)):
            self.done.succeed(self.closing)

    def _send(self, i: int, c: int, epoch: int, now: float, *, arrived: Arrived, lost: Lost) -> None:
        """Put one message of owner i on channel c now (``uplink`` without carrier sensing)."""
        link = self.links[i]
        if link.callbacks is not None:  # an owner sends one message at a time: a bug if not
            raise RuntimeError(f"owner {i} sends a message while its link is busy")
        link.channel, link.ticket = c, self.channels[c].start(now)
        link.arrived, link.lost = arrived, lost
        at = now + self._tau
        link.callbacks, link.at = self._on_transmitted, at
        self.enqueue((at, NORMAL, next(self.event_ids), link))

    def _transmitted(self, link: Link) -> None:
        """The message leaves the air: collided, lost at random, or on its way (latency)."""
        i, c, now = link.owner, link.channel, link.at
        if not self.channels[c].finish(link.ticket, now):
            self.row((now, "collision", i, None, None, c, None))
            link.lost(link)
        elif self._loss and next(self._loss_draws) < self._loss:
            self.row((now, "loss", i, None, None, c, "random"))
            link.lost(link)
        elif self._latency:  # it reaches the learner latency later
            at = now + self._latency
            link.callbacks, link.at = link.arrived, at
            self.enqueue((at, NORMAL, next(self.event_ids), link))
        else:
            link.arrived[0](link)

    def _sense_then_send(self, i: int, c: int, epoch: int, now: float, *, arrived: Arrived, lost: Lost,
                         attempt: int = 0) -> None:
        """Carrier sensing (``uplink``): back off while the channel is busy; send once it is free.

        At most ``max_attempts`` looks at the channel. Only an online owner puts a message on
        the air: one that went offline while backing off (its ``epoch`` changed) loses the
        exchange at its next attempt, without transmitting.
        """
        net, link = self.net, self.links[i]
        if attempt == net.max_attempts:
            self.emit("loss", i, c, "channel busy: gave up")
            link.at = now
            lost(link)
        elif attempt and self.dropped(i, c, epoch):
            link.at = now
            lost(link)
        elif not self.channels[c].busy:
            self._send(i, c, epoch, now, arrived=arrived, lost=lost)
        else:
            self.emit("backoff", i, c)
            wait = self.channel_rng.exponential(net.backoff)
            link.channel, link.epoch, link.attempt = c, epoch, attempt + 1
            link.arrived, link.lost = arrived, lost
            link.callbacks, link.at = self._on_backed_off, now + wait
            self.schedule(link, NORMAL, wait)

    def _backed_off(self, link: Link) -> None:
        self._sense_then_send(link.owner, link.channel, link.epoch, link.at, arrived=link.arrived,
                              lost=link.lost, attempt=link.attempt)

    def dropped(self, i: int, c: int, epoch: int) -> bool:
        """Whether owner i went offline since ``epoch``; if so its exchange is lost (and logged)."""
        if self._epoch[i] == epoch and not self._holds[i]:
            return False
        self.emit("loss", i, c, "owner went offline")
        return True

    def stop(self, reason: str) -> None:
        """End the run now, for ``reason`` (request mode's stall rule, see exchange.STALL_REQUESTS)."""
        if not self.done.triggered:
            self.done.succeed(reason)

    def apply(self, i: int, c: int, theta_bar: np.ndarray, answer: np.ndarray, now: float) -> None:
        """The learner agent receives owner i's answer at ``now`` and applies it (Training.apply);
        the run ends at T updates."""
        training = self.training
        training.apply(i, theta_bar, answer, now, c)
        if training.k >= self.T and not self.done.triggered:
            self.done.succeed("iterations")

    def broadcaster(self, c: int) -> Generator:
        """Broadcast mode: a query every Δ on channel c; one response is an exchange.

        Slots start at Δ, 2Δ, …; a slot's responses take transmission_time + latency, which
        validation keeps below Δ, so slots never overlap.
        """
        delta = self.net.broadcast_interval
        while True:
            yield self.env.timeout(delta)
            while self.awake is not None:  # no owner can answer: sleep to the first slot after one can
                slot = self.env.now
                yield self.awake
                following = slot + delta * max(1, math.ceil((self.env.now - slot) / delta))
                yield self.env.timeout(max(0.0, following - self.env.now))
            self.emit("broadcast", -1, c)
            responders = sorted(self.ready[c])
            self.ready[c].clear()
            if not responders:
                self.emit("idle", -1, c)
                continue
            Slot(self, c, responders).start()

    def _gone(self, owner: int, end: float) -> None:
        """Owner i went offline until ``end``: the end of its trace, or past the horizon."""
        self._depart(owner, "no owner left" if end == float("inf") else "no owner online before the horizon")

    def run(self) -> str:
        """Run until T updates, the horizon, or every owner has retired or left."""
        with collector_paused():  # starting allocates the streams, stages and processes of every owner
            self.start()
            return self.advance()

    def advance(self) -> str:
        """Run the started processes until T updates, the horizon, or no owner is left."""
        until = self.done
        if self.net.horizon is not None:
            until = self.env.any_of([self.done, self.env.timeout(self.net.horizon)])
        with collector_paused():
            self.env.run(until=until)
        return self.done.value if self.done.triggered else "horizon"

    _until: simpy.Event | None = None  # what ends the run, once :meth:`advance_until` made it
    _stopped_by: simpy.Event | None = None

    def advance_until(self, pause: simpy.Event) -> str | None:
        """As :meth:`advance`, but return None as soon as ``pause`` (an event nothing waits on) is
        processed; call again to go on. The events processed, and their order, are those of one
        :meth:`advance`: a pause only stops the loop between two events."""
        if self._until is None:
            self._until = self.done
            if self.net.horizon is not None:
                self._until = self.env.any_of([self.done, self.env.timeout(self.net.horizon)])
            self._until.callbacks.append(self._stop)
        pause.callbacks.append(self._stop)
        self._stopped_by = None
        with collector_paused():
            drain(self.env)  # until an event calls _stop
        if self._stopped_by is None:
            raise RuntimeError('No scheduled events left but "until" event was not triggered')
        if self._stopped_by is pause:
            return None
        return self.done.value if self.done.triggered else "horizon"

    def close(self) -> None:
        """Take the engine apart once its run is over and reported: the stages left on SimPy's
        queue, the availability chains, the exchanges' state, the engine's own attributes.

        An engine is cyclic (stages call back bound methods of the objects that hold them): left
        whole, it waits for the cyclic collector, a few thousand objects per run, which a batch of
        replications keeps alive together; taken apart, reference counting frees it at once. The
        engine is unusable afterwards (processes and broadcast slots, which hold generators, are
        left to the collector).
        """
        self.env._queue.clear()
        self.availability.close()
        if self.requests is not None:
            self.requests.__dict__.clear()
        self.__dict__.clear()

    def _stop(self, event: simpy.Event) -> None:
        self._stopped_by = event
        raise simpy.core.StopSimulation(None)


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause CPython's cyclic garbage collector (restored after, if it was on).

    A run allocates a few tuples per event (its rows, SimPy's queue entries) and no cyclic garbage
    per event, only the engine's own structure, freed once the run is over; the collector would
    still scan the young objects every few hundred allocations, about a seventh of the engine's
    time on ny_hospitals. Memory is freed by reference counting as usual meanwhile.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def run_network(network: Network, training: Training, names: list[str]) -> NetworkRun:
    """Drive ``training`` with the SimPy engine on ``network``."""
    engine = Engine(network, training, names)
    return _report(engine, engine.run())


def run_in_steps(network: Network, training: Training, names: list[str],
                 arm: Callable[[simpy.Event], None]) -> Generator[None, None, NetworkRun]:
    """:func:`run_network` in steps, for a schedule streamed in chunks: before each step ``arm`` gets
    a fresh SimPy event, which the training triggers when it wants the engine to pause (a chunk of
    tape is full); each pause is a ``yield``, and the generator returns the engine's report. The
    pauses change nothing the engine does."""
    engine = Engine(network, training, names)
    engine.start()
    while True:
        pause = engine.env.event()
        arm(pause)
        reason = engine.advance_until(pause)
        if reason is not None:
            report = _report(engine, reason)
            engine.close()
            return report
        yield


def _report(engine: Engine, reason: str) -> NetworkRun:
    """The training's last measurement and the engine's report, once the run has stopped."""
    engine.training.finish()
    downtime = np.array([engine.availability.downtime(i) for i in range(engine.N)])
    return NetworkRun(reason, engine.channels, downtime, engine.rates, engine.channel_of)

