"""What the engine puts on SimPy's event queue: one owner's next step, reused from step to step.

A SimPy ``Timeout`` would do, but each is a new ``Event`` built through two Python calls, whose
callback must then ask the environment for the time. ``Environment.step`` needs only ``callbacks``
and ``_ok`` of what it pops, and an owner has at most one pending step of each kind: its clock's
next tick, and the next stage of its one exchange in progress (request mode) or of its one
message in a slot (broadcast mode). So each owner has a :class:`Stage` for its clock and a
:class:`Link` for its messages, scheduled again and again: no object is made per tick or per
message. A stage holds the time it fires, computed as ``Environment.schedule`` computes it
(``now + delay``, the same float), and ``callbacks`` is a one-element list shared by every stage of
a kind (SimPy reads it, never changes it). The engine's hot paths push a stage onto the queue as
``schedule`` does (the same entry: time, priority, SimPy's next event id, the stage) without its
Python call, and :func:`drain` runs SimPy's loop inline; both read SimPy 4's ``Environment``
internals (``_queue``, ``_eid``, ``_now``), which the engine's byte-identity tests would catch
changing; pyproject.toml pins SimPy below 5 for that reason.
"""

from __future__ import annotations

from collections.abc import Callable
from heapq import heappop

import simpy
from simpy.core import StopSimulation
from simpy.events import NORMAL, URGENT

__all__ = ["NORMAL", "URGENT", "Link", "Stage", "drain"]


class Stage:
    """Owner ``owner``'s pending step: SimPy calls each of ``callbacks`` with it at time ``at``.

    ``callbacks`` is None while the stage is not on the queue (SimPy sets it so when it fires).
    """

    __slots__ = ("callbacks", "at", "owner")
    _ok = True  # what Environment.step checks after the callbacks: a stage never fails

    def __init__(self, owner: int) -> None:
        self.callbacks: list | None = None
        self.at = 0.0
        self.owner = owner


class Link(Stage):
    """Owner ``owner``'s message in flight (or the query it waits for): the channel it is on, its
    ticket on that channel, what to call once it arrived or was lost, and, while carrier sensing
    backs off, the availability epoch of its exchange and the attempts made."""

    __slots__ = ("channel", "ticket", "arrived", "lost", "epoch", "attempt")

    def __init__(self, owner: int) -> None:
        super().__init__(owner)
        self.channel = self.ticket = self.epoch = self.attempt = 0
        self.arrived: list[Callable[[Link], None]] | None = None  # a SimPy callbacks list
        self.lost: Callable[[Link], None] | None = None


def drain(env: simpy.Environment) -> None:
    """``env.run()``: process events until a callback raises ``StopSimulation`` or none is left.

    The loop of SimPy 4's ``Environment.run`` and ``step`` (simpy/core.py), inlined (it reads the
    environment's ``_queue`` and sets its ``_now``, as ``step`` does): ``step`` is a Python call per
    event, and a request-mode exchange of ny_hospitals is seven events, so this saves about 1 µs of
    the engine's 17 µs per exchange. Each event is popped, the clock set
    to its time and its callbacks run in order, exactly as ``step`` does; a stop leaves the rest of
    the stopping event's callbacks to run first when the loop goes on (``step``'s rescheduling, at
    priority -1), and a failed event that nothing defused raises a copy of its exception.
    """
    queue, pop = env._queue, heappop
    while queue:
        env._now, _, _, event = pop(queue)
        callbacks, event.callbacks = event.callbacks, None
        try:
            for callback in callbacks:
                callback(event)
        except StopSimulation:
            event.callbacks = callbacks[callbacks.index(callback) + 1:]
            env.schedule(event, -1)
            return
        if not event._ok and not hasattr(event, "_defused"):
            exc = type(event._value)(*event._value.args)
            exc.__cause__ = event._value
            raise exc
