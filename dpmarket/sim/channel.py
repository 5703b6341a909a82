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
        self._active: dict[int, list[bool]] = {}
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
        ident, collided = self._next_id, [False]
        self._next_id += 1
        if self._active and self.collisions:
            collided[0] = True
            for other in self._active.values():
                other[0] = True
        if not self._active:
            self._busy_since = self.env.now
        self._active[ident] = collided
        self.transmissions += 1
        yield self.env.timeout(duration)
        del self._active[ident]
        if not self._active:
            self.busy_time += self.env.now - self._busy_since
        self.collided += collided[0]
        return not collided[0]

    def utilisation(self, horizon: float) -> float:
        """Fraction of [0, horizon] the channel carried at least one transmission."""
        busy = self.busy_time + (self.env.now - self._busy_since if self._active else 0.0)
        return busy / horizon if horizon > 0 else 0.0
