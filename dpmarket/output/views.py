"""What the timeline's pictures show, gathered from spans as they stream (numpy only, no pandas).

Two sinks of :func:`dpmarket.output.spans.write` (or of :func:`dpmarket.output.spans.read`, for a run
directory): :class:`Lanes` gathers the static figure's data (``timeline.png``,
:mod:`dpmarket.output.figures.timeline`), :class:`Interactive` the interactive timeline of
``report.html``. Both keep bounded memory whatever the run's length: beyond :data:`MAX_BARS`
exchanges the lanes are counted per time bin, beyond :data:`MAX_DOTS` updates the owner of each
update is counted per cell, and the interactive view keeps at most :data:`VIEW_SPANS` spans of at
most :data:`VIEW_OWNERS` owners.
"""

from __future__ import annotations

import numpy as np

from dpmarket.output import spans as sp

MAX_LANES = 100  # one lane per owner up to this many owners; beyond, lanes of channels or owner groups
MAX_BARS = 20_000  # exchanges drawn one bar each up to this many; beyond, counted per time bin
BINS = 200  # time bins of the counted lanes
MAX_DOTS = 5_000  # updates drawn one dot each (the papers' Figs 4 and 9); beyond, counted per cell
SEQUENCE_ROWS, SEQUENCE_BINS = 100, 200
VIEW_OWNERS = 100  # owners in report.html's interactive timeline (evenly spaced beyond)
VIEW_SPANS = 20_000  # spans in it (those ending first beyond: a window from the start)


def evenly(n: int, limit: int) -> np.ndarray:
    """At most ``limit`` of ``n`` indices, evenly spaced (all if n ≤ limit)."""
    if n <= limit:
        return np.arange(n)
    return np.unique(np.linspace(0, n - 1, limit).round().astype(np.int64))


