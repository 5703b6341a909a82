"""The exchange tape of a run, and the fixed-size chunks it is streamed in.

A tape holds what a run decides exchange by exchange without looking at the model:
the owner and time of every update k, the index j of that answer among its owner's answers (which
noise draw it carries), the iteration whose model its query point was made of, the ticks at which
an owner whose budget is spent refuses and leaves, and why the run stopped.

A schedule (:mod:`dpmarket.schedule.scheduler`) emits its tape as :class:`Chunk` s of :data:`CHUNK` updates
(the last one shorter) while it runs, and the replay (:mod:`dpmarket.replay.kernel`) applies them as they
come, so what a run holds at once is a chunk and the learner's state, O(chunk + N·p), whatever its
number of exchanges. :class:`Tape` is a whole tape, for inspection and tests: it is the chunks
joined, and cuts back into the same chunks.

Staleness. In a network an update's query may have been sent several updates before it is applied
(several channels, or a broadcast slot that applies several answers). The replay then needs θ_L
as it was when the query was sent, and it keeps, per owner, θ_L at the owner's latest query (an
owner has one exchange under way at a time): O(N·p). So a chunk names, besides its updates, the
queries sent during its span that an update of a *later* chunk may use (``asked``); the replay
keeps θ_L at those.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np

CHUNK = 8192  # updates per chunk: 8192 × 32 bytes of tape, whatever T
NO_ASKED = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))


@dataclass(frozen=True)
class Leave:
    """An owner whose budget is spent ticks, refuses and stops taking part (one refusal row)."""

    after: int  # exchanges completed before this tick
    time: float
    owner: int  # slot


@dataclass(frozen=True)
class Chunk:
    """Updates ``start`` + 1 … ``end`` of a run's tape (arrays as :class:`Tape`'s, for these updates).

    ``leaves``: the refusal rows of owners leaving while the chunk's updates were drawn (each
    ``after`` in [start, end]). ``asked``: (owners, iterations) of queries sent after update
    ``start`` that updates of later chunks may use (their iterations in [start, end]); None when the
    schedule's exchanges never overlap. ``rounds``: synchronous rounds (``owner`` empty).
    """

    start: int
    owner: np.ndarray
    time: np.ndarray
    answer: np.ndarray
    query: np.ndarray | None = None
    leaves: tuple[Leave, ...] = ()
    asked: tuple[np.ndarray, np.ndarray] | None = None
    rounds: bool = False

    @property
    def updates(self) -> int:
        """How many updates the chunk holds."""
        return len(self.time)

    @property
    def end(self) -> int:
        """The updates done at the chunk's end."""
        return self.start + len(self.time)


@dataclass(frozen=True)
class Tape:
    """The exchanges of one run, in order (k = 1…K is entry k − 1).

    ``owner`` is the slot asked at each exchange (asynchronous learners) or empty when every owner
    answers each round (synchronous learners, ``rounds`` true); ``answer`` is the index j of that
    answer among its owner's answers (the j-th noise draw of its stream; in rounds, j = k − 1 for
    every owner). ``query`` is, in a network, the number of updates applied when each update's query
    point was computed (several channels let exchanges overlap); None means the one before, k − 1.
    """

    owner: np.ndarray  # int64 (K,), or (0,) for rounds
    time: np.ndarray  # float64 (K,)
    answer: np.ndarray  # int64 (K,)
    leaves: tuple[Leave, ...]
    stop_reason: str
    rounds: bool
    query: np.ndarray | None = None  # int64 (K,): updates done when each update's query was sent

    @property
    def staleness(self) -> int:
        """The most updates applied between an update's query and its own application (0: none)."""
        if self.query is None or not len(self.query):
            return 0
        return int(np.max(np.arange(len(self.query)) - self.query))

    @property
    def updates(self) -> int:
        """K, the updates of the learner."""
        return len(self.time)

    def answers_per_owner(self, owners: int) -> np.ndarray:
        """How many answers each of ``owners`` slots gives on this tape."""
        if self.rounds:
            return np.full(owners, self.updates, dtype=np.int64)
        return np.bincount(self.owner, minlength=owners).astype(np.int64)

    @property
    def end_time(self) -> float:
        """The time of the last exchange (0 without any), where the inline run's clock stops."""
        return float(self.time[-1]) if len(self.time) else 0.0

    def chunks(self, size: int = CHUNK) -> Iterator[Chunk]:
        """The tape as a schedule streams it: chunks of ``size`` updates (at least one chunk), each
        naming the queries of its span that later chunks' updates use."""
        asked = self._asked(size)
        leaves = list(self.leaves)
        for start in range(0, max(1, self.updates), size):
            end = min(start + size, self.updates)
            mine = [leave for leave in leaves if leave.after <= end]
            leaves = leaves[len(mine):]
            last = end >= self.updates
            yield Chunk(start, self.owner[start:end], self.time[start:end], self.answer[start:end],
                        None if self.query is None else self.query[start:end],
                        tuple(mine + (leaves if last else [])), asked.get(start // size), self.rounds)

    def _asked(self, size: int) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """Per chunk index, (owners, iterations) of the stale updates' queries sent in its span and
        applied in a later chunk."""
        if self.query is None:
            return {}
        k = np.arange(self.updates)
        late = np.flatnonzero(self.query // size < k // size)
        if not len(late):
            return {}
        where = self.query[late] // size
        return {int(c): (self.owner[late[where == c]], self.query[late[where == c]])
                for c in np.unique(where)}

    @staticmethod
    def of(chunks: Iterable[Chunk], stop_reason: str, rounds: bool | None = None) -> Tape:
        """The whole tape of ``chunks`` (in order)."""
        parts = list(chunks)
        rounds = any(c.rounds for c in parts) if rounds is None else rounds
        if not parts:
            return Tape(_ints([]), np.zeros(0), _ints([]), (), stop_reason, rounds)
        query = None if all(c.query is None for c in parts) else np.concatenate(
            [np.arange(c.start, c.end) if c.query is None else c.query for c in parts])
        return Tape(_ints([c.owner for c in parts]), np.concatenate([c.time for c in parts]),
                    _ints([c.answer for c in parts]), tuple(v for c in parts for v in c.leaves),
                    stop_reason, rounds, query)


def _ints(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, dtype=np.int64)
