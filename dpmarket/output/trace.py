"""A run as a Chrome Trace Event Format file: what Perfetto's UI (ui.perfetto.dev) and chrome://tracing open.

One simulated time unit is shown as one second. The tracks:

- **learner** (process 1): the updates as instant events (``update k``, with the owner), and the
  counter ``psi`` (ψ of the published model, metrics.csv);
- **channels** (process 2): one thread per channel with its collision windows (complete events);
- **market** (process 3, a market in time only): price periods, and the counters ``price``,
  ``participants`` and ``payments`` (paid so far);
- **overview** (process 4): counters over the whole run in :data:`BINS` bins: updates, collisions
  and owners offline per bin — what the detail would show, for any size of run;
- **one process per owner**, named after it (process 100 + its index): thread ``exchanges`` (each
  exchange a complete event named by its outcome, its transmissions and back-offs nested inside,
  instant events where a message collided or was lost, or the owner refused), thread
  ``availability`` (outages, the budget exhausted to the end of the run), thread ``market``
  (memberships), and the counter ``epsilon spent``.

Runs with many events stay openable: at most :data:`MAX_OWNER_TRACKS` owners get tracks (an evenly
spaced sample beyond, or the ``owners`` chosen), and detail stops once :data:`MAX_EVENTS` events are
written (the spans ending first are kept: a window from the start of the run; the overview counters
cover the whole run). The file's ``otherData`` says which owners are shown and until when the detail
runs, and an instant event on the learner's track marks where it stops.

Timestamps are whole nanoseconds written as microseconds with three decimals, so a transmission nests
inside its exchange exactly; events are sorted by time (a longer event first), as the viewers expect.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from dpmarket._version import __version__
from dpmarket.output import spans as sp

MAX_EVENTS = 400_000  # about 50 MB of JSON: Perfetto's UI opens it in seconds, chrome://tracing too
MAX_OWNER_TRACKS = 500
BINS = 500
LEARNER, CHANNELS, MARKET, OVERVIEW, OWNER_BASE = 1, 2, 3, 4, 100
EXCHANGES, AVAILABILITY, MEMBERSHIP = 1, 2, 3  # an owner's threads
MAX_TIME = (2**63 - 1) / 1e9  # timestamps are whole nanoseconds in 64-bit integers: ±9.2e9 time units


def _ns(t: np.ndarray | float) -> np.ndarray:
    return np.rint(np.asarray(t, dtype=float) * 1e9).astype(np.int64)


def _us(ns: int) -> str:
    """Whole nanoseconds as microseconds, exactly (three decimals)."""
    sign = "-" if ns < 0 else ""
    ns = abs(ns)
    return f"{sign}{ns // 1000}.{ns % 1000:03d}"


def shown_owners(n: int, chosen: np.ndarray | None) -> tuple[np.ndarray, str]:
    """The owners given tracks and a sentence saying which."""
    if chosen is not None and len(chosen) < n:
        picked = np.asarray(chosen)[:MAX_OWNER_TRACKS]
        return picked, f"{len(picked)} owners chosen of {n}" + (
            f" (the first {MAX_OWNER_TRACKS} of the {len(chosen)} chosen)"
            if len(chosen) > MAX_OWNER_TRACKS
            else ""
        )
    if n <= MAX_OWNER_TRACKS:
        return np.arange(n), f"all {n} owners"
    picked = np.unique(np.linspace(0, n - 1, MAX_OWNER_TRACKS).round().astype(np.int64))
    return (
        picked,
        f"{len(picked)} of {n} owners, evenly spaced by index (MAX_OWNER_TRACKS = {MAX_OWNER_TRACKS})",
    )


class Trace:
    """The trace's events, gathered from the run's spans and events, then written sorted."""

    def __init__(
        self,
        names: list[str],
        owners: np.ndarray,
        t0: float,
        t1: float,
        end: float,
        *, max_events: int = MAX_EVENTS,
    ) -> None:
        self.names, self.owners, self.t0, self.t1, self.end = names, owners, t0, t1, end
        self.shown = np.zeros(len(names) + 1, bool)
        self.shown[owners] = True
        self.max_events = max_events
        self.events: list[tuple] = []  # (ts_ns, -dur_ns, order, json text)
        self.cut: float | None = None  # the span end after which detail stops
        self.edges = np.linspace(t0, t1, BINS + 1)
        self.per_bin = {
            "updates": np.zeros(BINS),
            "collisions": np.zeros(BINS),
            "owners offline": np.zeros(BINS),
        }
        self.paid, self.members, self.channels = 0.0, 0, set()
        self.counts = {
            "exchanges": 0,
            "transmissions": 0,
            "collisions": 0,
            "losses": 0,
            "refusals": 0,
            "updates": 0,
            "outages": 0,
            "collision_windows": 0,
        }

    # -- gathering ---------------------------------------------------------------------------------
    def add_spans(self, block: sp.Spans) -> None:
        """A block of spans (sorted by end): the overview counters, then the detail within budget."""
        self._overview(block)
        inside = (block["end"] >= self.t0) & (block["start"] <= self.t1)
        if self.cut is not None:
            inside &= block["end"] <= self.cut
        picked = {name: values[inside] for name, values in block.items()}
        for row in zip(*(picked[c].tolist() for c in picked), strict=True):
            if self.cut is not None and row[1] > self.cut:
                break  # the rest of the block ends later still: sorted by end
            self._span(dict(zip(picked, row, strict=True)))
            if self.cut is None and len(self.events) >= self.max_events:
                self.cut = row[1]

    def _overview(self, block: sp.Spans) -> None:
        kind, outcome, owner = block["kind"], block["outcome"], block["owner"]
        applied = (kind == sp.EXCHANGE) & (outcome == sp.APPLIED)
        self.per_bin["updates"] += np.histogram(block["end"][applied], self.edges)[0]
        collided = (kind == sp.TRANSMISSION) & (outcome == sp.LOST_COLLISION)
        self.per_bin["collisions"] += np.histogram(block["end"][collided], self.edges)[0]
        down = (kind == sp.OUTAGE) & (owner >= 0)
        width = np.diff(self.edges)
        for a, b in zip(block["start"][down].tolist(), block["end"][down].tolist(), strict=True):
            lo, hi = np.searchsorted(self.edges, [a, b], side="right") - 1
            for i in range(max(lo, 0), min(hi, BINS - 1) + 1):  # time offline in each bin it touches
                self.per_bin["owners offline"][i] += (
                    min(b, self.edges[i + 1]) - max(a, self.edges[i])
                ) / width[i]

    def _span(self, s: dict) -> None:
        kind, owner = s["kind"], s["owner"]
        if kind == sp.WINDOW:
            self.counts["collision_windows"] += 1
            self._complete(
                CHANNELS,
                s["channel"] + 1,
                s,
                "collision window",
                "collision",
                args={"transmissions": s["transmissions"]},
            )
        elif kind == sp.PRICE_PERIOD:
            self._complete(MARKET, 1, s, "price period", "market", args={"price": s["price"]})
            self._counter(MARKET, s["start"], "price", s["price"])
        elif owner >= 0 and self.shown[owner]:
            self._owner_span(s)
        if kind == sp.EXCHANGE and s["outcome"] == sp.APPLIED:
            self.counts["updates"] += 1
            self._instant(
                LEARNER,
                1,
                s["end"],
                f"update {int(s['k'])}",
                "update",
                args={"k": int(s["k"]), "owner": self.names[owner]},
            )

    def _owner_span(self, s: dict) -> None:
        kind, pid = s["kind"], OWNER_BASE + s["owner"]
        outcome = sp.OUTCOMES[s["outcome"]]
        if kind == sp.EXCHANGE:
            self.counts["exchanges"] += 1
            args = {"outcome": outcome, "channel": s["channel"]}
            if s["k"] == s["k"]:
                args["k"] = int(s["k"])
            if s["detail"]:
                args["detail"] = sp.DETAILS[s["detail"]]
            self._complete(pid, EXCHANGES, s, f"exchange: {outcome}", "exchange", args=args)
            instant = {sp.LOST_LOSS: "loss", sp.DROPPED: "loss", sp.REFUSED: "refusal"}.get(s["outcome"])
            if instant:
                self.counts["losses" if instant == "loss" else "refusals"] += 1
                self._instant(
                    pid, EXCHANGES, s["end"], instant, instant, args={"detail": args.get("detail", outcome)}
                )
        elif kind == sp.TRANSMISSION:
            self.counts["transmissions"] += 1
            self._complete(
                pid, EXCHANGES, s, f"transmission: {outcome}", "transmission", args={"channel": s["channel"]}
            )
            if s["outcome"] == sp.LOST_COLLISION:
                self.counts["collisions"] += 1
                self._instant(pid, EXCHANGES, s["end"], "collision", "collision",
                              args={"channel": s["channel"]})
        elif kind == sp.BACKOFF:
            self._complete(pid, EXCHANGES, s, "backoff", "backoff", args={})
        elif kind == sp.OUTAGE:
            self.counts["outages"] += 1
            self._complete(pid, AVAILABILITY, s, "offline", "outage", args={})
        elif kind == sp.EXHAUSTED:
            self._complete(
                pid, AVAILABILITY, s, "budget exhausted", "budget", args={"epsilon_spent": s["epsilon_spent"]}
            )
        elif kind == sp.MEMBERSHIP:
            self._complete(pid, MEMBERSHIP, s, "taking part", "market", args={})

    def add_events(self, block: sp.Block) -> None:
        """Counters from events.csv: each shown owner's ε spent, and the market's payments and members."""
        t, kind, owner = block["time"], block["kind"], block["owner"]
        keep = (t >= self.t0) & (t <= self.t1) & ((self.cut is None) | (t <= (self.cut or 0)))
        spent = keep & np.isin(kind, (sp.RESPONSE, sp.REFUSAL)) & (owner >= 0)
        spent &= self.shown[np.where(owner >= 0, owner, len(self.names))]
        for when, who, eps in zip(
            t[spent].tolist(), owner[spent].tolist(), block["eps"][spent].tolist(), strict=True
        ):
            self._counter(OWNER_BASE + who, when, "epsilon spent", eps)
        money = keep & (kind == sp.PAYMENT)
        for when, amount in zip(t[money].tolist(), block["amount"][money].tolist(), strict=True):
            self.paid += amount
            self._counter(MARKET, when, "payments", self.paid)
        moves = keep & np.isin(kind, (sp.JOIN, sp.LEAVE))
        for when, k in zip(t[moves].tolist(), kind[moves].tolist(), strict=True):
            self.members += 1 if k == sp.JOIN else -1
            self._counter(MARKET, when, "participants", self.members)

    def add_metrics(self, times: list[float], psi: list[float]) -> None:
        for when, value in zip(times, psi, strict=True):
            if self.t0 <= when <= self.t1 and value == value:
                self._counter(LEARNER, when, "psi", value)

    # -- events ----------------------------------------------------------------------------------------
    def _push(self, ts: int, dur: int, text: str) -> None:
        self.events.append((ts, -dur, len(self.events), text))

    def _complete(self, pid: int, tid: int, s: dict, name: str, cat: str, *, args: dict) -> None:
        start, end = _ns(max(s["start"], self.t0)), _ns(min(s["end"], self.t1))
        dur = int(max(end - start, 0))
        self._push(
            int(start),
            dur,
            f'{{"ph":"X","pid":{pid},"tid":{tid},"ts":{_us(int(start))},"dur":{_us(dur)},'
            f'"name":{json.dumps(name)},"cat":"{cat}","args":{_args(args)}}}',
        )

    def _instant(self, pid: int, tid: int, t: float, name: str, cat: str, *, args: dict) -> None:
        ts = int(_ns(t))
        self._push(
            ts,
            0,
            f'{{"ph":"i","s":"t","pid":{pid},"tid":{tid},"ts":{_us(ts)},"name":{json.dumps(name)},'
            f'"cat":"{cat}","args":{_args(args)}}}',
        )

    def _counter(self, pid: int, t: float, name: str, value: float) -> None:
        ts = int(_ns(t))
        self._push(
            ts,
            0,
            f'{{"ph":"C","pid":{pid},"ts":{_us(ts)},"name":{json.dumps(name)},'
            f'"args":{{{json.dumps(name)}:{_number(value)}}}}}',
        )

    def _metadata(self, market: bool) -> Iterator[str]:
        def meta(pid: int, name: str, value: str, tid: int | None = None, what: str = "name") -> str:
            where = f'"pid":{pid}' + (f',"tid":{tid}' if tid is not None else "")
            return f'{{"ph":"M",{where},"ts":0,"name":"{name}","args":{{"{what}":{json.dumps(value)}}}}}'

        yield meta(LEARNER, "process_name", "learner")
        yield meta(LEARNER, "thread_name", "updates", 1)
        yield meta(CHANNELS, "process_name", "channels")
        for c in sorted(self.channels):
            yield meta(CHANNELS, "thread_name", f"channel {c}", c + 1)
        if market:
            yield meta(MARKET, "process_name", "market")
            yield meta(MARKET, "thread_name", "price periods", 1)
        yield meta(OVERVIEW, "process_name", f"overview (whole run, {BINS} bins)")
        for rank, pid in enumerate((LEARNER, CHANNELS, MARKET, OVERVIEW)):
            if pid == MARKET and not market:
                continue
            yield _sort_index(pid, rank)
        for i in self.owners.tolist():
            pid = OWNER_BASE + i
            yield meta(pid, "process_name", self.names[i])
            yield _sort_index(pid, 10 + i)
            for tid, name in (
                (EXCHANGES, "exchanges"),
                (AVAILABILITY, "availability"),
                (MEMBERSHIP, "market"),
            ):
                yield meta(pid, "thread_name", name, tid)

    def write(self, path: Path, other: dict, market: bool) -> int:
        """Write the trace to ``path``; returns the number of trace events (metadata included)."""
        if self.cut is not None:
            self._instant(
                LEARNER,
                1,
                self.cut,
                "detail ends here",
                "trace",
                args={"why": f"MAX_EVENTS = {self.max_events}: the counters of 'overview' go on"},
            )
        centres = self.edges[:-1]
        for name, values in self.per_bin.items():
            for when, value in zip(centres.tolist(), values.tolist(), strict=True):
                self._counter(OVERVIEW, when, f"{name} per bin", value)
        self.events.sort()
        lines = list(self._metadata(market)) + [e[3] for e in self.events]
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(
                '{"displayTimeUnit":"ms","otherData":'
                + json.dumps(other, ensure_ascii=False)
                + ',"traceEvents":[\n'
            )
            fh.write(",\n".join(lines))
            fh.write("\n]}\n")
        return len(lines)


def _sort_index(pid: int, rank: int) -> str:
    """The metadata event that puts process ``pid`` at ``rank`` in the viewer's list."""
    return f'{{"ph":"M","pid":{pid},"ts":0,"name":"process_sort_index","args":{{"sort_index":{rank}}}}}'


