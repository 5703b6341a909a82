"""``spans.csv``: the run's intervals, derived from ``events.csv`` in one streaming pass.

``events.csv`` holds points (an exchange's request, query, answer and update are separate rows, an
outage is two rows); a tool that draws intervals would have to pair them again. This module pairs
them once, by the protocol's rules (:mod:`dpmarket.schedule.sim.engine`), and writes one row per
interval: exchanges (from the request, or the query where there is no request, to the update or
whatever ended it), uplink transmissions, back-offs, collision windows (overlapping collided
transmissions on a channel), outages, an owner's budget exhausted (to the end of the run), market
membership and price periods.

It reads ``events.csv`` a block at a time (pyarrow, about 4 MiB) and pairs rows with numpy, carrying
only what is still open (exchanges in flight, outages, the last collision window per channel) to the
next block, so memory stays flat however long the run. Rows are written once no later span can end
before them: spans.csv is sorted by (end, start, kind, owner, channel), whatever the block size.
Each block of finished spans also goes to the ``sinks`` (figure, interactive view, tables), as a dict
of numpy columns with the codes of :data:`KINDS`, :data:`OUTCOMES` and :data:`DETAILS`. Small logs are
read with the csv module, large ones with pyarrow (the same numbers: both parse floats exactly); the
run's path never imports pandas, which would cost a third of a small run.

What events.csv does not say, and so spans.csv cannot: with carrier sensing, when a message went on
the air after backing off is not logged; its transmission is then placed ``transmission_time`` before
its end (its collision or loss, or ``latency`` before its arrival), and a message whose owner was
found offline after backing off is taken as never sent.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from dpmarket.errors import TimelineError, one_line
from dpmarket.schedule.events import COLUMNS as EVENT_COLUMNS
from dpmarket.schedule.events import KINDS as EVENT_KINDS
from dpmarket.schedule.events import MARKET_COLUMNS

if TYPE_CHECKING:
    import pandas as pd

KINDS = ("exchange", "transmission", "backoff", "collision_window", "outage", "budget_exhausted",
         "membership", "price_period")
OUTCOMES = ("", "applied", "lost_collision", "lost_loss", "refused", "dropped_offline", "unfinished",
            "delivered")
DETAILS = ("", "random", "learner busy", "channel busy: gave up", "owner went offline", "budget spent",
           "budget spent: stops taking part")
COLUMNS = ("start", "end", "kind", "owner", "name", "channel", "k", "outcome", "detail", "epsilon_spent",
           "price", "transmissions")
(EXCHANGE, TRANSMISSION, BACKOFF, WINDOW, OUTAGE, EXHAUSTED, MEMBERSHIP, PRICE_PERIOD) = range(len(KINDS))
(NONE, APPLIED, LOST_COLLISION, LOST_LOSS, REFUSED, DROPPED, UNFINISHED, DELIVERED) = range(len(OUTCOMES))
(_, RANDOM, LEARNER_BUSY, GAVE_UP, OFFLINE, BUDGET_SPENT, STOPS) = range(len(DETAILS))
OTHER_DETAIL = len(DETAILS)  # any other text (the market's reasons): not needed to pair rows

_E = {kind: code for code, kind in enumerate(EVENT_KINDS)}
(TICK, REQUEST, BACKOFF_ROW, COLLISION, LOSS, DROPOUT, RECONNECT, BROADCAST, QUERY, RESPONSE, REFUSAL,
 UPDATE, IDLE, PRICE, PAYMENT, JOIN, LEAVE) = (_E[k] for k in EVENT_KINDS)
_EXCHANGE_ROWS = np.array([REQUEST, BACKOFF_ROW, QUERY, RESPONSE, REFUSAL, COLLISION, LOSS, UPDATE])
_TERMINAL = np.array([UPDATE, COLLISION, LOSS, REFUSAL])
_DETAIL_CODES = {detail: code for code, detail in enumerate(DETAILS)}
_FIELDS = ("time", "kind", "owner", "k", "eps", "channel", "detail", "amount", "seq")
BLOCK_BYTES = 1 << 22  # events.csv is read this many bytes at a time (~100,000 rows)

SMALL_BYTES = 1 << 23  # smaller event logs are read with the csv module: pyarrow's import (0.2 s) costs more
Spans = dict[str, np.ndarray]  # a block of spans: :func:`_spans`'s columns, codes for kind, outcome, detail
Sink = Callable[[Spans], None]


@dataclass(frozen=True)
class Timing:
    """What pairing needs to know of the run: its access mode, message timings, learner and end.

    ``end`` is when the simulation stopped (the horizon, or the last event): outages, budgets
    exhausted, memberships and price periods still open then end there.
    """

    mode: str  # "ideal", "request" or "broadcast"
    transmission_time: float = 0.0
    latency: float = 0.0
    synchronous: bool = False  # the synchronous learners: one update (owner −1) closes a round
    end: float = 0.0


def run_end(stop_reason: str, horizon: float | None, simulated_time: float) -> float:
    """When the simulation stopped: the horizon if that stopped it, else the learner's last time
    (raised to the last event's time while deriving, for runs that ended on a departure)."""
    return float(horizon) if stop_reason == "horizon" and horizon is not None else float(simulated_time)


def timing_of(scenario: dict, summary: dict) -> Timing:
    """The :class:`Timing` of a run directory, from its scenario.toml and summary.json."""
    net, learner = scenario.get("network", {}), scenario.get("learner", {})
    end = run_end(summary.get("stop_reason", ""), net.get("horizon"), summary.get("simulated_time", 0.0))
    return Timing(net.get("mode", "ideal"), float(net.get("transmission_time", 0.0)),
                  float(net.get("latency", 0.0)), learner.get("algorithm", "async") != "async", end)


# --- a file the run did not write whole ----------------------------------------------------------------

DAMAGED = "the run directory is damaged or was not written whole"


def check_written(path: Path, *headers: tuple[str, ...]) -> None:
    """Refuse, naming it, a CSV file of a run directory that was not written whole: empty, with a first
    line that is none of ``headers``, or ending inside a line (the writers end every line, so a file cut
    short by a full disk or an interrupted copy ends without one)."""
    try:
        with open(path, "rb") as fh:
            first = fh.readline()
            size = fh.seek(0, 2)
            fh.seek(max(size - 1, 0))
            last = fh.read(1)
    except OSError as exc:
        raise TimelineError(one_line(f"{path}: cannot be read ({exc.strerror or exc})")) from None
    if size == 0:
        raise TimelineError(f"{path}: empty: {DAMAGED}")
    if first.rstrip(b"\r\n").decode("utf-8", "replace").split(",") not in [list(h) for h in headers]:
        raise TimelineError(one_line(f"{path}: its first line is {first[:60]!r}, not the header "
                                     f"{','.join(headers[0])}: {DAMAGED}"))
    if last != b"\n":
        raise TimelineError(f"{path}: ends in the middle of a line (cut short): {DAMAGED}")


def _refusing(blocks: Iterator, path: Path) -> Iterator:
    """``blocks`` as they come; a row the reader cannot parse is one TimelineError naming the file (an
    error raised where the blocks are used does not pass through here)."""
    try:
        yield from blocks
    except (ValueError, OverflowError, csv.Error) as exc:  # the file's content (ArrowInvalid: a ValueError)
        text = str(exc).strip().splitlines()
        raise TimelineError(one_line(f"{path}: cannot be read ({text[0] if text else type(exc).__name__}): "
                                     f"{DAMAGED}")) from None


# --- reading events.csv a block at a time ---------------------------------------------------------

Block = dict[str, np.ndarray]


def event_blocks(path: Path, block_bytes: int = BLOCK_BYTES) -> Iterator[Block]:
    """events.csv as blocks of numpy columns: time, kind (code of events.KINDS), owner, k (NaN if
    empty), eps, channel (−1 if empty), detail (code of DETAILS), amount (NaN), seq (row number); a
    file that was not written whole, or a row that cannot be read, is a TimelineError naming it."""
    check_written(path, EVENT_COLUMNS, MARKET_COLUMNS)
    if Path(path).stat().st_size <= SMALL_BYTES:
        return _refusing(_small_blocks(path, max(block_bytes // 40, 1)), path)
    return _refusing(_arrow_blocks(path, block_bytes), path)


def _small_blocks(path: Path, rows: int) -> Iterator[Block]:
    """:func:`event_blocks` with the csv module, ``rows`` rows a block."""
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh)
        header, seq = next(reader), 0
        while True:
            chunk = [row for _, row in zip(range(rows), reader, strict=False)]
            if not chunk:
                return
            for at, row in enumerate(chunk):
                if len(row) != len(header):
                    raise ValueError(f"line {seq + at + 2} has {len(row)} fields, not {len(header)}")
            columns = dict(zip(header, zip(*chunk, strict=True), strict=True))
            n = len(chunk)
            yield {"time": _parsed(columns["time"]), "k": _parsed(columns["k"]),
                   "kind": np.array([_E.get(v, -1) for v in columns["kind"]], np.int64),
                   "owner": np.array(columns["owner"], dtype=np.int64),
                   "eps": _parsed(columns["epsilon_spent"]),
                   "channel": np.array([int(v) if v else -1 for v in columns["channel"]], np.int64),
                   "detail": np.array([_DETAIL_CODES.get(v, OTHER_DETAIL) for v in columns["detail"]],
                                     np.int64),
                   "amount": _parsed(columns["amount"]) if "amount" in columns else np.full(n, np.nan),
                   "seq": np.arange(seq, seq + n, dtype=np.int64)}
            seq += n


def _parsed(texts: tuple[str, ...]) -> np.ndarray:
    """Floats written by repr (exactly the numbers the run had); empty fields NaN."""
    return np.array([float(v) if v else np.nan for v in texts], dtype=float)


def _arrow_blocks(path: Path, block_bytes: int) -> Iterator[Block]:
    """:func:`event_blocks` with pyarrow's streaming reader, ``block_bytes`` a block."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    with open(path, encoding="utf-8") as fh:
        header = fh.readline().strip().split(",")
    types = {"time": pa.float64(), "kind": pa.dictionary(pa.int32(), pa.string()), "owner": pa.int64(),
             "k": pa.float64(), "epsilon_spent": pa.float64(), "channel": pa.float64(),
             "detail": pa.dictionary(pa.int32(), pa.string()), "amount": pa.float64()}
    columns = [c for c in types if c in header]
    reader = pacsv.open_csv(path, read_options=pacsv.ReadOptions(block_size=block_bytes),
                            convert_options=pacsv.ConvertOptions(
                                column_types={c: types[c] for c in columns}, include_columns=columns))
    seq = 0
    for batch in reader:
        n = batch.num_rows
        block = {"time": _floats(batch.column("time")), "kind": _codes(batch.column("kind"), _E, -1),
                 "owner": batch.column("owner").to_numpy(zero_copy_only=False).astype(np.int64),
                 "k": _floats(batch.column("k")), "eps": _floats(batch.column("epsilon_spent")),
                 "channel": np.nan_to_num(_floats(batch.column("channel")), nan=-1).astype(np.int64),
                 "detail": _codes(batch.column("detail"), _DETAIL_CODES, OTHER_DETAIL),
                 "amount": _floats(batch.column("amount")) if "amount" in columns else np.full(n, np.nan),
                 "seq": np.arange(seq, seq + n, dtype=np.int64)}
        seq += n
        yield block


def _floats(column) -> np.ndarray:
    return column.to_numpy(zero_copy_only=False).astype(float)


def _codes(column, table: dict[str, int], other: int) -> np.ndarray:
    """A dictionary-encoded column as codes of ``table`` (``other`` for unknown text, 0 for empty)."""
    texts = column.dictionary.to_pylist()
    lookup = np.array([table.get(text, other) for text in texts] + [0], dtype=np.int64)
    indices = column.indices.fill_null(len(lookup) - 1) if column.null_count else column.indices
    return lookup[indices.to_numpy(zero_copy_only=False)]


def _take(block: Block, index: np.ndarray) -> Block:
    return {name: values[index] for name, values in block.items()}


def _join(first: Block | None, second: Block) -> Block:
    if first is None or not len(first["seq"]):
        return second
    return {name: np.concatenate([first[name], second[name]]) for name in _FIELDS}


def _empty_block() -> Block:
    return {name: np.zeros(0, dtype=float if name in ("time", "k", "eps", "amount") else np.int64)
            for name in _FIELDS}


# --- pairing ----------------------------------------------------------------------------------------

def _spans(n: int, **columns) -> dict[str, np.ndarray]:
    """A block of spans: every column of the frame, the given ones filled, the rest empty."""
    out = {"start": np.zeros(n), "end": np.zeros(n), "kind": np.zeros(n, np.int64),
           "owner": np.full(n, -1, np.int64), "channel": np.full(n, -1, np.int64), "k": np.full(n, np.nan),
           "outcome": np.zeros(n, np.int64), "detail": np.zeros(n, np.int64),
           "epsilon_spent": np.full(n, np.nan),
           "price": np.full(n, np.nan), "transmissions": np.zeros(n, np.int64)}
    for name, values in columns.items():
        out[name] = np.broadcast_to(values, n).copy() if np.ndim(values) == 0 else np.asarray(values)
    return out


class Pairing:
    """Turns blocks of events into blocks of finished spans (see the module docstring)."""

    def __init__(self, timing: Timing) -> None:
        self.timing = timing
        self.starter = REQUEST if timing.mode == "request" else QUERY
        self.carry: Block | None = None  # rows of what is still open
        self.windows: dict[int, tuple[float, float, int]] = {}  # channel → its open collision window
        self.held: list[dict[str, np.ndarray]] = []  # finished spans that a later one may end before
        self.exhausted: list[dict[str, np.ndarray]] = []  # budgets exhausted: they end with the run
        self.last = 0.0  # the latest event time seen
        self.end: float | None = None  # the end of the run, once :meth:`finish` closes what is open

    def feed(self, block: Block) -> Spans:
        """Pair ``block`` (with what was carried); return the spans no later one can end before."""
        if not len(block["seq"]):
            return self._release(math.inf, final=False)
        ev = _join(self.carry, block)
        self.last = max(self.last, float(ev["time"][-1]))
        frontier = float(block["time"][-1])
        carried: list[np.ndarray] = []
        opened = self._exchanges(ev, carried, final=False)
        carried.append(self._pairs(ev, DROPOUT, RECONNECT, OUTAGE, final=False))
        carried.append(self._pairs(ev, JOIN, LEAVE, MEMBERSHIP, final=False))
        carried.append(self._prices(ev, final=False))
        self._budgets(ev)
        keep = np.unique(np.concatenate(carried)) if carried else np.zeros(0, np.int64)
        self.carry = _take(ev, keep)
        watermark = min([frontier, opened] + [w[1] for w in self.windows.values()])
        return self._release(watermark, final=False)

    def finish(self) -> Spans:
        """Close everything still open at the end of the run and return the last spans."""
        ev = self.carry if self.carry is not None else _empty_block()
        self.end = max(self.timing.end, self.last)
        self._exchanges(ev, [], final=True)
        self._pairs(ev, DROPOUT, RECONNECT, OUTAGE, final=True)
        self._pairs(ev, JOIN, LEAVE, MEMBERSHIP, final=True)
        self._prices(ev, final=True)
        for channel, (start, end, count) in sorted(self.windows.items()):
            self.held.append(_spans(1, start=start, end=end, kind=WINDOW, channel=channel,
                                    transmissions=count))
        self.windows = {}
        for spans in self.exhausted:
            spans["end"] = np.full(len(spans["end"]), self.end)
        self.held += self.exhausted
        self.carry, self.exhausted = None, []
        return self._release(math.inf, final=True)

    def _release(self, watermark: float, final: bool) -> Spans:
        """The held spans that end before ``watermark`` (all when ``final``), sorted."""
        if not self.held:
            return _spans(0)
        spans = {name: np.concatenate([h[name] for h in self.held]) for name in self.held[0]}
        done = np.ones(len(spans["end"]), bool) if final else spans["end"] < watermark
        later = {name: values[~done] for name, values in spans.items()}
        self.held = [later] if len(later["end"]) else []
        out = {name: values[done] for name, values in spans.items()}
        order = np.lexsort((out["k"], out["channel"], out["owner"], out["kind"], out["start"], out["end"]))
        return {name: values[order] for name, values in out.items()}

    # -- exchanges, their transmissions and back-offs -------------------------------------------
    def _exchanges(self, ev: Block, carried: list[np.ndarray], final: bool) -> float:
        """Pair the exchange rows; returns the earliest start of an exchange still open."""
        kind, owner = ev["kind"], ev["owner"]
        rows = np.isin(kind, _EXCHANGE_ROWS) & (owner >= 0) & ~((kind == REFUSAL) & (ev["detail"] == STOPS))
        index = np.flatnonzero(rows)
        index = index[np.argsort(owner[index], kind="stable")]  # each owner's rows, in the log's order
        if not len(index):
            return math.inf
        k_, o_, t_, d_ = kind[index], owner[index], ev["time"][index], ev["detail"][index]
        first = np.flatnonzero((k_ == self.starter) | np.r_[True, o_[1:] != o_[:-1]])
        last = np.r_[first[1:] - 1, len(index) - 1]
        closed = self._closed(ev, k_[last], t_[first], d_[last])
        if final:
            done = np.ones(len(first), bool)
        else:
            done = closed
            open_rows = [index[a:b + 1] for a, b in zip(first[~closed], last[~closed], strict=True)]
            if open_rows:
                carried.append(np.concatenate(open_rows))
        outcome, k, end = self._outcomes(ev, k_[last], d_[last], t_[first], t_[last],
                                         numbers=ev["k"][index[last]], closed=closed)
        eps = np.fmax.reduceat(ev["eps"][index], first) if len(first) else np.zeros(0)
        g = np.flatnonzero(done)
        self.held.append(_spans(len(g), start=t_[first[g]], end=end[g], kind=EXCHANGE, owner=o_[first[g]],
                                channel=ev["channel"][index[first[g]]], k=k[g], outcome=outcome[g],
                                detail=np.where(k_[last[g]] == LOSS, d_[last[g]], 0), epsilon_spent=eps[g]))
        if self.timing.mode in ("request", "broadcast"):
            self._messages(ev, index, first, last, done)
        return float(t_[first[~closed]].min()) if (~closed).any() and not final else math.inf

    def _closed(self, ev: Block, last_kind: np.ndarray, starts: np.ndarray, last_detail) -> np.ndarray:
        """Whether each exchange has ended: by its terminal row, or (synchronous learners) by the
        round's update, logged by the learner (owner −1) at the round's time."""
        closed = np.isin(last_kind, _TERMINAL)
        if self.timing.synchronous:
            rounds = ev["time"][(ev["kind"] == UPDATE) & (ev["owner"] < 0)]
            closed = (last_kind == REFUSAL) | np.isin(starts, rounds)
        return closed

    def _outcomes(self, ev: Block, term, detail, starts, ends, *, numbers, closed):
        """Each exchange's outcome, update number and end (the end of the run if still open), from
        its last row (``term``, ``detail``, at ``ends``; ``numbers``: its k if an update)."""
        outcome = np.full(len(term), UNFINISHED)
        outcome[term == UPDATE] = APPLIED
        outcome[term == COLLISION] = LOST_COLLISION
        outcome[term == LOSS] = np.where(detail[term == LOSS] == OFFLINE, DROPPED, LOST_LOSS)
        outcome[term == REFUSAL] = REFUSED
        k = np.where(term == UPDATE, numbers, np.nan)
        end = ends.copy()
        if self.timing.synchronous:  # the round's update (owner −1, at the round's time) applies it
            rounds = (ev["kind"] == UPDATE) & (ev["owner"] < 0)
            times, rounds_k = ev["time"][rounds], ev["k"][rounds]
            hit = np.minimum(np.searchsorted(times, starts), max(len(times) - 1, 0))
            ok = (term != REFUSAL) & (times[hit] == starts) if len(times) else np.zeros(len(term), bool)
            outcome[ok], k[ok] = APPLIED, rounds_k[hit[ok]]
        outcome[~closed] = UNFINISHED
        if self.end is not None:
            end[~closed] = self.end
        return outcome, k, end

    def _messages(self, ev: Block, index, first, last, done) -> None:
        """Uplink transmissions and back-offs of the finished exchanges (see the module docstring)."""
        tau, latency = self.timing.transmission_time, self.timing.latency
        group = np.repeat(np.arange(len(first)), last - first + 1)
        keep = done[group]
        index, group = index[keep], group[keep]
        if not len(index):
            return
        k_, t_, d_, c_, o_ = (ev[f][index] for f in ("kind", "time", "detail", "channel", "owner"))
        n = len(index)
        same_next = np.r_[group[1:] == group[:-1], False]
        not_backoff = np.flatnonzero(k_ != BACKOFF_ROW)
        nxt = not_backoff[np.minimum(np.searchsorted(not_backoff, np.arange(n), side="right"),
                                     len(not_backoff) - 1)] if len(not_backoff) else np.full(n, n - 1)
        has_fate = (nxt > np.arange(n)) & (group[np.minimum(nxt, n - 1)] == group)
        message = np.flatnonzero((k_ == REQUEST) | (k_ == RESPONSE))
        fate = nxt[message]
        fated = has_fate[message]
        backed = (fate - message > 1) & fated
        fk, fd, ft = k_[fate], d_[fate], t_[fate]
        never = fated & (fk == LOSS) & ((fd == GAVE_UP) | ((fd == OFFLINE) & backed))
        outcome = np.full(len(message), DELIVERED)
        outcome[fated & (fk == COLLISION)] = LOST_COLLISION
        outcome[fated & (fk == LOSS) & (fd == RANDOM)] = LOST_LOSS
        outcome[~fated] = UNFINISHED
        on_air_end = np.where((fk == COLLISION) | ((fk == LOSS) & (fd == RANDOM)), ft, ft - latency)
        end = np.where(backed, on_air_end, t_[message] + tau)
        start = np.where(backed, end - tau, t_[message])
        if self.end is not None:
            end = np.minimum(end, self.end)
        sent = ~never & (fated | ~backed)
        m = message[sent]
        self.held.append(_spans(len(m), start=start[sent], end=end[sent], kind=TRANSMISSION, owner=o_[m],
                                channel=c_[m], outcome=outcome[sent]))
        self._windows(start[sent & (outcome == LOST_COLLISION)], end[sent & (outcome == LOST_COLLISION)],
                      c_[message[sent & (outcome == LOST_COLLISION)]])
        # back-offs: until the next look (a back-off or a loss without sending) or the send
        b = np.flatnonzero(k_ == BACKOFF_ROW)
        if len(b):
            is_message = (k_ == REQUEST) | (k_ == RESPONSE)
            owner_message = np.maximum.accumulate(np.where(is_message, np.arange(n), 0))
            send = np.full(n, np.nan)
            send[message] = start
            following = np.minimum(b + 1, n - 1)
            not_sent = (k_[following] == LOSS) & np.isin(d_[following], (GAVE_UP, OFFLINE))
            looked = same_next[b] & ((k_[following] == BACKOFF_ROW) | not_sent)
            ends = np.where(looked, t_[following], send[owner_message[b]])
            run_end = self.end if self.end is not None else np.nan
            ends = np.where(same_next[b] | ~np.isnan(ends), ends, run_end)
            self.held.append(_spans(len(b), start=t_[b], end=ends, kind=BACKOFF, owner=o_[b], channel=c_[b]))

    def _windows(self, start: np.ndarray, end: np.ndarray, channel: np.ndarray) -> None:
        """Merge collided transmissions into collision windows per channel: a window closes when a
        collided transmission starts after everything in it ended (the last one stays open)."""
        order = np.lexsort((start, end, channel))
        closed = []
        for s, e, c in zip(start[order].tolist(), end[order].tolist(), channel[order].tolist(), strict=True):
            window = self.windows.get(c)
            if window is not None and s < window[1]:
                self.windows[c] = (window[0], max(window[1], e), window[2] + 1)
            else:
                if window is not None:
                    closed.append((c, *window))
                self.windows[c] = (s, e, 1)
        if closed:
            c, s, e, n = (np.array(v) for v in zip(*closed, strict=True))
            self.held.append(_spans(len(c), start=s.astype(float), end=e.astype(float), kind=WINDOW,
                                    channel=c.astype(np.int64), transmissions=n.astype(np.int64)))

    # -- outages, memberships, prices, budgets -----------------------------------------------------
    def _pairs(self, ev: Block, opening: int, closing: int, kind: int, final: bool) -> np.ndarray:
        """Spans from an owner's ``opening`` row to its next ``closing`` row; returns the rows of
        those still open (to carry), which end with the run when ``final``."""
        rows = np.flatnonzero(((ev["kind"] == opening) | (ev["kind"] == closing)) & (ev["owner"] >= 0))
        rows = rows[np.argsort(ev["owner"][rows], kind="stable")]
        if not len(rows):
            return np.zeros(0, np.int64)
        k_, o_ = ev["kind"][rows], ev["owner"][rows]
        nxt = np.r_[rows[1:], rows[-1]]
        paired = np.r_[(o_[1:] == o_[:-1]) & (k_[1:] == closing), False] & (k_ == opening)
        still = (k_ == opening) & ~paired
        opens = rows[paired]
        ends = ev["time"][nxt[paired]]
        eps = ev["eps"][nxt[paired]]
        if final and still.any():
            opens, ends = np.r_[opens, rows[still]], np.r_[ends, np.full(still.sum(), self.end)]
            eps = np.r_[eps, np.full(still.sum(), np.nan)]
        self.held.append(_spans(len(opens), start=ev["time"][opens], end=ends, kind=kind,
                                owner=ev["owner"][opens], channel=ev["channel"][opens], epsilon_spent=eps))
        return np.zeros(0, np.int64) if final else rows[still]

    def _prices(self, ev: Block, final: bool) -> np.ndarray:
        """Price periods: from each price row to the next (the last to the end of the run)."""
        rows = np.flatnonzero((ev["kind"] == PRICE) & (ev["owner"] < 0))
        if not len(rows):
            return rows
        closes = rows[1:]
        ends = list(ev["time"][closes]) + ([self.end] if final else [])
        opens = rows[:len(ends)]
        self.held.append(_spans(len(opens), start=ev["time"][opens], end=np.asarray(ends, dtype=float),
                                kind=PRICE_PERIOD, price=ev["amount"][opens]))
        return np.zeros(0, np.int64) if final else rows[-1:]

    def _budgets(self, ev: Block) -> None:
        """An owner whose budget is spent stops taking part: exhausted from its refusal to the end of
        the run (such rows are never carried, so each is seen once)."""
        rows = np.flatnonzero((ev["kind"] == REFUSAL) & (ev["detail"] == STOPS) & (ev["owner"] >= 0))
        if len(rows):
            self.exhausted.append(_spans(len(rows), start=ev["time"][rows], end=ev["time"][rows],
                                         kind=EXHAUSTED, owner=ev["owner"][rows], channel=ev["channel"][rows],
                                         detail=STOPS, epsilon_spent=ev["eps"][rows]))


# --- writing and reading spans.csv -----------------------------------------------------------------

def derive(events: Path, timing: Timing, block_bytes: int = BLOCK_BYTES) -> Iterator[Spans]:
    """The spans of ``events`` (events.csv), block by block, sorted by end across blocks."""
    pairing = Pairing(timing)
    for block in event_blocks(events, block_bytes):
        out = pairing.feed(block)
        if len(out["end"]):
            yield out
    out = pairing.finish()
    if len(out["end"]):
        yield out


def write(events: Path, target: Path, names: list[str], timing: Timing, sinks: list[Sink] = (),
          *, block_bytes: int = BLOCK_BYTES) -> int:
    """Derive the spans of ``events`` into ``target`` (spans.csv), feeding each block to ``sinks``;
    returns the number of spans."""
    count = 0
    with open(target, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(COLUMNS)
        for spans in derive(events, timing, block_bytes):
            writer.writerows(_rows(spans, names))
            for sink in sinks:
                sink(spans)
            count += len(spans["end"])
    return count


def _rows(spans: Spans, names: list[str]) -> Iterator[tuple]:
    """The CSV rows of a block: text for the codes, empty fields for what does not apply."""
    owner = spans["owner"]
    label = np.array([*names, ""], dtype=object)[np.where(owner >= 0, owner, len(names))]
    def text(codes: np.ndarray, table: tuple[str, ...]) -> np.ndarray:
        return np.array(table, dtype=object)[codes]

    return zip(spans["start"].tolist(), spans["end"].tolist(), text(spans["kind"], KINDS), owner.tolist(),
               label, _blank(spans["channel"], -1), _integers(spans["k"]), text(spans["outcome"], OUTCOMES),
               text(spans["detail"], DETAILS), _optional(spans["epsilon_spent"]), _optional(spans["price"]),
               _blank(spans["transmissions"], 0), strict=True)


def _blank(values: np.ndarray, empty: int) -> list:
    out = values.astype(object)
    out[values == empty] = None
    return out.tolist()


def _integers(values: np.ndarray) -> list:
    out = np.where(np.isnan(values), 0, values).astype(np.int64).astype(object)
    out[np.isnan(values)] = None
    return out.tolist()


def _optional(values: np.ndarray) -> list:
    out = values.astype(object)
    out[np.isnan(values)] = None
    return out.tolist()


def read(path: Path, block_bytes: int = BLOCK_BYTES) -> Iterator[Spans]:
    """spans.csv back as blocks in the form the sinks receive (codes for kind, outcome, detail); a file
    that was not written whole, or cannot be read, is a TimelineError naming it."""
    check_written(path, COLUMNS)
    return _refusing(_read_blocks(path, block_bytes), path)


def _read_blocks(path: Path, block_bytes: int) -> Iterator[Spans]:
    """:func:`read`'s blocks, with pyarrow's streaming reader."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    types = {"start": pa.float64(), "end": pa.float64(), "kind": pa.dictionary(pa.int32(), pa.string()),
             "owner": pa.int64(), "channel": pa.float64(), "k": pa.float64(),
             "outcome": pa.dictionary(pa.int32(), pa.string()),
             "detail": pa.dictionary(pa.int32(), pa.string()),
             "epsilon_spent": pa.float64(), "price": pa.float64(), "transmissions": pa.float64()}
    reader = pacsv.open_csv(path, read_options=pacsv.ReadOptions(block_size=block_bytes),
                            convert_options=pacsv.ConvertOptions(column_types=types,
                                                                 include_columns=list(types)))
    codes = {"kind": {k: i for i, k in enumerate(KINDS)}, "outcome": {k: i for i, k in enumerate(OUTCOMES)},
             "detail": {k: i for i, k in enumerate(DETAILS)}}
    for batch in reader:
        frame = {}
        for name in types:
            column = batch.column(name)
            if name in codes:
                frame[name] = _codes(column, codes[name], 0)
            elif name in ("channel", "transmissions"):
                empty = -1 if name == "channel" else 0
                frame[name] = np.nan_to_num(_floats(column), nan=empty).astype(np.int64)
            elif name == "owner":
                frame[name] = column.to_numpy(zero_copy_only=False).astype(np.int64)
            else:
                frame[name] = _floats(column)
        yield frame


def read_all(path: Path) -> pd.DataFrame:
    """The whole of spans.csv as one frame (see :func:`read`)."""
    import pandas as pd

    blocks = list(read(path))
    return pd.DataFrame({name: np.concatenate([b[name] for b in blocks]) for name in blocks[0]}) if blocks \
        else pd.DataFrame(_spans(0))
