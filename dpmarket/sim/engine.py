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

import math
from collections.abc import Callable, Generator
from dataclasses import dataclass
from functools import partial

import numpy as np
import simpy

from dpmarket import rng as streams
from dpmarket.scenario import Scenario
from dpmarket.sim import availability as avail
from dpmarket.sim.channel import Channel
from dpmarket.sim.exchange import Exchange, Slot
from dpmarket.training import Training

Arrived = Callable[[simpy.Event], None]  # a message reached the learner (a SimPy callback)
Lost = Callable[[], None]  # a message was lost


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

    def __init__(self, scenario: Scenario, training: Training, names: list[str]) -> None:
        self.s, self.net, self.training = scenario, scenario.network, training
        self.env = simpy.Environment()
        self.timeout = self.env.timeout  # every stage of every message schedules one
        N = len(training.owners)
        self.N, self.T = N, scenario.learner.iterations
        self.rates = np.array([scenario.owner_value(i, "clock_rate") for i in range(N)])
        # clock waits drawn ahead per owner: about 16,384 floats in all, 16 to 256 per owner
        self._block = max(16, min(256, 16_384 // N))
        self.channel_of = np.array([scenario.owner_value(i, "channel") for i in range(N)])
        self._channel = self.channel_of.tolist()  # the same, as Python ints for the hot paths
        self.channels = [Channel(self.env, c, self.net.collisions) for c in range(self.net.channels)]
        self.availability = avail.Availability(self.env, N, self._availability_changed, self._gone,
                                               self.net.horizon)
        self._epoch, self._holds = self.availability.epoch, self.availability.holds
        # per-owner and per-channel flags as Python lists: read at every tick and message
        self.in_exchange = [False] * N
        self.learner_busy = [False] * self.net.channels
        self.ready: list[set[int]] = [set() for _ in range(self.net.channels)]
        self.channel_rng = streams.stream(scenario.seed, "channel")
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
        net = self.net  # settings read at every message, as plain Python values
        self._tau, self._latency = net.transmission_time, net.latency
        self._loss = net.loss_probability
        self.downlink = net.transmission_time + net.latency  # the query's delivery
        # uplink(i, c, epoch, arrived, lost): send one message of owner i on channel c, then
        # arrived(event) once it reached the learner, or lost() (collision, random loss, or
        # carrier sensing gave up or found the owner offline). Every stage is a SimPy event
        # whose callback runs the next one: a message costs no process of its own.
        self.uplink = self._sense_then_send if net.carrier_sense else self._send
        # A market in time (dpmarket/market/dynamic.py) says whether owner i takes part now; None: always
        self.takes_part: Callable[[int], bool] | None = None

    # -- logging -------------------------------------------------------------------------
    def emit(self, kind: str, owner: int, channel: int | None = None, detail: str | None = None):
        self.record(self.env.now, kind, owner, None, None, channel, detail)

    def _availability_changed(self, owner: int, online: bool) -> None:
        self.emit("reconnect" if online else "dropout", owner, self._channel[owner])
        if not online:
            self.ready[self._channel[owner]].discard(owner)
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
        """Create every owner's clock and availability processes, and the learner's."""
        trace = self._trace()
        for i in range(self.N):
            self.env.process(self.clock(i, streams.stream(self.s.seed, "clocks", i)))
            self._start_availability(i, trace)
        if self.net.mode == "broadcast":
            for c in range(self.net.channels):
                self.env.process(self.broadcaster(c))

    def _trace(self) -> dict[int, list[tuple[float, float]]]:
        return avail.read_trace(self.net.availability, self._names) if self.net.availability else {}

    def _start_availability(self, i: int, trace: dict) -> None:
        on, off = self.s.owner_value(i, "mean_online"), self.s.owner_value(i, "mean_offline")
        if on is not None:
            gen = streams.stream(self.s.seed, "availability", i)
            self.env.process(avail.alternating(self.availability, i, on, off, gen))
        spans = [(w.start, w.end) for w in self.s.owner_value(i, "outages")]
        if i in trace:
            spans += avail.offline_gaps(trace[i])
        if spans:
            self.env.process(avail.windows(self.availability, i, spans))

    def clock(self, i: int, gen: np.random.Generator) -> Generator:
        """Owner i's Poisson clock; what a tick does depends on the access mode.

        This loop runs at every tick of every owner, so what it reads is bound to locals.
        """
        owner, c, env, record = self.training.owners[i], self._channel[i], self.env, self.record
        timeout, holds, busy = env.timeout, self.availability.holds, self.in_exchange
        broadcast, takes_part = self.net.mode == "broadcast", self.takes_part
        for wait in streams.in_blocks(partial(gen.exponential, 1.0 / self.rates[i]), self._block):
            yield timeout(wait)
            if self.awake is not None:  # no owner can answer: sleep until one is back
                yield self.awake
                continue
            record(env.now, "tick", i, None, None, c, None)
            if holds[i] or busy[i]:
                continue
            if takes_part is not None:  # a market in time: out of it, the tick does nothing else
                if not takes_part(i):
                    continue
                owner = self.training.owners[i]  # a joiner's ledger is made when it joins
            if owner.exhausted:
                self.training.leave(i, env.now, c)
                self._depart(i, "budgets exhausted")
                return
            if broadcast:
                self.ready[c].add(i)
            else:
                busy[i] = True
                Exchange(self, i, c).start()

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
        """End the run if no owner is left and no request-mode exchange is still under way.

        An owner that left by going offline (its trace ended, or past the horizon) may leave an
        exchange on the air; the run ends once it is resolved (lost, or collided), so the
        channels' counts are whole.
        """
        if self.closing is not None and not self.done.triggered and not any(self.in_exchange):
            self.done.succeed(self.closing)

    def _send(self, i: int, c: int, epoch: int, arrived: Arrived, lost: Lost) -> None:
        """Put one message of owner i on channel c now (``uplink`` without carrier sensing)."""
        ticket = self.channels[c].start()
        message = (i, c, ticket, arrived, lost)
        self.timeout(self._tau, message).callbacks.append(self._transmitted)

    def _transmitted(self, event: simpy.Event) -> None:
        """The message leaves the air: collided, lost at random, or on its way (latency)."""
        i, c, ticket, arrived, lost = event.value
        if not self.channels[c].finish(ticket):
            self.record(event.env.now, "collision", i, None, None, c, None)
            lost()
        elif self._loss and next(self._loss_draws) < self._loss:
            self.record(event.env.now, "loss", i, None, None, c, "random")
            lost()
        elif self._latency:
            self.timeout(self._latency).callbacks.append(arrived)
        else:
            arrived(event)

    def _sense_then_send(self, i: int, c: int, epoch: int, arrived: Arrived, lost: Lost,
                         attempt: int = 0) -> None:
        """Carrier sensing (``uplink``): back off while the channel is busy; send once it is free.

        At most ``max_attempts`` looks at the channel. Only an online owner puts a message on
        the air: one that went offline while backing off (its ``epoch`` changed) loses the
        exchange at its next attempt, without transmitting.
        """
        net = self.net
        if attempt == net.max_attempts:
            self.emit("loss", i, c, "channel busy: gave up")
            lost()
        elif attempt and self.dropped(i, c, epoch):
            lost()
        elif not self.channels[c].busy:
            self._send(i, c, epoch, arrived, lost)
        else:
            self.emit("backoff", i, c)
            wait = self.channel_rng.exponential(net.backoff)
            retry = (i, c, epoch, arrived, lost, attempt + 1)
            self.timeout(wait, retry).callbacks.append(self._backed_off)

    def _backed_off(self, event: simpy.Event) -> None:
        self._sense_then_send(*event.value)

    def dropped(self, i: int, c: int, epoch: int) -> bool:
        """Whether owner i went offline since ``epoch``; if so its exchange is lost (and logged)."""
        if self._epoch[i] == epoch and not self._holds[i]:
            return False
        self.emit("loss", i, c, "owner went offline")
        return True

    def apply(self, i: int, c: int, theta_bar: np.ndarray, answer: np.ndarray) -> None:
        """The learner agent applies owner i's delivered answer; the run ends at T updates."""
        self.training.apply(i, theta_bar, answer, self.env.now, c)
        if self.training.k >= self.T and not self.done.triggered:
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
        self.start()
        return self.advance()

    def advance(self) -> str:
        """Run the started processes until T updates, the horizon, or no owner is left."""
        until = self.done
        if self.net.horizon is not None:
            until = self.env.any_of([self.done, self.env.timeout(self.net.horizon)])
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
        self.env.run()  # until an event calls _stop
        if self._stopped_by is None:
            raise RuntimeError('No scheduled events left but "until" event was not triggered')
        if self._stopped_by is pause:
            return None
        return self.done.value if self.done.triggered else "horizon"

    def _stop(self, event: simpy.Event) -> None:
        self._stopped_by = event
        raise simpy.core.StopSimulation(None)


def run_network(scenario: Scenario, training: Training, names: list[str]) -> NetworkRun:
    """Drive ``training`` with the SimPy engine of ``scenario.network``."""
    engine = Engine(scenario, training, names)
    return _report(engine, engine.run())


def run_in_steps(scenario: Scenario, training: Training, names: list[str],
                 arm: Callable[[simpy.Event], None]) -> Generator[None, None, NetworkRun]:
    """:func:`run_network` in steps, for a schedule streamed in chunks: before each step ``arm`` gets
    a fresh SimPy event, which the training triggers when it wants the engine to pause (a chunk of
    tape is full); each pause is a ``yield``, and the generator returns the engine's report. The
    pauses change nothing the engine does."""
    engine = Engine(scenario, training, names)
    engine.start()
    while True:
        pause = engine.env.event()
        arm(pause)
        reason = engine.advance_until(pause)
        if reason is not None:
            return _report(engine, reason)
        yield


def _report(engine: Engine, reason: str) -> NetworkRun:
    """The training's last measurement and the engine's report, once the run has stopped."""
    engine.training.finish()
    downtime = np.array([engine.availability.downtime(i) for i in range(engine.N)])
    return NetworkRun(reason, engine.channels, downtime, engine.rates, engine.channel_of)

