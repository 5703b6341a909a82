"""The event log: one immutable typed row per event, streamed to ``events.csv`` as the run goes.

Rows are written in blocks of a few thousand as the run goes, so memory stays flat however
long a run is; per-kind counts are kept for the summary. Floats are written with ``repr`` so the same
run always produces the same bytes.
"""

from __future__ import annotations

import csv
from collections import Counter
from operator import itemgetter
from pathlib import Path
from typing import NamedTuple

KINDS = ("tick", "request", "backoff", "collision", "loss", "dropout", "reconnect", "broadcast",
         "query", "response", "refusal", "update", "idle", "price", "payment", "join", "leave")
COLUMNS = ("time", "kind", "owner", "k", "epsilon_spent", "channel", "detail")
MARKET_COLUMNS = (*COLUMNS, "amount")  # a market in time adds the amount of its price, payment, join, leave


class Event(NamedTuple):
    """One row of ``events.csv``.

    ``owner`` is −1 for the learner's own events (a broadcast query, an idle slot, a
    synchronous update); ``k`` is set on updates; ``epsilon_spent`` on responses and refusals
    (the owner's total after answering); ``channel`` where a channel is involved; ``detail``
    says why for losses and refusals.
    """

    time: float
    kind: str
    owner: int
    k: int | None = None
    epsilon_spent: float | None = None
    channel: int | None = None
    detail: str | None = None


BLOCK_ROWS = 4096  # rows held before they are counted and written: bounded memory, bulk C loops
_BLOCK = BLOCK_ROWS
_KIND_OWNER, _KIND = itemgetter(1, 2), itemgetter(1)


class EventLog:
    """Streams events to a CSV file (or nowhere, when ``path`` is None) and counts them.

    The engine logs several rows per exchange, so :meth:`record` is kept cheap: it only
    appends the row to a block, and every ``_BLOCK`` rows the block is counted per
    (kind, owner) and written (when there is a file), one C-level call each. The counts are
    read through properties that flush first.

    ``owner_ids`` renumbers owners when only some of a scenario's owners train (a market where
    some decline): the simulation numbers its participants 0…M−1, the log writes and counts
    each under its scenario index, so ``events.csv`` and ``owners.csv`` always agree. The
    renumbering happens per block and per count, off the per-event path.

    ``by_owner`` false counts rows per kind only (a third of the cost of counting (kind, owner)
    pairs): for logs whose per-owner counts nobody reads, such as a replication's schedule.

    ``market`` (a market in time) adds the column ``amount``, filled by :meth:`market_row`; the
    other rows leave it empty, so they read as in any other run.
    """

    def __init__(self, path: Path | None, owner_ids: list[int] | None = None, by_owner: bool = True,
                 market: bool = False) -> None:
        self.owner_ids, self.market = owner_ids, market
        self._by_owner: Counter[tuple[str, int]] = Counter()
        self._by_kind: Counter[str] | None = None if by_owner else Counter()
        self._rows: list[tuple] = []
        self._file = open(path, "w", newline="", encoding="utf-8") if path else None  # noqa: SIM115
        writer = csv.writer(self._file, lineterminator="\n") if self._file else None
        self._writerows = writer.writerows if writer else None
        if writer:
            writer.writerow(MARKET_COLUMNS if market else COLUMNS)

    def emit(self, event: Event) -> None:
        """Record one event."""
        self.record(*event)

    def record(self, time: float, kind: str, owner: int, k: int | None = None,
               epsilon_spent: float | None = None, channel: int | None = None,
               detail: str | None = None) -> None:
        """Record one event given as the fields of :class:`Event`, in its order."""
        rows = self._rows
        rows.append((time, kind, owner, k, epsilon_spent, channel, detail))
        if len(rows) >= _BLOCK:
            self._flush()

    @property
    def block(self) -> list[tuple]:
        """The block being filled (always the same list). A caller that logs many rows may append
        tuples of :class:`Event`'s fields to it directly, a C call where :meth:`record` is a Python
        one, provided it calls :meth:`settle` once the block holds BLOCK_ROWS rows or more (the SimPy
        engine checks at every clock tick, so a block exceeds BLOCK_ROWS by at most the rows of the
        exchanges in flight)."""
        return self._rows

    def settle(self) -> None:
        """Count and write the block if it is full (see :attr:`block`)."""
        if len(self._rows) >= _BLOCK:
            self._flush()

    def market_row(self, time: float, kind: str, owner: int, amount: float,
                   epsilon_spent: float | None = None, detail: str | None = None) -> None:
        """Record a row of the market in time (price, payment, join, leave) with its amount."""
        self._rows.append((time, kind, owner, None, epsilon_spent, None, detail, amount))

    def _flush(self) -> None:
        rows = self._rows
        if self._by_kind is None:
            self._by_owner.update(map(_KIND_OWNER, rows))
        else:
            self._by_kind.update(map(_KIND, rows))
        if self.market:  # in place: the block is the same list for callers that append to it
            rows[:] = [r if len(r) == 8 else (*r, None) for r in rows]
        if self._writerows:
            ids = self.owner_ids
            out = rows if ids is None else [
                (r[0], r[1], ids[r[2]] if r[2] >= 0 else r[2], *r[3:]) for r in rows]
            # csv writes None as an empty field and floats with repr (shortest round-trip form)
            self._writerows(out)
        rows.clear()

    @property
    def counts_by_owner(self) -> Counter[tuple[str, int]]:
        """Events per (kind, owner); missing pairs count 0."""
        if self._by_kind is not None:
            raise ValueError("this log counts events per kind only (by_owner=False)")
        self._flush()
        ids = self.owner_ids
        if ids is None:
            return Counter(self._by_owner)
        return Counter({(kind, ids[o] if o >= 0 else o): n for (kind, o), n in self._by_owner.items()})

    @property
    def counts(self) -> Counter[str]:
        """Events per kind; missing kinds count 0."""
        self._flush()
        if self._by_kind is not None:
            return Counter(self._by_kind)
        totals: Counter[str] = Counter()
        for (kind, _), n in self._by_owner.items():
            totals[kind] += n
        return totals

    def close(self) -> None:
        """Flush and close the file."""
        if self._file:
            self._flush()
            self._file.close()
            self._file = self._writerows = None

    def __enter__(self) -> EventLog:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
