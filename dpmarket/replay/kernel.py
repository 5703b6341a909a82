"""The replay: the tapes of R runs applied at once by a batched learning kernel.

Every replication of a cell has the same owners (data, noise scales, caps) and the same learner
constants; only its tape (who answered when, :mod:`dpmarket.schedule.scheduler`) and its noise streams
differ. The kernel keeps the R runs' models as arrays — θ_L of shape (R, p), the owners' copies
(R, N, p) — and performs update k of every replication in one pass of numpy calls.

The tapes come as chunks (:mod:`dpmarket.schedule.tape`), pulled from each replication's schedule as the
replay reaches them (:class:`Reader`), so a schedule that runs alongside (the SimPy engine) holds
only a chunk at a time: memory is O(block + chunk + R·N·p) whatever the number of exchanges.

It computes what the inline path computes, in the same order, with the same operations: the query
point, each owner's exact answer (from its sufficient statistics, or its records), plus the j-th
standard draw of the owner's own noise stream times its scale, both projected steps of
Algorithm 1 (or a synchronous round). Matrix-vector products are stacked (``np.matmul`` over a
leading axis calls the same BLAS routine per row as the inline ``A @ θ``), every other operation is
elementwise, so each replication's models are the inline run's, bit for bit on the machines
measured (the tests require 10⁻¹² relative; see README, "Replications").

Privacy: the replay applies only the answers on the tapes, and each tape holds no more answers of
an owner than its ledger could pay (the schedule asked the ledger); the noise table checks that
again, and that the j-th answer carries the j-th draw, before any answer is applied.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from dpmarket import rng as streams
from dpmarket.learning import kernels
from dpmarket.learning.learner import AsyncLearner, SyncAveragedLearner, SyncLearner
from dpmarket.privacy.mechanisms import SystemNoise, noise_kind
from dpmarket.privacy.owners import DataOwner, project
from dpmarket.replay import compiled
from dpmarket.schedule.tape import CHUNK, NO_ASKED, Chunk

BLOCK_VALUES = 1 << 21  # noise values held per block of updates (16 MiB), whatever T and R
CHUNK_LIMIT = CHUNK  # updates per block at most: the replay keeps pace with a schedule's chunks


@dataclass(frozen=True)
class Gathered:
    """Owners' b_i = Z_iᵀy_i and 2/n_i gathered for the slots of some updates."""

    b: np.ndarray
    two_n: np.ndarray

    def __getitem__(self, index) -> Gathered:
        return Gathered(self.b[index], self.two_n[index])


class Answers:
    """The owners' exact answers Q_i(θ) for many (slot, θ) pairs at once, each equal to
    :meth:`DataOwner.exact_answer` — from sufficient statistics for squared loss without clipping,
    else from the records: each owner's query points of an update in one call of the record kernel
    (:mod:`dpmarket.learning.records`: one pass over its records for all of them, each point's
    answer the bits it has alone)."""

    def __init__(self, owners: list[DataOwner]) -> None:
        self.owners = owners
        self.theta_max = owners[0].theta_max if owners else np.inf  # Θ: every query is projected onto it
        self._query = np.empty(owners[0].noise.dim if owners else 0)  # one projected query (:meth:`one`)
        self.stats = all(o.clip is None and o.loss.name == "squared" for o in owners)
        if self.stats:
            self.A = np.array([o.data.stats.A for o in owners])
            self.b = np.array([o.data.stats.b for o in owners])
            self.two_n = np.array([2.0 / o.data.n for o in owners])  # the inline (2.0 / n) exactly

    def of(self, slots: np.ndarray, thetas: np.ndarray, rows: Gathered | None = None) -> np.ndarray:
        """Row r: the exact answer of owner ``slots[r]`` at ``thetas[r]`` projected onto Θ, as
        :meth:`DataOwner.exact_answer` projects it (``rows``: the owners' statistics gathered for these
        slots beforehand, see :meth:`gather`)."""
        thetas = project(thetas, self.theta_max)
        if self.stats:
            rows = self.gather(slots) if rows is None else rows
            product = np.matmul(np.take(self.A, slots, axis=0), thetas[:, :, None])[:, :, 0]
            return rows.two_n[:, None] * (product - rows.b)
        if len(slots) == 1:  # one replication: no grouping
            return self.records(int(slots[0]), thetas)
        out = np.empty_like(thetas)
        order = np.argsort(slots, kind="stable")
        for group in np.split(order, np.flatnonzero(np.diff(slots[order])) + 1):
            out[group] = self.records(int(slots[group[0]]), thetas[group])
        return out

    def one(self, slot: int, theta: np.ndarray) -> np.ndarray:
        """Owner ``slot``'s exact answer at one ``theta`` (projected onto Θ), with the inline answer's
        own operations."""
        query, bound = self._query, self.theta_max  # into one buffer: this runs once per update
        theta = np.minimum(np.maximum(theta, -bound, out=query), bound, out=query)
        if self.stats:
            return self.two_n[slot] * (self.A[slot] @ theta - self.b[slot])
        return self.records(slot, theta[None])[0]

    def gather(self, slots: np.ndarray) -> Gathered | None:
        """The statistics of the owners ``slots`` (any shape), gathered once for a block of updates."""
        return Gathered(self.b[slots], self.two_n[slots]) if self.stats else None

    def every(self, thetas: np.ndarray) -> np.ndarray:
        """(R, N, p): every owner's exact answer at each row of ``thetas`` (projected onto Θ;
        synchronous rounds)."""
        thetas = project(thetas, self.theta_max)
        if self.stats:
            product = np.matmul(self.A[None], thetas[:, None, :, None])[..., 0]
            return self.two_n[None, :, None] * (product - self.b[None])
        return np.stack([self.records(i, thetas) for i in range(len(self.owners))], axis=1)

    def records(self, slot: int, thetas: np.ndarray) -> np.ndarray:
        """Owner ``slot``'s answers at the rows of ``thetas`` from its records (clipped if it clips), each
        row the bits :meth:`DataOwner.exact_answer` gives for it alone."""
        owner = self.owners[slot]
        return owner.loss.mean_grads(thetas, owner.data, owner.clip, owner.norm)


