"""Exchanges between the learner and an owner, as chains of SimPy events.

A request-mode exchange is request (uplink) → query (downlink) → private answer (uplink) →
update; a broadcast slot is every ready owner answering one query at once. Each stage is a
SimPy event (a time-out, or a message's :meth:`Engine.uplink`) whose callback runs the next
stage: an exchange is a short-lived state machine, not a process of its own. In request mode an
owner is in at most one exchange at a time, so the exchanges' state is kept per owner in
:class:`Requests` (lists indexed by owner) and no object is made per exchange: the engine's time
per exchange stays close to a bare SimPy model's (see ``benchmarks/bench_replay.py``). The
semantics are those of the module docstring of :mod:`dpmarket.schedule.sim.engine`.

The two points where the protocol touches the learning are marked in each class: where the
owner computes its answer (``Training.answer``: ε is charged there) and where the learner
receives one (:meth:`Engine.apply`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dpmarket.schedule.sim.queue import NORMAL, Link

if TYPE_CHECKING:
    from dpmarket.schedule.sim.engine import Engine

# Request mode: once this many requests in a row were lost before the learner could serve one, the
# run stops ("stalled"). No ε is spent without a served request, so no budget can run out: when the
# channel loses every request (a transmission time long against the clocks makes every request
# overlap another), a run without a horizon would go on for ever. Pure ALOHA with Poisson clocks
# always leaves a positive chance of a request getting through, so the engine cannot prove that none
# ever will; it stops at a count no workable channel reaches (at one request in a thousand served,
# 100,000 losses in a row happen with probability e⁻¹⁰⁰).
STALL_REQUESTS = 100_000

class Requests:
    """Request mode's exchanges, one per owner at most, from each request to its update or loss.

    Per owner: the availability epoch when its exchange began (it changes if the owner goes
    offline), the query point θ̄ the learner sent, the owner's answer, and whether the exchange
    holds the learner of its channel.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        n = engine.N
        self.epoch = [0] * n
        self.point: list = [None] * n  # what Training.query returned (θ̄, or the Recorder's k)
        self.answer: list = [None] * n
        self.serving = [False] * n
        self.unserved = 0  # requests lost in a row since the learner last served one
        # bound once: each is read at every exchange
        self._epochs, self._busy = engine.availability.epoch, engine.learner_busy
        self._in_exchange, self._channel = engine.in_exchange, engine.owner_channel
        self._holds = engine.availability.holds
        self._row, self._training, self._links = engine.row, engine.training, engine.links
        # bound once: what the engine calls back, at every message
        self._on_request, self._on_answer = [self._request_arrived], [self._answer_arrived]
        self._on_query, self._on_lost = [self._query_arrived], self._lost
        self._on_request_lost = self._request_lost

    def start(self, i: int, c: int, now: float) -> None:
        """Owner i, online, free and able to pay, sends its request on channel c."""
        self._in_exchange[i] = True
        self._row((now, "request", i, None, None, c, None))
        self.epoch[i] = epoch = self._epochs[i]
        self.engine.uplink(i, c, epoch, now, arrived=self._on_request, lost=self._on_request_lost)

    def _request_arrived(self, link: Link) -> None:
        """The learner serves the request if it is free on the channel: it sends θ̄."""
        i, now = link.owner, link.at
        c = self._channel[i]
        if self._busy[c]:
            self._row((now, "loss", i, None, None, c, "learner busy"))
            return self._request_lost(link)
        self.unserved = 0
        self._busy[c] = self.serving[i] = True
        self.point[i] = self._training.query(i, now, c)
        engine = self.engine
        at = now + engine.downlink
        link.callbacks, link.at = self._on_query, at
        engine.enqueue((at, NORMAL, next(engine.event_ids), link))

    def _query_arrived(self, link: Link) -> None:
        """The owner answers privately (or refuses) unless it went offline meanwhile."""
        engine, i, now = self.engine, link.owner, link.at
        c = self._channel[i]
        if self._offline(i) and engine.dropped(i, c, self.epoch[i]):
            return self._end(i)
        # the owner computes its answer: ε is charged here, whatever becomes of the message
        answer = self.answer[i] = self._training.answer(i, self.point[i], now, c)
        if answer is None:
            return self._end(i)
        engine.uplink(i, c, self.epoch[i], now, arrived=self._on_answer, lost=self._on_lost)

    def _answer_arrived(self, link: Link) -> None:
        """The learner receives the answer and applies it, unless the owner went offline meanwhile."""
        engine, i = self.engine, link.owner
        c = self._channel[i]
        if not (self._offline(i) and engine.dropped(i, c, self.epoch[i])):
            engine.apply(i, c, self.point[i], self.answer[i], link.at)
        else:
            self._training.lost(i, link.at)
        self._end(i)

    def _offline(self, i: int) -> bool:
        """Whether owner i went offline since its exchange began (``Engine.dropped`` then logs it)."""
        return self._epochs[i] != self.epoch[i] or self._holds[i] > 0

    def _request_lost(self, link: Link) -> None:
        """The request never reached a free learner (collision, loss, never sent, or the learner was
        busy); the run stalls after STALL_REQUESTS such losses in a row."""
        self._end(link.owner)
        self.unserved += 1
        if self.unserved == STALL_REQUESTS:
            self.engine.stop("stalled")

    def _lost(self, link: Link) -> None:
        """The answer was lost on the way (collision, loss, or never sent)."""
        self._training.lost(link.owner, link.at)
        self._end(link.owner)

    def _end(self, i: int) -> None:
        """Free the learner (if this exchange held it) and the owner."""
        if self.serving[i]:
            self._busy[self._channel[i]] = self.serving[i] = False
        self.point[i] = self.answer[i] = None
        self._in_exchange[i] = False
        if self.engine.closing is not None:
            self.engine.settled()


