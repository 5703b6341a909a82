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
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass

import numpy as np
import simpy

from dpmarket import rng as streams
from dpmarket.scenario import Scenario
from dpmarket.sim import availability as avail
from dpmarket.sim.channel import Channel
from dpmarket.training import Training


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
        N = len(training.owners)
        self.N, self.T = N, scenario.learner.iterations
        self.rates = np.array([scenario.owner_value(i, "clock_rate") for i in range(N)])
        self.channel_of = np.array([scenario.owner_value(i, "channel") for i in range(N)])
        self._channel = self.channel_of.tolist()  # the same, as Python ints for the hot paths
        self.channels = [Channel(self.env, c, self.net.collisions) for c in range(self.net.channels)]
        self.availability = avail.Availability(self.env, N, self._availability_changed, self._gone)
        # per-owner and per-channel flags as Python lists: read at every tick and message
        self.in_exchange = [False] * N
        self.learner_busy = [False] * self.net.channels
        self.ready: list[set[int]] = [set() for _ in range(self.net.channels)]
        self.channel_rng = streams.stream(scenario.seed, "channel")
        # Without carrier sensing the channel stream only decides random losses, so its
        # uniforms can be drawn in blocks (the same sequence); back-offs interleave other draws.
        self._loss_draws = (_uniforms(self.channel_rng) if not self.net.carrier_sense
                            else iter(self.channel_rng.random, None))
        self.done = self.env.event()
        self.departed: set[int] = set()  # owners that will never answer again
        self._names = names
        self._record = training.log.record
        net = self.net  # settings read at every message, as plain Python values
        self._sense, self._tau, self._latency = net.carrier_sense, net.transmission_time, net.latency
        self._loss = net.loss_probability
        self._downlink = net.transmission_time + net.latency  # the query's delivery

    # -- logging -------------------------------------------------------------------------
    def emit(self, kind: str, owner: int, channel: int | None = None, detail: str | None = None):
        self._record(self.env.now, kind, owner, None, None, channel, detail)

    def _availability_changed(self, owner: int, online: bool) -> None:
        self.emit("reconnect" if online else "dropout", owner, self._channel[owner])
        if not online:
            self.ready[self._channel[owner]].discard(owner)

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
        owner, c, env, record = self.training.owners[i], self._channel[i], self.env, self._record
        timeout, holds, busy = env.timeout, self.availability.holds, self.in_exchange
        broadcast = self.net.mode == "broadcast"
        for wait in _exponentials(gen, 1.0 / self.rates[i]):
            yield timeout(wait)
            record(env.now, "tick", i, None, None, c, None)
            if holds[i] or busy[i]:
                continue
            if owner.exhausted:
                record(env.now, "refusal", i, None, owner.epsilon_spent, c,
                       "budget spent: stops taking part")
                self._depart(i, "budgets exhausted")
                return
            if broadcast:
                self.ready[c].add(i)
            else:
                busy[i] = True
                env.process(self.request(i, c))

    def _depart(self, owner: int, reason: str) -> None:
        """Owner i will never answer again (budget spent, or its trace ended)."""
        self.departed.add(owner)
        if len(self.departed) == self.N and not self.done.triggered:
            self.done.succeed(reason)

    def uplink(self, i: int, c: int, epoch: int) -> Generator:
        """Send one message from owner i on channel c; True if it reached the learner.

        Runs for every message, so the settings it reads were bound in ``__init__``.
        """
        if self._sense and not (yield from self._wait_for_silence(i, c, epoch)):
            return False
        channel, env = self.channels[c], self.env
        ticket = channel.start()
        yield env.timeout(self._tau)
        if not channel.finish(ticket):
            self._record(env.now, "collision", i, None, None, c, None)
            return False
        if self._loss and next(self._loss_draws) < self._loss:
            self._record(env.now, "loss", i, None, None, c, "random")
            return False
        if self._latency:
            yield env.timeout(self._latency)
        return True

    def _wait_for_silence(self, i: int, c: int, epoch: int) -> Generator:
        """Carrier sensing: back off while the channel is busy; True once it is free.

        At most ``max_attempts`` looks at the channel. Only an online owner puts a message on
        the air: one that went offline while backing off (its ``epoch`` changed) loses the
        exchange at its next attempt, without transmitting.
        """
        channel, net = self.channels[c], self.net
        for attempt in range(net.max_attempts):
            if attempt and self._dropped(i, c, epoch):
                return False
            if not channel.busy:
                return True
            self.emit("backoff", i, c)
            yield self.env.timeout(self.channel_rng.exponential(net.backoff))
        self.emit("loss", i, c, "channel busy: gave up")
        return False

    def request(self, i: int, c: int) -> Generator:
        """Request mode: owner i asks for an exchange; the learner serves it if it can.

        The exchange is query (downlink), private answer (uplink), update — unless the owner
        drops out or a message is lost on the way.
        """
        env, training, busy = self.env, self.training, self.learner_busy
        epoch = self.availability.epoch[i]
        self._record(env.now, "request", i, None, None, c, None)
        try:
            if not (yield from self.uplink(i, c, epoch)):
                return
            if busy[c]:
                self._record(env.now, "loss", i, None, None, c, "learner busy")
                return
            busy[c] = True
            try:
                theta_bar = training.query(i, env.now, c)
                yield env.timeout(self._downlink)
                if self._dropped(i, c, epoch):
                    return
                answer = training.answer(i, theta_bar, env.now, c)
                if answer is None or not (yield from self.uplink(i, c, epoch)):
                    return
                if not self._dropped(i, c, epoch):
                    self._apply(i, c, theta_bar, answer)
            finally:
                busy[c] = False
        finally:
            self.in_exchange[i] = False

    def _dropped(self, i: int, c: int, epoch: int) -> bool:
        if self.availability.epoch[i] == epoch and not self.availability.holds[i]:
            return False
        self.emit("loss", i, c, "owner went offline")
        return True

    def _apply(self, i: int, c: int, theta_bar: np.ndarray, answer: np.ndarray) -> None:
        self.training.apply(i, theta_bar, answer, self.env.now, c)
        if self.training.k >= self.T and not self.done.triggered:
            self.done.succeed("iterations")

    def broadcaster(self, c: int) -> Generator:
        """Broadcast mode: a query every Δ on channel c; one response is an exchange.

        Slots start at Δ, 2Δ, …; a slot's responses take transmission_time + latency, which
        validation keeps below Δ, so slots never overlap.
        """
        while True:
            yield self.env.timeout(self.net.broadcast_interval)
            self.emit("broadcast", -1, c)
            responders = sorted(self.ready[c])
            self.ready[c].clear()
            if not responders:
                self.emit("idle", -1, c)
                continue
            self.env.process(self.slot(c, responders))

    def slot(self, c: int, responders: list[int]) -> Generator:
        """All responders answer at once; they collide unless there is exactly one."""
        epochs = {i: self.availability.epoch[i] for i in responders}
        points = {i: self.training.query(i, self.env.now, c) for i in responders}
        answers = {i: self.training.answer(i, points[i], self.env.now, c) for i in responders}
        senders = [i for i in responders if answers[i] is not None]
        results = [self.env.process(self.uplink(i, c, epochs[i])) for i in senders]
        if results:
            yield self.env.all_of(results)
        # With collisions on, only a lone sender gets through; with them off, every delivered
        # answer is applied in owner order (a receiver that decodes simultaneous messages).
        for i, sent in zip(senders, results, strict=True):
            if sent.value and not self._dropped(i, c, epochs[i]) and not self.done.triggered:
                self._apply(i, c, points[i], answers[i])

    def _gone(self, owner: int) -> None:
        self._depart(owner, "no owner left")

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


def run_network(scenario: Scenario, training: Training, names: list[str]) -> NetworkRun:
    """Drive ``training`` with the SimPy engine of ``scenario.network``."""
    engine = Engine(scenario, training, names)
    reason = engine.run()
    training.finish()
    downtime = np.array([engine.availability.downtime(i) for i in range(engine.N)])
    return NetworkRun(reason, engine.channels, downtime, engine.rates, engine.channel_of)


def _exponentials(gen: np.random.Generator, scale: float, block: int = 32):
    """Exponential(scale) variates, drawn ``block`` at a time.

    numpy draws a block's variates one after another, so the sequence is exactly that of
    one call per variate, at a fraction of the per-call cost.
    """
    while True:
        yield from gen.exponential(scale, block).tolist()


def _uniforms(gen: np.random.Generator, block: int = 64):
    """Uniform [0, 1) variates drawn ``block`` at a time: the sequence of one call per variate."""
    while True:
        yield from gen.random(block).tolist()