class Lanes:
    """The data of the timeline figure: lanes over time, and the owner of each update against k.

    ``selected`` owners (all by default) get a lane each up to MAX_LANES; beyond, a lane per channel
    when there are several (and at most MAX_LANES), else per group of consecutive owners. ``exchanges``
    (the number expected, from the run's counts) decides up front whether bars are drawn one by one
    or counted per bin, so that memory stays bounded.
    """

    def __init__(
        self,
        names: list[str],
        channel_of: list[int],
        t0: float,
        t1: float,
        selected: np.ndarray | None = None,
        *,
        exchanges: int = 0,
        iterations: int = 0,
    ) -> None:
        n = len(names)
        self.selected = np.arange(n) if selected is None else np.asarray(selected)
        self.t0, self.t1, self.iterations = t0, t1, max(iterations, 1)
        self.lane_of = np.full(n + 1, -1)
        channels = sorted(set(np.asarray(channel_of)[self.selected].tolist())) if n else []
        if len(self.selected) <= MAX_LANES:
            self.by, labels = "owner", [names[i] for i in self.selected]
            self.lane_of[self.selected] = np.arange(len(self.selected))
        elif 1 < len(channels) <= MAX_LANES:
            self.by, labels = "channel", [f"channel {c}" for c in channels]
            index = {c: j for j, c in enumerate(channels)}
            self.lane_of[self.selected] = [index[channel_of[i]] for i in self.selected]
        else:
            groups = min(len(self.selected), 40)
            self.by = "group"
            self.lane_of[self.selected] = np.arange(len(self.selected)) * groups // len(self.selected)
            labels = []
            for g in range(groups):
                members = self.selected[self.lane_of[self.selected] == g]
                labels.append(f"{names[members[0]]} … {names[members[-1]]} ({len(members)})")
        self.labels = labels
        self.members = np.bincount(self.lane_of[self.selected], minlength=len(labels)).astype(float)
        self.binned = self.by != "owner" or exchanges > MAX_BARS
        self.edges = np.linspace(t0, t1, BINS + 1)
        shape = (len(labels), len(sp.OUTCOMES), BINS)
        self.counts = np.zeros(shape) if self.binned else None
        self.offline = np.zeros((len(labels), BINS))
        self.bars: list[tuple[int, float, float, int]] = []  # lane, start, end, outcome
        self.outages: list[tuple[int, float, float]] = []
        self.exhausted: list[tuple[int, float, float]] = []
        self.collisions: list[tuple[int, float]] = []
        self.dots: list[tuple[int, int]] | None = []  # (k, owner) of each update while few
        self.cells = np.zeros((SEQUENCE_ROWS, SEQUENCE_BINS))
        self.owners = n

    def add(self, block: sp.Spans) -> None:
        """A block of spans (a sink of :func:`dpmarket.output.spans.write`)."""
        kind, owner, outcome = block["kind"], block["owner"], block["outcome"]
        start, end = block["start"], block["end"]
        lane = self.lane_of[np.where(owner >= 0, owner, len(self.lane_of) - 1)]
        inside = (lane >= 0) & (end >= self.t0) & (start <= self.t1)
        self._sequence(block, (kind == sp.EXCHANGE) & (outcome == sp.APPLIED) & (lane >= 0))
        ex = inside & (kind == sp.EXCHANGE)
        down = inside & (kind == sp.OUTAGE)
        if self.binned:
            where = np.clip(np.searchsorted(self.edges, start[ex], side="right") - 1, 0, BINS - 1)
            np.add.at(self.counts, (lane[ex], outcome[ex], where), 1)
        else:
            self.bars += zip(
                lane[ex].tolist(), start[ex].tolist(), end[ex].tolist(), outcome[ex].tolist(), strict=True
            )
        if self.by == "owner":
            self.outages += zip(lane[down].tolist(), start[down].tolist(), end[down].tolist(), strict=True)
            gone = inside & (kind == sp.EXHAUSTED)
            self.exhausted += zip(lane[gone].tolist(), start[gone].tolist(), end[gone].tolist(), strict=True)
            hit = inside & (kind == sp.TRANSMISSION) & (outcome == sp.LOST_COLLISION)
            if not self.binned:
                self.collisions += zip(lane[hit].tolist(), end[hit].tolist(), strict=True)
        self._offline(lane[down], start[down], end[down])

    def _offline(self, lane: np.ndarray, start: np.ndarray, end: np.ndarray) -> None:
        """Owner-time offline per lane and bin, in bin widths (a share of the lane's owners, once
        divided): the partial first and last bins of each outage, and a difference array for the
        whole bins between."""
        edges, width = self.edges, np.diff(self.edges)
        start, end = np.clip(start, edges[0], edges[-1]), np.clip(end, edges[0], edges[-1])
        lo = np.clip(np.searchsorted(edges, start, side="right") - 1, 0, BINS - 1)
        hi = np.clip(np.searchsorted(edges, end, side="right") - 1, 0, BINS - 1)
        one = lo == hi
        np.add.at(self.offline, (lane[one], lo[one]), (end[one] - start[one]) / width[lo[one]])
        many = ~one
        lane, lo, hi, start, end = lane[many], lo[many], hi[many], start[many], end[many]
        np.add.at(self.offline, (lane, lo), (edges[lo + 1] - start) / width[lo])
        np.add.at(self.offline, (lane, hi), (end - edges[hi]) / width[hi])
        whole = np.zeros((self.offline.shape[0], BINS + 1))
        np.add.at(whole, (lane, lo + 1), 1.0)
        np.add.at(whole, (lane, hi), -1.0)
        self.offline += np.cumsum(whole, axis=1)[:, :BINS]

    def _sequence(self, block: sp.Spans, applied: np.ndarray) -> None:
        k, owner = block["k"][applied].astype(np.int64), block["owner"][applied]
        if self.dots is not None:
            self.dots += zip(k.tolist(), owner.tolist(), strict=True)
            if len(self.dots) <= MAX_DOTS:
                return
            k, owner = (np.array(v, dtype=np.int64) for v in zip(*self.dots, strict=True))
            self.dots = None
        rows = np.minimum(owner * SEQUENCE_ROWS // max(self.owners, 1), SEQUENCE_ROWS - 1)
        cols = np.clip((k - 1) * SEQUENCE_BINS // self.iterations, 0, SEQUENCE_BINS - 1)
        np.add.at(self.cells, (rows, cols), 1)

    def data(self, title: str) -> dict:
        """Plain, picklable data for :func:`dpmarket.output.figures.timeline.draw_lanes`."""
        shares = (self.offline / np.maximum(self.members, 1)[:, None]).tolist()
        return {
            "title": title,
            "by": self.by,
            "labels": self.labels,
            "t0": self.t0,
            "t1": self.t1,
            "outcomes": list(sp.OUTCOMES),
            "binned": self.binned,
            "edges": self.edges.tolist(),
            "counts": self.counts.tolist() if self.binned else None,
            "bars": self.bars,
            "outages": self.outages,
            "exhausted": self.exhausted,
            "collisions": self.collisions,
            "offline": shares,
            "dots": self.dots,
            "cells": None if self.dots is not None else self.cells.tolist(),
            "owners": self.owners,
            "iterations": self.iterations,
            "max_lanes": MAX_LANES,
        }


class Interactive:
    """The spans report.html's interactive timeline shows: of at most VIEW_OWNERS owners (evenly
    spaced), with the channels' collision windows and the price periods, at most VIEW_SPANS of them
    (those ending first: a window from the start of the run)."""

    def __init__(self, names: list[str], end: float) -> None:
        self.names, self.end = names, end
        self.owners = evenly(len(names), VIEW_OWNERS)
        self.shown = np.zeros(len(names) + 1, bool)
        self.shown[self.owners] = True
        self.columns: dict[str, list] = {
            "s": [],
            "e": [],
            "kind": [],
            "owner": [],
            "channel": [],
            "out": [],
            "k": [],
            "eps": [],
        }
        self.total, self.cut = 0, None

    def add(self, block: sp.Spans) -> None:
        owner = block["owner"]
        keep = self.shown[np.where(owner >= 0, owner, len(self.names))] | np.isin(
            block["kind"], (sp.WINDOW, sp.PRICE_PERIOD)
        )
        room = VIEW_SPANS - len(self.columns["s"])
        index = np.flatnonzero(keep)
        self.total += len(index)
        if len(index) > room:
            index = index[: max(room, 0)]
            if self.cut is None:
                self.cut = float(block["end"][index[-1]]) if len(index) else float(block["start"][0])
        if not len(index):
            return
        c = self.columns
        c["s"] += _short(block["start"][index])
        c["e"] += _short(block["end"][index])
        c["kind"] += block["kind"][index].tolist()
        c["owner"] += owner[index].tolist()
        c["channel"] += block["channel"][index].tolist()
        c["out"] += block["outcome"][index].tolist()
        k = block["k"][index]
        c["k"] += [None if v != v else int(v) for v in k.tolist()]
        c["eps"] += [None if v != v else float(f"{v:.6g}") for v in block["epsilon_spent"][index].tolist()]

    def data(self) -> dict:
        """The JSON document the page's script reads."""
        note = (
            f"{len(self.owners)} of {len(self.names)} owners (evenly spaced); "
            if len(self.owners) < len(self.names)
            else ""
        ) + (
            f"the first {len(self.columns['s']):,} of {self.total:,} spans (to t = {self.cut:.6g}); "
            "the whole run is in spans.csv and `dpmarket timeline RUN --trace`"
            if self.cut is not None
            else ""
        )
        return {
            "names": [self.names[i] for i in self.owners],
            "owners": self.owners.tolist(),
            "end": self.end,
            "kinds": list(sp.KINDS),
            "outcomes": list(sp.OUTCOMES),
            "spans": self.columns,
            "note": note,
        }


def _short(values: np.ndarray) -> list[float]:
    """Times to 10 significant digits: a tenth of a microsecond at t = 1,000, a smaller page."""
    return [float(f"{v:.10g}") for v in values.tolist()]
