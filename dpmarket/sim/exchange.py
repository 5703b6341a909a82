"""Exchanges between the learner and an owner, as chains of SimPy events.

A request-mode exchange is request (uplink) → query (downlink) → private answer (uplink) →
update; a broadcast slot is every ready owner answering one query at once. Each stage is a
SimPy event (a time-out, or a message's :meth:`Engine.uplink`) whose callback runs the next
stage: an exchange is a short-lived state machine, not a process of its own, which keeps the
engine's cost per event close to SimPy's (see ``benchmarks/bench_engine.py``). The semantics
are those of the module docstring of :mod:`dpmarket.sim.engine`.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

import numpy as np
import simpy

if TYPE_CHECKING:
    from dpmarket.sim.engine import Engine


class Exchange:
    """Owner i's exchange in request mode, from its request to the update (or its loss)."""

    __slots__ = ("engine", "owner", "channel", "epoch", "theta_bar", "answer", "holds_learner")

    def __init__(self, engine: Engine, owner: int, channel: int) -> None:
        self.engine, self.owner, self.channel = engine, owner, channel
        self.epoch = engine.availability.epoch[owner]  # changes if the owner goes offline
        self.theta_bar: np.ndarray | None = None
        self.answer: np.ndarray | None = None
        self.holds_learner = False

    def start(self) -> None:
        """The owner sends its request (the caller marked it as in an exchange)."""
        engine, i, c = self.engine, self.owner, self.channel
        engine.record(engine.env.now, "request", i, None, None, c, None)
        engine.uplink(i, c, self.epoch, self._request_arrived, self._end)

    def _request_arrived(self, _event: simpy.Event) -> None:
        """The learner serves the request if it is free on the channel: it sends θ̄."""
        engine, i, c = self.engine, self.owner, self.channel
        if engine.learner_busy[c]:
            engine.record(engine.env.now, "loss", i, None, None, c, "learner busy")
            return self._end()
        engine.learner_busy[c] = self.holds_learner = True
        self.theta_bar = engine.training.query(i, engine.env.now, c)
        engine.timeout(engine.downlink).callbacks.append(self._query_arrived)

    def _query_arrived(self, _event: simpy.Event) -> None:
        """The owner answers privately (or refuses) unless it went offline meanwhile."""
        engine, i, c = self.engine, self.owner, self.channel
        if engine.dropped(i, c, self.epoch):
            return self._end()
        self.answer = engine.training.answer(i, self.theta_bar, engine.env.now, c)
        if self.answer is None:
            return self._end()
        engine.uplink(i, c, self.epoch, self._answer_arrived, self._end)

    def _answer_arrived(self, _event: simpy.Event) -> None:
        """The learner applies the answer unless the owner went offline meanwhile."""
        engine, i, c = self.engine, self.owner, self.channel
        if not engine.dropped(i, c, self.epoch):
            engine.apply(i, c, self.theta_bar, self.answer)
        self._end()

    def _end(self) -> None:
        """Free the learner (if this exchange held it) and the owner."""
        if self.holds_learner:
            self.engine.learner_busy[self.channel] = False
        self.engine.in_exchange[self.owner] = False
        if self.engine.closing is not None:
            self.engine.settled()


class Slot:
    """One broadcast slot on a channel: every ready owner answers the query at once.

    With collisions on, only a lone sender gets through; with them off, every delivered
    answer is applied in owner order (a receiver that decodes simultaneous messages).
    """

    def __init__(self, engine: Engine, channel: int, responders: list[int]) -> None:
        self.engine, self.channel = engine, channel
        now, training = engine.env.now, engine.training
        self.epochs = {i: engine.availability.epoch[i] for i in responders}
        self.points = {i: training.query(i, now, channel) for i in responders}
        self.answers = {i: training.answer(i, self.points[i], now, channel) for i in responders}
        self.senders = [i for i in responders if self.answers[i] is not None]
        self.delivered: dict[int, bool] = {}

    def start(self) -> None:
        """Every owner that answered transmits; the slot closes when all messages are done."""
        for i in self.senders:
            self.engine.uplink(i, self.channel, self.epochs[i], partial(self._receive, i, True),
                               partial(self._receive, i, False))

    def _receive(self, owner: int, delivered: bool, _event: simpy.Event | None = None) -> None:
        """One sender's message arrived or was lost; the last of them closes the slot."""
        self.delivered[owner] = delivered
        if len(self.delivered) == len(self.senders):
            self._close()

    def _close(self) -> None:
        """Apply every delivered answer whose owner stayed online, in owner order."""
        engine, c = self.engine, self.channel
        for i in self.senders:
            if (self.delivered[i] and not engine.dropped(i, c, self.epochs[i])
                    and not engine.done.triggered):
                engine.apply(i, c, self.points[i], self.answers[i])
