"""The event log: one immutable typed row per event, streamed to ``events.csv`` as the run goes.

Rows are written immediately (buffered by the file object), so memory stays flat however long
a run is; per-kind counts are kept for the summary. Floats are written with ``repr`` so the same
run always produces the same bytes.
"""

from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path
from typing import NamedTuple

KINDS = ("tick", "request", "backoff", "collision", "loss", "dropout", "reconnect", "broadcast",
         "query", "response", "refusal", "update", "idle")
COLUMNS = ("time", "kind", "owner", "k", "epsilon_spent", "channel", "detail")


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


class EventLog:
    """Streams events to a CSV file (or nowhere, when ``path`` is None) and counts them by kind.

    ``owner_ids`` renumbers owners when only some of a scenario's owners train (a market where
    some decline): the simulation numbers its participants 0…M−1, the log writes and counts
    each under its scenario index, so ``events.csv`` and ``owners.csv`` always agree.
    """

    def __init__(self, path: Path | None, owner_ids: list[int] | None = None) -> None:
        self.owner_ids = owner_ids
        self.counts: Counter[str] = Counter()
        self.counts_by_owner: Counter[tuple[str, int]] = Counter()
        self._file = open(path, "w", newline="", encoding="utf-8") if path else None  # noqa: SIM115
        self._writer = csv.writer(self._file, lineterminator="\n") if self._file else None
        if self._writer:
            self._writer.writerow(COLUMNS)

    def emit(self, event: Event) -> None:
        """Record one event."""
        if self.owner_ids is not None and event.owner >= 0:
            event = event._replace(owner=self.owner_ids[event.owner])
        self.counts[event.kind] += 1
        self.counts_by_owner[event.kind, event.owner] += 1
        if self._writer:
            # csv writes None as an empty field and floats with repr (shortest round-trip form)
            self._writer.writerow(event)

    def close(self) -> None:
        """Flush and close the file."""
        if self._file:
            self._file.close()
            self._file = self._writer = None

    def __enter__(self) -> EventLog:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