class Slot:
    """One broadcast slot on a channel: every ready owner answers the query at once.

    With collisions on, only a lone sender gets through; with them off, every delivered
    answer is applied in owner order (a receiver that decodes simultaneous messages). The slot is
    on the air from the query until its last message is resolved; a run that ends because no owner
    is left waits for it (:meth:`Engine.settled`), as it waits for a request-mode exchange.
    """

    def __init__(self, engine: Engine, channel: int, responders: list[int]) -> None:
        self.engine, self.channel = engine, channel
        self.at = now = engine.env.now  # the slot's time: every responder answers and sends then
        training = engine.training
        self.epochs = {i: engine.availability.epoch[i] for i in responders}
        self.points = {i: training.query(i, now, channel) for i in responders}
        # every responder computes its answer at the slot: ε is charged here
        self.answers = {i: training.answer(i, self.points[i], now, channel) for i in responders}
        self.senders = [i for i in responders if self.answers[i] is not None]
        self._on_arrival = [self._arrived]
        self.delivered: dict[int, bool] = {}

    def start(self) -> None:
        """Every owner that answered transmits; the slot closes when all messages are done."""
        if self.senders:
            self.engine.slots_on_air += 1
        for i in self.senders:
            self.engine.uplink(i, self.channel, self.epochs[i], self.at, arrived=self._on_arrival,
                               lost=self._lost)

    def _arrived(self, link: Link) -> None:
        self._receive(link.owner, True)

    def _lost(self, link: Link) -> None:
        self._receive(link.owner, False)

    def _receive(self, owner: int, delivered: bool) -> None:
        """One sender's message arrived or was lost; the last of them closes the slot."""
        self.delivered[owner] = delivered
        if len(self.delivered) == len(self.senders):
            self._close()

    def _close(self) -> None:
        """The learner receives every delivered answer whose owner stayed online, in owner order."""
        engine, c = self.engine, self.channel
        now, training = engine.env.now, engine.training
        for i in self.senders:
            if (self.delivered[i] and not engine.dropped(i, c, self.epochs[i])
                    and not engine.done.triggered):
                engine.apply(i, c, self.points[i], self.answers[i], now)
            elif not engine.done.triggered:  # once the run is over, its end settles what is owed
                training.lost(i, now)
        engine.slots_on_air -= 1
        if engine.closing is not None:
            engine.settled()