@dataclass(frozen=True)
class Drawn:
    """A block's standard draws (``pool``) and, per update and replication, the row of its answer's
    draw and its owner's noise scale."""

    pool: np.ndarray
    row: np.ndarray
    scale: np.ndarray

    def __getitem__(self, at) -> np.ndarray:
        """The noise of the answers ``at`` (an update, or an update and some replications): the
        standard draw times the scale, as the inline sampler computes it."""
        return np.take(self.pool, self.row[at], axis=0) * self.scale[at][:, None]


class Noise:
    """Each replication's owners' noise, drawn from the same per-owner streams as the inline run
    (``noise`` stream of the replication seed and the owner's scenario index) and handed out by
    blocks of updates: the j-th answer of an owner gets the j-th standard draw times its scale.
    A stream is opened when its owner first answers in that replication."""

    def __init__(self, seeds: Sequence[int], owners: list[DataOwner], capacity: np.ndarray) -> None:
        self.seeds, self.index = list(seeds), [o.index for o in owners]
        self.gens: dict[tuple[int, int], np.random.Generator] = {}
        self.kinds = [noise_kind(o.mechanism) for o in owners]
        self.scale = np.array([o.scale for o in owners])
        self.capacity = np.asarray(capacity, dtype=np.int64)
        self.drawn = np.zeros((len(seeds), len(owners)), dtype=np.int64)
        # privacy.noise = "system": every replication draws from the operating system's generator
        self.system = next((o.noise.rng for o in owners if isinstance(o.noise.rng, SystemNoise)), None)
        self.dim = owners[0].noise.dim if owners else 0

    def exchanges(self, slots: np.ndarray, answers: np.ndarray, valid: np.ndarray, k0: int) -> Drawn:
        """The noise of updates k0+1… of every replication (update-major (B, R) arrays: owners
        ``slots``, answer indices ``answers``, ``valid`` where a tape has the update): each
        replication's owners' draws up to the last answer applied, in one pool. An answer index may
        skip draws (in a network, an answer that was lost had its draw and its ε spent), but never
        goes back to a draw already used."""
        R, N = self.drawn.shape
        keys = np.arange(R) * N + slots  # (replication, owner) of each answer
        before = self.drawn.reshape(-1).copy()
        self._check_order(keys.T[valid.T], answers.T[valid.T], before, k0, k0 + len(slots))
        need = before.copy()
        np.maximum.at(need, keys[valid], answers[valid] + 1)
        counts = need - before
        wanted = np.flatnonzero(counts)
        self._open([divmod(int(key), N) for key in wanted])
        pools = [self._draw(int(key) // N, int(key) % N, int(counts[key])) for key in wanted]
        start = np.zeros(len(counts), dtype=np.int64)
        start[wanted] = np.concatenate(([0], np.cumsum(counts[wanted])[:-1]))  # each key's first row
        rows = np.where(valid, start[keys] + answers - before[keys], 0)
        pool = np.concatenate(pools) if pools else np.zeros((1, self.dim))
        return Drawn(pool, rows, self.scale[slots])

    @staticmethod
    def _check_order(keys: np.ndarray, answers: np.ndarray, drawn: np.ndarray, k0: int, k1: int) -> None:
        """Each owner's answers (``keys``: replication and owner, in update order) must use draws in
        increasing order, none of them already used (``drawn``: draws used before the block)."""
        order = np.argsort(keys, kind="stable")
        k, a = keys[order], answers[order]
        first = np.concatenate(([True], k[1:] != k[:-1]))
        previous = np.where(first, drawn[k] - 1, np.concatenate(([-1], a[:-1])))
        if np.any(a <= previous):
            raise RuntimeError(f"replay: some answers of updates {k0 + 1}…{k1} reuse or go back to an "
                               "owner's earlier noise draw: the tape is out of order")

    def rounds(self, pieces: list[Chunk], k0: int, length: int) -> np.ndarray:
        """(length, R, N, p): every owner's noise for rounds k0+1…k0+length (zeros past a tape's end)."""
        out = np.zeros((length, len(pieces), len(self.kinds), self.dim))
        self._open([(r, slot) for r in range(len(pieces)) for slot in range(len(self.kinds))])
        for r, piece in enumerate(pieces):
            for slot in range(len(self.kinds)):
                first = self.drawn[r, slot]
                if not np.array_equal(piece.answer, np.arange(first, first + piece.updates)):
                    raise RuntimeError(f"replay: replication {r}'s rounds are out of order")
                out[:piece.updates, r, slot] = self._draw(r, slot, piece.updates) * self.scale[slot]
        return out

    def _draw(self, r: int, slot: int, count: int) -> np.ndarray:
        """The next ``count`` standard draws of owner ``slot``'s stream in replication r, refused beyond
        what its ledger can pay (an answer past the cap is never applied)."""
        first = int(self.drawn[r, slot])
        if first + count > self.capacity[slot]:
            raise RuntimeError(f"replay: owner slot {slot} would give answer {first + count} of a ledger "
                               f"that pays {self.capacity[slot]}: refused answers are never applied")
        self.drawn[r, slot] += count
        return self.kinds[slot].standard(self.stream(r, slot), count, self.dim)

    def _open(self, keys: list[tuple[int, int]]) -> None:
        """Open the streams of these (replication, slot) pairs that are not open yet, all at once
        (:func:`dpmarket.rng.streams` hashes their entropies together, a fraction of one at a time)."""
        new = [key for key in keys if key not in self.gens]
        if self.system is not None:
            self.gens.update(dict.fromkeys(new, self.system))
            return
        made = streams.streams([(self.seeds[r], "noise", self.index[slot]) for r, slot in new])
        self.gens.update(zip(new, made, strict=True))

    def stream(self, r: int, slot: int) -> np.random.Generator:
        """Owner ``slot``'s noise stream in replication r (opened at its first use)."""
        gen = self.gens.get((r, slot))
        if gen is None:
            gen = self.gens[r, slot] = self.system or streams.stream(self.seeds[r], "noise", self.index[slot])
        return gen


class Reader:
    """One replication's tape as the replay reads it: chunks pulled from its schedule when the replay
    reaches them, handed out as pieces of the replay's blocks of updates. It holds at most a block
    and a chunk of updates, and the queries a later update may use (``Chunk.asked``) until the block
    in which they were sent."""

    def __init__(self, chunks: Iterable[Chunk]) -> None:
        self._chunks: Iterator[Chunk] = iter(chunks)
        self._parts: list[Chunk] = []
        self._asked: list[tuple[np.ndarray, np.ndarray]] = []
        self.position = 0  # updates handed out
        self.rounds = False

    def take(self, k1: int) -> Chunk:
        """Updates position+1 … min(k1, the tape's end) as one piece, whose ``asked`` are the queries
        sent after update position and before update k1 that later updates may use."""
        have = self._parts[-1].end if self._parts else self.position
        while have < k1:
            chunk = next(self._chunks, None)
            if chunk is None:
                break
            if chunk.start != have:
                raise RuntimeError(f"replay: the tape's chunk after update {have} starts after update "
                                   f"{chunk.start}: a chunk is missing or repeated")
            self.rounds |= chunk.rounds
            self._parts.append(chunk)
            have = chunk.end
            if chunk.asked is not None and len(chunk.asked[0]):
                self._asked.append(chunk.asked)
        piece = self._cut(min(k1, have))
        self.position = piece.end
        return piece

    def _cut(self, end: int) -> Chunk:
        """The buffered updates up to ``end`` (the rest stays buffered) as one piece, its ``asked``
        completed with the queries of the rest that were sent before ``end``."""
        parts, n = self._parts, end - self.position
        if len(parts) == 1 and parts[0].updates == n:
            whole, self._parts = parts[0], []
        else:
            whole = _joined(parts, self.position, self.rounds)
            rest = _sliced(whole, n, whole.updates)
            self._parts = [rest] if rest.updates else []
            if rest.query is not None:
                early = np.flatnonzero(rest.query < end)
                self._asked.append((rest.owner[early], rest.query[early]))
            whole = _sliced(whole, 0, n)
        asked, self._asked = _split_asked(self._asked, end)
        return Chunk(whole.start, whole.owner, whole.time, whole.answer, whole.query, (), asked, whole.rounds)


def _joined(parts: list[Chunk], start: int, rounds: bool) -> Chunk:
    """Consecutive chunks as one (queries filled in as k − 1 where a chunk has none)."""
    if len(parts) == 1:
        return parts[0]
    if not parts:
        none = np.zeros(0, dtype=np.int64)
        return Chunk(start, none, np.zeros(0), none, None, (), None, rounds)
    query = None if all(p.query is None for p in parts) else np.concatenate(
        [np.arange(p.start, p.end) if p.query is None else p.query for p in parts])
    return Chunk(start, np.concatenate([p.owner for p in parts]), np.concatenate([p.time for p in parts]),
                 np.concatenate([p.answer for p in parts]), query, (), None, rounds)


def _sliced(chunk: Chunk, a: int, b: int) -> Chunk:
    """Updates a+1…b of ``chunk`` (counted from its start) as a chunk of their own."""
    owner = chunk.owner if chunk.rounds else chunk.owner[a:b]
    query = None if chunk.query is None else chunk.query[a:b]
    return Chunk(chunk.start + a, owner, chunk.time[a:b], chunk.answer[a:b], query, (), None, chunk.rounds)


def _split_asked(asked: list[tuple[np.ndarray, np.ndarray]], end: int) -> tuple[tuple, list]:
    """(owners, iterations) of the queries sent before update ``end``, and the list of the others."""
    if not asked:
        return NO_ASKED, asked
    owners = np.concatenate([a[0] for a in asked])
    at = np.concatenate([a[1] for a in asked])
    now = at < end
    rest = [(owners[~now], at[~now])] if not np.all(now) else []
    return (owners[now], at[now]), rest


class AsyncBatch:
    """R copies of :class:`~dpmarket.learning.learner.AsyncLearner`'s state, updated together.

    Overlapping exchanges (a query sent several updates before its answer is applied) read θ_L as
    it was when the query was sent: θ_L is kept, per replication and owner, at the queries a later
    update uses (``kept``: R·N rows, allocated at the first such query, with the iteration each row
    holds, checked at every read)."""

    def __init__(self, learner: AsyncLearner, replications: int) -> None:
        self.c = learner
        p, N = learner.theta_L.shape[0], learner.N
        self.theta_L = np.zeros((replications, p))
        self.theta = np.zeros((replications, N, p))
        self.copies = self.theta.reshape(replications * N, p)  # row r·N + i: replication r's θ_i
        self.counts = np.zeros((replications, N), dtype=np.int64)
        self.offsets = N * np.arange(replications)  # replication r's first row in ``copies``
        self.share = np.asarray(learner._share)
        self.kept: np.ndarray | None = None  # θ_L at the queries later updates use, row r·N + i
        self.kept_at: np.ndarray | None = None  # the iteration each row of ``kept`` holds
        self.k = 0
        self.observer: Observer | None = None

    @property
    def model(self) -> np.ndarray:
        """θ_L of every replication."""
        return self.theta_L

    def block(self, slots: np.ndarray, noise: Drawn, answers: Answers) -> Block:
        """What a block of updates of owners ``slots`` (update-major) needs, gathered once."""
        return Block(slots, slots + self.offsets, np.take(self.share, slots), answers.gather(slots), noise)

    def run(self, slots: np.ndarray, lengths: np.ndarray, drawn: Drawn, answers: Answers,
            record: np.ndarray, *, models: np.ndarray) -> bool:
        """A block of updates without stale queries (owners ``slots``, update-major; ``lengths``:
        each tape's updates in it) by the compiled kernel: :meth:`step`'s operations in its order;
        θ_L kept after step s in ``models[record[s]]`` where record[s] ≥ 0. False, nothing done, when
        numba turned out unusable (``auto``): the caller replays the block with numpy."""
        c = self.c
        learner = (c.lam, c.step_owner, c.step_central, c.theta_max, c.weighting != "none")
        stats = (answers.A, answers.b, answers.two_n, self.share)
        block = (slots, lengths, drawn.pool, drawn.row, drawn.scale, record)
        if not compiled.async_block(self.theta_L, self.copies, self.counts, self.k, stats, learner=learner,
                                    block=block, models=models):
            return False
        self.k += len(slots)
        return True

    def keep(self, rows: np.ndarray, replications: np.ndarray, at: np.ndarray) -> None:
        """Keep θ_L of ``replications`` now (after update ``at``) in ``rows`` of the kept queries."""
        if self.kept is None:
            self.kept = np.zeros((self.copies.shape[0], self.copies.shape[1]))
            self.kept_at = np.full(self.copies.shape[0], -1, dtype=np.int64)
        self.kept[rows] = self.theta_L[replications]
        self.kept_at[rows] = at

    def _query_model(self, rows: np.ndarray | None, old: Stale | None) -> np.ndarray:
        """θ_L at each update's query: the current one, or the kept one where the query is older."""
        theta_L = self.theta_L if rows is None else self.theta_L[rows]
        if old is None:
            return theta_L
        if self.kept_at is None or not np.array_equal(self.kept_at[old.rows], old.at):
            raise RuntimeError(f"replay: update {self.k} uses a query point the tape did not say to keep "
                               "(its query was sent before the chunk and not named by it)")
        theta_L = theta_L.copy() if rows is None else theta_L
        theta_L[old.positions] = self.kept[old.rows]
        return theta_L

    def step(self, rows: np.ndarray | None, u: Step, answers: Answers, old: Stale | None = None) -> None:
        """Update k + 1 of the replications ``rows`` (None: all) with the owners, noise and statistics
        of ``u``, as :meth:`AsyncLearner.update` computes it after the owner's answer; ``old``: the
        updates among them whose query is older than update k."""
        c = self.c
        self.k += 1
        theta_L = self._query_model(rows, old)
        theta_bar = 0.5 * (theta_L + np.take(self.copies, u.flat, axis=0))
        answer = answers.of(u.slots, theta_bar, u.gathered) + u.noise
        if self.observer is not None:  # an audit's adversary sees what the learner sees
            self.observer.exchanges(rows, u.slots, theta_bar, answer)
        grad_g = (2.0 * c.lam) * theta_bar
        weight = u.share
        if c.weighting != "none":
            counts = self.counts.reshape(-1)
            counts[u.flat] += 1
            weight = weight * (1.0 / (c.N * ((counts[u.flat] + 1.0) / (self.k + c.N))))
        step_i = theta_bar - c.step_owner * (grad_g / (2 * c.N) + weight[:, None] * answer)
        self.copies[u.flat] = _project(step_i, c.theta_max)
        central = _project(theta_bar - c.step_central * grad_g, c.theta_max)
        if rows is None:
            self.theta_L = central
        else:
            self.theta_L[rows] = central


class SingleRun:
    """One replication of the asynchronous learner: the learner itself applies its tape (its own
    update, the inline one), the replay providing each answer and its noise. One run alone pays no
    batching overhead this way, and its learner is the run's."""

    def __init__(self, learner: AsyncLearner) -> None:
        self.c = learner
        self.learner = run = copy.copy(learner)
        run.theta_L, run.theta = np.zeros_like(learner.theta_L), np.zeros_like(learner.theta)
        run.counts, run.k = np.zeros_like(learner.counts), 0
        self.kept: np.ndarray | None = None  # θ_L at the queries later updates use, one row per owner
        self.kept_at: np.ndarray | None = None
        self.observer: Observer | None = None

    @property
    def model(self) -> np.ndarray:
        """θ_L, as a batch of one."""
        return self.learner.theta_L[None]

    def keep(self, rows: np.ndarray, replications: np.ndarray, at: np.ndarray) -> None:
        """Keep θ_L now (after update ``at``) in ``rows`` (owners) of the kept queries."""
        if self.kept is None:
            self.kept = np.zeros_like(self.learner.theta)
            self.kept_at = np.full(len(self.kept), -1, dtype=np.int64)
        self.kept[rows] = self.learner.theta_L
        self.kept_at[rows] = at

    def run(self, piece: Chunk, noise: Drawn, answers: Answers, plan: _Staleness, k0: int,
            *, models: np.ndarray, index: dict[int, int]) -> None:
        """Updates k0+1… of ``piece``: θ̄ from θ_L (or θ_L kept at an older query), the owner's exact
        answer plus its noise draw times its scale, and :meth:`AsyncLearner.update`."""
        learner, pool, update = self.learner, noise.pool, self.learner.update
        rows, scales = noise.row[:, 0].tolist(), noise.scale[:, 0].tolist()
        seen = -1 if self.observer is None else self.observer.slot
        for step, owner in enumerate(piece.owner.tolist()):
            old = plan.old(step, None)
            theta_L = learner.theta_L if old is None else self._kept(old, k0 + step + 1)
            theta_bar = 0.5 * (theta_L + learner.theta[owner])
            answer = answers.one(owner, theta_bar) + pool[rows[step]] * scales[step]
            if owner == seen:  # an audit's adversary sees what the learner sees
                self.observer.exchanges(None, np.array([owner]), theta_bar[None], answer[None])
            update(owner, theta_bar, answer)
            plan.keep(self, step)
            if k0 + step + 1 in index:
                models[index[k0 + step + 1], 0] = learner.theta_L

    def _kept(self, old: Stale, k: int) -> np.ndarray:
        if self.kept_at is None or self.kept_at[old.rows[0]] != old.at[0]:
            raise RuntimeError(f"replay: update {k} uses a query point the tape did not say to keep "
                               "(its query was sent before the chunk and not named by it)")
        return self.kept[old.rows[0]]


@dataclass(frozen=True)
class Stale:
    """The updates of one step whose query is older than the update before: their positions among
    the step's replications, their rows of the kept queries and the iteration each must hold."""

    positions: np.ndarray
    rows: np.ndarray
    at: np.ndarray


@dataclass(frozen=True)
class Step:
    """One update of some replications: owners' slots, their rows among the copies, their shares
    n_i/n, their statistics (squared loss) and their answers' noise."""

    slots: np.ndarray
    flat: np.ndarray
    share: np.ndarray
    gathered: Gathered | None
    noise: np.ndarray


@dataclass(frozen=True)
class Block:
    """A block of updates (update-major arrays), from which each update's :class:`Step` is cut."""

    slots: np.ndarray
    flat: np.ndarray
    share: np.ndarray
    gathered: Gathered | None
    noise: Drawn

    def __getitem__(self, at) -> Step:
        gathered = None if self.gathered is None else self.gathered[at]
        return Step(self.slots[at], self.flat[at], self.share[at], gathered, self.noise[at])


class SyncBatch:
    """R copies of a synchronous learner's state (plain, or averaged as Algorithm 2 of paper 002)."""

    def __init__(self, learner: SyncLearner, replications: int) -> None:
        self.c, self.averaged = learner, isinstance(learner, SyncAveragedLearner)
        self.theta_now = np.zeros((replications, learner.theta_now.shape[0]))
        self.theta_avg = np.zeros_like(self.theta_now)
        self.k = 0
        self.observer: Observer | None = None

    @property
    def model(self) -> np.ndarray:
        """The published model of every replication: the iterate, or its average."""
        return self.theta_avg if self.averaged else self.theta_now

    def step(self, rows: np.ndarray | None, noise: np.ndarray, answers: Answers, old: None = None) -> None:
        """Round k + 1 of the replications ``rows`` (None: all): every owner answers at the iterate."""
        rows = slice(None) if rows is None else rows
        c, theta = self.c, self.theta_now[rows].copy()  # the query point, and the previous iterate
        replies = answers.every(theta) + noise
        if self.observer is not None:  # an audit's adversary sees what the learner sees
            self.observer.rounds(None if isinstance(rows, slice) else rows, theta, replies)
        direction = 2.0 * c.lam * theta + np.matmul(c.share[None, None, :], replies)[:, 0, :]
        step = c.rho / np.sqrt(self.k + 1) if self.averaged else c.rho / (c.T * c.T * (self.k + 1))
        self.k += 1
        self.theta_now[rows] = np.clip(theta - step * direction, -c.theta_max, c.theta_max)
        if self.averaged:
            k, r = self.k, 1.0 / np.sqrt(c.T)
            self.theta_avg[rows] = ((k - 1) * self.theta_avg[rows] + (r + 1.0) * theta) / (r + k)


def _project(x: np.ndarray, bound: float) -> np.ndarray:
    """Π_Θ as the inline learner computes it (maximum, then minimum)."""
    return np.minimum(np.maximum(x, -bound, out=x), bound, out=x)


@dataclass
class Replayed:
    """The replayed runs: the model of every replication after each of the updates ``at`` (sorted;
    a replication whose tape is shorter keeps its last model), its last model and its updates."""

    at: list[int]
    models: np.ndarray  # (len(at), R, p)
    final: np.ndarray  # (R, p): each replication's model after its last update
    updates: np.ndarray  # (R,): each replication's updates
    batch: AsyncBatch | SingleRun | SyncBatch  # the final state

    def model(self, r: int, k: int) -> np.ndarray:
        """Replication r's model after update k (one of ``at``, or its last)."""
        return self.final[r] if k == self.updates[r] else self.models[self.at.index(k), r]


class Observer(Protocol):
    """What sees the answers as the learner sees them (an audit's adversary, :mod:`dpmarket.runs.audit`):
    each update's query points and noisy answers, as they are applied. ``slot`` is the owner it
    watches (set by :meth:`attach`); the replay runs on numpy when an observer is attached."""

    slot: int

    def attach(self, owners: list[DataOwner]) -> None:
        """Called once with the replay's owners (to find the watched owner's slot)."""

    def exchanges(self, rows: np.ndarray | None, slots: np.ndarray, query: np.ndarray,
                  answer: np.ndarray) -> None:
        """One asynchronous update of the replications ``rows`` (None: all): owner ``slots[r]`` was
        asked at ``query[r]`` and answered ``answer[r]`` (noise included)."""

    def rounds(self, rows: np.ndarray | None, query: np.ndarray, answer: np.ndarray) -> None:
        """One synchronous round: ``answer[r, i]``, owner i's answer at ``query[r]``."""


def replay(learner: AsyncLearner | SyncLearner, owners: list[DataOwner], tapes: Sequence[Iterable[Chunk]],
           seeds: Sequence[int], capacity: np.ndarray, *, at: Sequence[int] = (), progress=None,
           expected: int = 0, observer: Observer | None = None) -> Replayed:
    """Apply ``tapes`` (replication r's chunks, with noise from ``seeds[r]``) to fresh copies of
    ``learner`` (a template: only its constants are read); keep the models after the updates ``at``
    and each replication's last. ``progress`` (anything with ``update(n)``) counts the updates of
    the longest tape; ``expected``: the updates a tape is expected to have (the learner's T), from
    which ``DPMARKET_KERNEL=auto`` judges whether the compiled kernel pays
    (:mod:`dpmarket.replay.compiled`). ``observer`` sees every answer applied (an audit)."""
    at = sorted(set(int(k) for k in at))
    asynchronous = isinstance(learner, AsyncLearner)
    R, p = len(tapes), learner.model.shape[0]
    if asynchronous:
        batch = SingleRun(learner) if R == 1 else AsyncBatch(learner, R)
    else:
        batch = SyncBatch(learner, R)
    answers, noise = Answers(owners), Noise(seeds, owners, capacity)
    if observer is not None:
        observer.attach(owners)
        batch.observer = observer
    fast = (isinstance(batch, AsyncBatch) and answers.stats and observer is None
            and compiled.wanted(R * expected))
    readers = [Reader(t) for t in tapes]
    models, index = np.zeros((len(at), R, p)), {k: i for i, k in enumerate(at)}
    answers_per_update = 1 if asynchronous else len(owners)
    block = min(CHUNK_LIMIT, max(1, BLOCK_VALUES // max(1, R * p * answers_per_update)))
    updates, k0 = np.zeros(R, dtype=np.int64), 0
    if 0 in index:
        models[index[0]] = batch.model
    while True:
        pieces = [reader.take(k0 + block) for reader in readers]
        lengths = np.array([piece.updates for piece in pieces], dtype=np.int64)
        if not lengths.any():
            break
        _replay_block(batch, pieces, lengths, noise, answers, k0=k0, models=models, index=index, fast=fast)
        updates += lengths
        k0 += block
        if progress is not None:
            progress.update(int(lengths.max()))
    return Replayed(at, models, batch.model.copy(), updates, batch)


def _replay_block(batch, pieces: list[Chunk], lengths: np.ndarray, noise: Noise, answers: Answers, *, k0: int,
                  models: np.ndarray, index: dict[int, int], fast: bool = False) -> None:
    """Updates k0+1…k0+max(lengths) of every replication whose tape is that long (``fast``: by the
    compiled kernel if no query of the block is older than the update before)."""
    B, plan = int(lengths.max()), None
    if isinstance(batch, SingleRun):
        slots, valid = pieces[0].owner[:, None], np.ones((B, 1), dtype=bool)
        plan = _Staleness(pieces, k0, batch.c.N)
        plan.keep(batch, -1)
        drawn = noise.exchanges(slots, pieces[0].answer[:, None], valid, k0)
        batch.run(pieces[0], drawn, answers, plan, k0, models=models, index=index)
        return
    if isinstance(batch, AsyncBatch):
        slots = _column(pieces, B, "owner")
        valid = np.arange(B)[:, None] < lengths
        drawn = noise.exchanges(slots, _column(pieces, B, "answer"), valid, k0)
        plan = _Staleness(pieces, k0, batch.c.N)
        if fast and plan.fresh and not kernels.broken():
            record = np.array([index.get(k, -1) for k in range(k0 + 1, k0 + B + 1)], dtype=np.int64)
            if batch.run(slots, lengths, drawn, answers, record, models=models):
                return
        table = batch.block(slots, drawn, answers)
        plan.keep(batch, -1)
    else:
        table = noise.rounds(pieces, k0, B)
    shortest = int(lengths.min())
    for step in range(B):
        k = k0 + step + 1
        rows = None if shortest > step else np.flatnonzero(lengths > step)
        old = None if plan is None else plan.old(step, rows)
        batch.step(rows, table[step if rows is None else (step, rows)], answers, old)
        if plan is not None:
            plan.keep(batch, step)
        if k in index:
            models[index[k]] = batch.model


class _Staleness:
    """Which updates of a block read a kept θ_L (their query is older than the update before), and
    when θ_L is to be kept: after update q for each query sent then that a later update uses (named
    by the update itself, or by ``asked`` when that update comes in a later block)."""

    def __init__(self, pieces: list[Chunk], k0: int, owners: int) -> None:
        reads, writes = [], []
        for r, piece in enumerate(pieces):
            if piece.query is not None:
                late = np.flatnonzero(piece.query < np.arange(k0, k0 + piece.updates))
                q, rows = piece.query[late], r * owners + piece.owner[late]
                reads.append((late, np.full(len(late), r), rows, q))
                writes.append((q - k0 - 1, rows, np.full(len(late), r), q))
            if piece.asked is not None:
                who, q = piece.asked
                writes.append((q - k0 - 1, r * owners + who, np.full(len(who), r), q))
        self._reads, self._writes = _grouped(reads), _grouped(writes)
        self.fresh = not self._reads and not self._writes  # every query is the update before's θ_L

    def old(self, step: int, rows: np.ndarray | None) -> Stale | None:
        """The updates of ``step`` (0-based in the block) whose query point is a kept θ_L."""
        found = self._reads.get(step)
        if found is None:
            return None
        reps, kept, at = found
        positions = reps if rows is None else np.searchsorted(rows, reps)
        return Stale(positions, kept, at)

    def keep(self, batch: AsyncBatch, step: int) -> None:
        """Keep θ_L now (after ``step``; −1: before the block's first update) where a query was sent."""
        found = self._writes.get(step)
        if found is not None:
            batch.keep(*found)


def _grouped(parts: list[tuple]) -> dict[int, tuple]:
    """Concatenate ``parts`` (tuples of equal-length arrays, the first a step) and group the other
    columns by step: {step: (arrays...)}."""
    parts = [p for p in parts if len(p[0])]
    if not parts:
        return {}
    columns = [np.concatenate([p[c] for p in parts]) for c in range(len(parts[0]))]
    order = np.argsort(columns[0], kind="stable")
    columns = [c[order] for c in columns]
    steps, starts = np.unique(columns[0], return_index=True)
    ends = np.append(starts[1:], len(columns[0]))
    return {int(s): tuple(c[a:b] for c in columns[1:]) for s, a, b in zip(steps, starts, ends, strict=True)}


def _column(pieces: list[Chunk], length: int, name: str) -> np.ndarray:
    """(length, R): a column of every piece (owner or answer), 0 past a tape's end."""
    out = np.zeros((length, len(pieces)), dtype=np.int64)
    for r, piece in enumerate(pieces):
        out[:piece.updates, r] = getattr(piece, name)
    return out
