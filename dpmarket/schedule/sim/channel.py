"""A shared channel: every transmission occupies it for its duration (pure ALOHA).

Two transmissions that overlap in time on one channel are both lost. The channel also keeps
what the timeline needs: how many transmissions, how many collided, and how long it was busy.
"""

from __future__ import annotations

from collections.abc import Generator

import simpy


class Channel:
    """One medium shared by a group of owners (their uplink to the learner)."""

    def __init__(self, env: simpy.Environment, index: int, collisions: bool = True) -> None:
        self.env, self.index, self.collisions = env, index, collisions
        self._active: dict[int, bool] = {}  # transmissions on the air → overlapped yet?
        self._next_id = 0
        self._busy_since = 0.0
        self.transmissions = 0
        self.collided = 0
        self.busy_time = 0.0

    @property
    def busy(self) -> bool:
        """Whether a transmission is on the air now (what carrier sensing hears)."""
        return bool(self._active)

    def transmit(self, duration: float) -> Generator[simpy.Event, object, bool]:
        """Occupy the channel for ``duration``; True if no other transmission overlapped it."""
        if duration < 0:
            raise ValueError(f"Negative transmission time {duration}")
        ticket = self.start(self.env.now)
        yield self.env.timeout(duration)
        return self.finish(ticket, self.env.now)

    def start(self, now: float) -> int:
        """A transmission goes on the air at ``now`` (the environment's time); returns the ticket
        :meth:`finish` needs.

        :meth:`transmit` in two halves, for callers that time the transmission themselves
        (the engine, which saves a generator per message that way, and knows the time).
        """
        active, ident = self._active, self._next_id
        self._next_id = ident + 1
        collided = False
        if active:
            if self.collisions:  # everything on the air now overlaps the newcomer
                collided = True
                for other in active:
                    active[other] = True
        else:
            self._busy_since = now
        active[ident] = collided
        self.transmissions += 1
        return ident

    def finish(self, ticket: int, now: float) -> bool:
        """The transmission ``ticket`` leaves the air at ``now``; True if nothing overlapped it."""
        active = self._active
        collided = active.pop(ticket)
        if not active:
            self.busy_time += now - self._busy_since
        self.collided += collided
        return not collided

    def utilisation(self, horizon: float) -> float:
        """Fraction of [0, horizon] the channel carried at least one transmission."""
        busy = self.busy_time + (self.env.now - self._busy_since if self._active else 0.0)
        return busy / horizon if horizon > 0 else 0.0
