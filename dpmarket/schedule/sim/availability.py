"""Owners going offline and coming back: exponential periods, fixed outages, or a trace.

An owner is online when no source holds it offline. Each change is logged (``dropout``,
``reconnect``) and bumps the owner's *epoch*, so an exchange can tell whether its owner went
offline while it was in progress (and is then lost).

An owner offline until the end of the run (a trace that ends, or an offline period that reaches
the horizon) can never answer again: it is reported *gone* when it goes offline. The sources of an
owner that has left (gone, or its budget spent) stop: its availability no longer matters, and
simulating it would only log rows (for ever, with exponential periods and no horizon).

While an outage window (or a trace's gap) holds an owner offline until a known end, its
exponential periods change nothing anyone can see: the owner is offline whatever they say. Their
chain then pauses at its next step instead of alternating through the window (an owner offline
from 0 to 10⁹ with periods of 20 would otherwise cost 10⁸ events), and resumes when the window
ends, in the state the periods would have reached: with exponential periods they are a two-state
Markov chain, so the state at the window's end has a closed form given the state at the pause
(:meth:`Alternating.resume`), and the period then under way is a fresh exponential (memoryless).
The owner's law is unchanged; its own availability stream supplies the one draw.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Generator
from pathlib import Path

import numpy as np
import simpy

from dpmarket.errors import _MISSING, ScenarioError
from dpmarket.rng import in_blocks
from dpmarket.schedule.sim.queue import NORMAL, URGENT, Stage


class Availability:
    """Online state of every owner, with the reasons each one is offline."""

    def __init__(self, env: simpy.Environment, owners: int,
                 on_change: Callable[[int, bool], None], on_gone: Callable[[int, float], None],
                 until: float | None = None) -> None:
        self.env = env
        self.until = float("inf") if until is None else until  # the horizon: offline until then is gone
        self.left = [False] * owners  # owners that will never answer again (set by the engine)
        # Python lists, not arrays: the engine reads them at every tick and message
        self.holds = [0] * owners  # sources holding each owner offline
        self.epoch = [0] * owners  # bumped at every dropout
        self.offline_time = np.zeros(owners)
        self._since = np.zeros(owners)
        self._on_change = on_change
        self.on_gone = on_gone
        self.chains: list[Alternating] = []  # the owners' exponential periods (see :meth:`close`)
        self.chain_of: dict[int, Alternating] = {}  # each owner's exponential periods, if it has any
        self.pinned = [False] * owners  # held offline by a window whose end is known (periods pause)

    def online(self, owner: int) -> bool:
        """Whether ``owner`` is online now."""
        return self.holds[owner] == 0

    def hold(self, owner: int) -> None:
        """One more source takes the owner offline."""
        if self.holds[owner] == 0:
            self.epoch[owner] += 1
            self._since[owner] = self.env.now
            self._on_change(owner, False)
        self.holds[owner] += 1

    def release(self, owner: int) -> None:
        """One source lets go; the owner reconnects when none is left."""
        self.holds[owner] -= 1
        if self.holds[owner] == 0:
            self.offline_time[owner] += self.env.now - self._since[owner]
            self._on_change(owner, True)

    def pin(self, owner: int) -> None:
        """A window takes the owner offline until its known end: its periods pause (module docstring)."""
        self.pinned[owner] = True
        self.hold(owner)

    def unpin(self, owner: int) -> None:
        """The window ends: the periods resume in the state they would have reached, then the
        window lets go (so an owner the periods hold stays offline, with no row logged)."""
        self.pinned[owner] = False
        chain = self.chain_of.get(owner)
        if chain is not None:
            chain.resume()
        self.release(owner)

    def away_until(self, owner: int, end: float) -> bool:
        """Whether ``owner``, offline until ``end``, can never answer again (reported gone if so)."""
        if end < self.until:
            return False
        self.on_gone(owner, end)
        return True

    def close(self) -> None:
        """Break the reference cycles of the exponential periods' chains (each calls back its own
        bound methods) once the run is over, so that reference counting frees them."""
        for chain in self.chains:
            chain.__dict__.clear()
        self.chains.clear()
        self.chain_of.clear()
        self._on_change = self.on_gone = None

    def downtime(self, owner: int) -> float:
        """Time spent offline so far (including a current outage)."""
        extra = self.env.now - self._since[owner] if self.holds[owner] else 0.0
        return float(self.offline_time[owner] + extra)


class Alternating:
    """Exponential online and offline periods of one owner, started in the stationary regime.

    The owner starts offline with probability mean_offline/(mean_online + mean_offline), so the
    fraction of time online is mean_online/(mean_online + mean_offline) from t = 0 on. The periods
    are a chain of one reused :class:`~dpmarket.schedule.sim.queue.Stage` (no process: a run has one such
    chain per owner), started as a process would be, at the current time before other events; it
    stops once the owner has left, and pauses while a window holds the owner (module docstring).
    """

    def __init__(self, av: Availability, owner: int, mean_online: float, mean_offline: float,
                 gen: np.random.Generator) -> None:
        self.av, self.owner, self.mean_online, self.mean_offline = av, owner, mean_online, mean_offline
        self.gen, self.stage = gen, Stage(owner)
        self.periods = in_blocks(gen.standard_exponential, 16).__next__  # Exp(1) variates, scaled below
        self._begin, self._online_ends = [self.begin], [self.online_ends]
        self._offline_ends = [self.offline_ends]
        self.paused_at: float | None = None  # when the chain paused under a window (None: running)
        self.paused_offline = False  # the state the periods were in from then on
        av.chains.append(self)
        av.chain_of[owner] = self
        self._at(self._begin, 0, URGENT)  # an int, as a process's start: t = 0 stays the int 0 in the log

    def _at(self, callbacks: list, delay: float | int, priority: int = NORMAL) -> None:
        stage = self.stage
        stage.callbacks, stage.at = callbacks, self.av.env.now + delay
        self.av.env.schedule(stage, priority, delay)

    def begin(self, _stage: Stage) -> None:
        offline = self.gen.random() < self.mean_offline / (self.mean_online + self.mean_offline)
        if self.av.left[self.owner]:
            return
        if self.av.pinned[self.owner]:
            self._pause(offline)
        elif offline:
            self._go_offline()
        else:
            self._at(self._online_ends, self.mean_online * self.periods())

    def _go_offline(self) -> None:
        av, owner = self.av, self.owner
        av.hold(owner)
        period = self.mean_offline * self.periods()
        if not av.away_until(owner, av.env.now + period):
            self._at(self._offline_ends, period)

    def offline_ends(self, _stage: Stage) -> None:
        self.av.release(self.owner)
        if self.av.pinned[self.owner]:
            self._pause(False)
        else:
            self._at(self._online_ends, self.mean_online * self.periods())

    def online_ends(self, _stage: Stage) -> None:
        if self.av.left[self.owner]:
            return
        if self.av.pinned[self.owner]:
            self._pause(True)
        else:
            self._go_offline()

    def _pause(self, offline: bool) -> None:
        """A window holds the owner: stop here, ``offline`` or not from now on, holding nothing."""
        self.paused_at, self.paused_offline = self.av.env.now, offline

    def resume(self) -> None:
        """The window ends: draw the state the periods reached since the pause, and go on from it.

        Online → offline at rate a = 1/mean_online, back at rate b = 1/mean_offline: after a time t
        from a known state the chain is offline with probability π + (x − π)·e^{−(a+b)t}, with π =
        a/(a+b) the stationary share offline and x = 1 if it was offline at the pause, else 0. The
        period then under way lasts a fresh exponential (memoryless).
        """
        if self.paused_at is None or self.av.left[self.owner]:
            return
        a, b = 1.0 / self.mean_online, 1.0 / self.mean_offline
        share = a / (a + b)
        decay = math.exp(-(a + b) * (self.av.env.now - self.paused_at))
        offline = self.gen.random() < share + (float(self.paused_offline) - share) * decay
        self.paused_at = None
        if offline:
            self._go_offline()
        else:
            self._at(self._online_ends, self.mean_online * self.periods())


def windows(av: Availability, owner: int,
            spans: list[tuple[float, float]]) -> Generator[simpy.Event, None, None]:
    """Offline during each [start, end) of ``spans`` (sorted, possibly overlapping)."""
    merged: list[tuple[float, float]] = []
    for start, end in sorted(spans):  # overlapping or touching spans: one offline period
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    for start, end in merged:
        if end <= av.env.now:
            continue
        if start > av.env.now:
            yield av.env.timeout(start - av.env.now)
        if av.left[owner]:
            return
        av.pin(owner)
        if av.away_until(owner, end):  # offline for good (its trace ended), or past the horizon
            return
        yield av.env.timeout(end - av.env.now)
        av.unpin(owner)


def read_trace(path: str, names: list[str]) -> dict[int, list[tuple[float, float]]]:
    """Online intervals per owner from a CSV with columns ``owner,start,end``.

    ``owner`` is an index (0-based) or a name. Owners absent from the trace are always online;
    an owner present is offline outside its intervals.
    """
    index = {name: i for i, name in enumerate(names)}
    spans: dict[int, list[tuple[float, float]]] = {}
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            if reader.fieldnames is None or not {"owner", "start", "end"} <= set(reader.fieldnames):
                raise ScenarioError(path, "network.availability", _MISSING,
                                    "needs columns owner,start,end")
            for row in reader:
                line = reader.line_num  # the file's line (blank lines are skipped, not counted)
                if None in (row["owner"], row["start"], row["end"]):
                    raise ScenarioError(f"{path}:{line}", "row", _MISSING, "needs owner,start,end")
                owner = _owner(row["owner"], index, len(names), path, line)
                start, end = _time(row["start"], path, line), _time(row["end"], path, line)
                if end <= start:
                    raise ScenarioError(f"{path}:{line}", "end", end, f"must be after start = {start}")
                spans.setdefault(owner, []).append((start, end))
    except OSError as exc:
        raise ScenarioError(path, "network.availability", path, f"cannot read: {exc.strerror}") from None
    except csv.Error as exc:  # a field over csv.field_size_limit(), a NUL byte: in the line being read
        raise ScenarioError(f"{path}:{reader.line_num + 1}", "row", _MISSING, f"not CSV: {exc}") from None
    except UnicodeDecodeError:
        raise ScenarioError(path, "network.availability", path, "cannot read: not UTF-8 text") from None
    return spans


def _owner(text: str, index: dict[str, int], count: int, path: str, line: int) -> int:
    if text in index:
        return index[text]
    if text.isascii() and text.isdigit() and int(text) < count:  # not '٣' or '²': digits as written
        return int(text)
    raise ScenarioError(f"{path}:{line}", "owner", text, "is neither an owner name nor an index")


def _time(text: str, path: str, line: int) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ScenarioError(f"{path}:{line}", "time", text, "is not a number") from None
    if not np.isfinite(value) or value < 0:
        raise ScenarioError(f"{path}:{line}", "time", text, "must be a finite time >= 0")
    return value


def offline_gaps(online: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The complement of online intervals on [0, ∞): the spans an owner is offline."""
    gaps, cursor = [], 0.0
    for start, end in sorted(online):
        if start > cursor:
            gaps.append((cursor, start))
        cursor = max(cursor, end)
    gaps.append((cursor, float("inf")))
    return gaps


def trace_path(value: str, scenario_file: str | Path) -> str:
    """A trace path as written in a scenario, resolved against the scenario file's folder."""
    path = Path(value)
    return str(path if path.is_absolute() else (Path(scenario_file).parent / path).resolve())