def _number(value) -> str:
    value = float(value)
    return repr(value) if np.isfinite(value) else "0"


def _args(args: dict) -> str:
    return json.dumps(
        {k: (None if isinstance(v, float) and v != v else v) for k, v in args.items()}, ensure_ascii=False
    )


def write_trace(
    run_dir: Path,
    target: Path,
    names: list[str],
    timing: sp.Timing,
    spans_path: Path,
    *, metrics: tuple[list[float], list[float]],
    chosen: np.ndarray | None = None,
    t0: float = 0.0,
    t1: float | None = None,
    max_events: int | None = None,
    title: str = "",
) -> dict:
    """Write ``target`` from the run's ``spans_path`` and events.csv; returns the trace's ``otherData``."""
    end, max_events = timing.end, MAX_EVENTS if max_events is None else max_events
    t1 = end if t1 is None else t1
    owners, which = shown_owners(len(names), chosen)
    trace = Trace(names, owners, t0, t1, end, max_events=max_events)
    for block in sp.read(spans_path):
        trace.channels.update(np.unique(block["channel"][block["channel"] >= 0]).tolist())
        trace.add_spans(block)
    market = False
    for block in sp.event_blocks(run_dir / "events.csv"):
        market = market or bool(np.isin(block["kind"], (sp.PRICE, sp.JOIN)).any())
        trace.add_events(block)
    trace.add_metrics(*metrics)
    other = {
        "dpmarket": __version__,
        "run": title or run_dir.name,
        "time": "one simulated time unit is shown as one second",
        "window": [t0, t1],
        "owners": which,
        "detail": (
            "complete"
            if trace.cut is None
            else f"spans ending by t = {trace.cut:.6g} only: MAX_EVENTS = {max_events} reached "
            f"(the overview counters cover the whole window)"
        ),
        "counts": trace.counts,
    }
    other["trace_events"] = trace.write(target, other, market)
    return other
