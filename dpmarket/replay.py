"""The replay: the tapes of R runs applied at once by a batched learning kernel (design §9).

Every replication of a cell has the same owners (data, noise scales, caps) and the same learner
constants; only its tape (who answered when, :mod:`dpmarket.schedule`) and its noise streams
differ. The kernel keeps the R runs' models as arrays — θ_L of shape (R, p), the owners' copies
(R, N, p) — and performs update k of every replication in one pass of numpy calls.

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

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dpmarket import rng as streams
from dpmarket.learner import AsyncLearner, SyncAveragedLearner, SyncLearner
from dpmarket.models import clip_margins
from dpmarket.owners import DataOwner
from dpmarket.privacy import noise_kind
from dpmarket.schedule import Tape

BLOCK_VALUES = 1 << 21  # noise values held per block of updates (16 MiB), whatever T and R
GROUP_VALUES = 1 << 22  # record-by-replication products held at once (logistic, hinge, clipping)


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
    else from the records (grouped by owner, at most :data:`GROUP_VALUES` products at once)."""

    def __init__(self, owners: list[DataOwner]) -> None:
        self.owners = owners
        self.stats = all(o.clip is None and o.loss.name == "squared" for o in owners)
        if self.stats:
            self.A = np.array([o.data.stats.A for o in owners])
            self.b = np.array([o.data.stats.b for o in owners])
            self.two_n = np.array([2.0 / o.data.n for o in owners])  # the inline (2.0 / n) exactly

    def of(self, slots: np.ndarray, thetas: np.ndarray, rows: Gathered | None = None) -> np.ndarray:
        """Row r: the exact answer of owner ``slots[r]`` at ``thetas[r]`` (``rows``: the owners'
        statistics gathered for these slots beforehand, see :meth:`gather`)."""
        if self.stats:
            rows = self.gather(slots) if rows is None else rows
            product = np.matmul(np.take(self.A, slots, axis=0), thetas[:, :, None])[:, :, 0]
            return rows.two_n[:, None] * (product - rows.b)
        if len(slots) == 1:  # one replication: no grouping
            return self.records(int(slots[0]), thetas)
        out = np.empty_like(thetas)
        for slot in dict.fromkeys(slots.tolist()):
            at = np.flatnonzero(slots == slot)
            out[at] = self.records(slot, thetas[at])
        return out

    def gather(self, slots: np.ndarray) -> Gathered | None:
        """The statistics of the owners ``slots`` (any shape), gathered once for a block of updates."""
        return Gathered(self.b[slots], self.two_n[slots]) if self.stats else None

    def every(self, thetas: np.ndarray) -> np.ndarray:
        """(R, N, p): every owner's exact answer at each row of ``thetas`` (synchronous rounds)."""
        if self.stats:
            product = np.matmul(self.A[None], thetas[:, None, :, None])[..., 0]
            return self.two_n[None, :, None] * (product - self.b[None])
        return np.stack([self.records(i, thetas) for i in range(len(self.owners))], axis=1)

    def records(self, slot: int, thetas: np.ndarray) -> np.ndarray:
        """Owner ``slot``'s answers at the rows of ``thetas`` from its records (clipped if it clips)."""
        owner = self.owners[slot]
        Z, y = owner.data.records()
        out = np.empty_like(thetas)
        step = max(1, GROUP_VALUES // max(1, len(y)))
        for start in range(0, len(thetas), step):
            part = thetas[start:start + step]
            d = owner.loss.dmargin(np.matmul(Z[None], part[:, :, None])[:, :, 0], y)
            if owner.clip is not None:
                d = clip_margins(d, owner.data.row_norms(owner.norm), owner.clip)
            out[start:start + step] = np.matmul(Z.T[None], d[:, :, None])[:, :, 0] / owner.data.n
        return out


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
    blocks of updates: the j-th answer of an owner gets the j-th standard draw times its scale."""

    def __init__(self, seeds: Sequence[int], owners: list[DataOwner], capacity: np.ndarray) -> None:
        made = streams.streams([(seed, "noise", o.index) for seed in seeds for o in owners])  # all at once
        self.gens = [made[r * len(owners):(r + 1) * len(owners)] for r in range(len(seeds))]
        self.kinds = [noise_kind(o.mechanism) for o in owners]
        self.scale = np.array([o.scale for o in owners])
        self.capacity = np.asarray(capacity, dtype=np.int64)
        self.drawn = np.zeros((len(seeds), len(owners)), dtype=np.int64)
        self.dim = owners[0].noise.dim if owners else 0

    def exchanges(self, tapes: list[Tape], k0: int, k1: int, slots: np.ndarray) -> Drawn:
        """The noise of updates k0+1…k1 of every asynchronous tape, whose owners are ``slots``
        (update-major, see :func:`_slots`): each replication's owners' draws up to the last answer
        applied, in one pool. An answer index may skip draws (in a network, an answer that was
        lost had its draw and its ε spent), but never goes back to a draw already used."""
        R, N = len(tapes), len(self.kinds)
        valid = np.arange(k0, k1)[:, None] < np.array([t.updates for t in tapes])  # (B, R)
        answers = _column(tapes, k0, k1, "answer")
        keys = np.arange(R) * N + slots  # (replication, owner) of each answer
        before = self.drawn.reshape(-1).copy()
        self._check_order(keys.T[valid.T], answers.T[valid.T], before, k0, k1)
        need = before.copy()
        np.maximum.at(need, keys[valid], answers[valid] + 1)
        counts = need - before
        pools = [self._draw(r, slot, c) for (r, slot), c in zip(np.ndindex(R, N), counts.tolist(),
                                                                  strict=True) if c]
        start = np.concatenate(([0], np.cumsum(counts)[:-1]))  # each (replication, owner)'s first row
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

    def rounds(self, tapes: list[Tape], k0: int, k1: int) -> np.ndarray:
        """(k1 − k0, R, N, p): every owner's noise for rounds k0+1…k1 (zeros past a tape's end)."""
        out = np.zeros((k1 - k0, len(tapes), len(self.kinds), self.dim))
        for r, tape in enumerate(tapes):
            answers = tape.answer[k0:k1]
            for slot in range(len(self.kinds)):
                first = self.drawn[r, slot]
                if not np.array_equal(answers, np.arange(first, first + len(answers))):
                    raise RuntimeError(f"replay: replication {r}'s rounds are out of order")
                out[:len(answers), r, slot] = self._draw(r, slot, len(answers)) * self.scale[slot]
        return out

    def _draw(self, r: int, slot: int, count: int) -> np.ndarray:
        """The next ``count`` standard draws of owner ``slot``'s stream in replication r, refused beyond
        what its ledger can pay (an answer past the cap is never applied)."""
        first = int(self.drawn[r, slot])
        if first + count > self.capacity[slot]:
            raise RuntimeError(f"replay: owner slot {slot} would give answer {first + count} of a ledger "
                               f"that pays {self.capacity[slot]}: refused answers are never applied")
        self.drawn[r, slot] += count
        return self.kinds[slot].standard(self.gens[r][slot], count, self.dim)


class AsyncBatch:
    """R copies of :class:`~dpmarket.learner.AsyncLearner`'s state, updated together."""

    def __init__(self, learner: AsyncLearner, replications: int, staleness: int = 0) -> None:
        self.c = learner
        p, N = learner.theta_L.shape[0], learner.N
        self.theta_L = np.zeros((replications, p))
        # θ_L after each of the last ``staleness`` + 1 updates, when a query may be that old (a ring)
        self.window = staleness + 1
        self.history = np.zeros((self.window * replications, p)) if staleness else None
        self.theta = np.zeros((replications, N, p))
        self.copies = self.theta.reshape(replications * N, p)  # row r·N + i: replication r's θ_i
        self.counts = np.zeros((replications, N), dtype=np.int64)
        self.offsets = N * np.arange(replications)  # replication r's first row in ``copies``
        self.share = np.asarray(learner._share)
        self.k = 0

    @property
    def model(self) -> np.ndarray:
        """θ_L of every replication."""
        return self.theta_L

    def block(self, slots: np.ndarray, noise: Drawn, answers: Answers, query: np.ndarray | None) -> Block:
        """What a block of updates of owners ``slots`` (update-major) needs, gathered once; ``query``:
        the updates done when each query was sent (None: the one before)."""
        past = None
        if self.history is not None:  # the row of θ_L at each query in the ring of recent θ_L
            past = (query % self.window) * len(self.offsets) + np.arange(len(self.offsets))
        return Block(slots, slots + self.offsets, np.take(self.share, slots), answers.gather(slots), noise,
                     past)

    def step(self, rows: np.ndarray | None, u: Step, answers: Answers) -> None:
        """Update k + 1 of the replications ``rows`` (None: all) with the owners, noise and statistics
        of ``u``, as :meth:`AsyncLearner.update` computes it after the owner's answer."""
        c = self.c
        self.k += 1
        if u.past is not None:  # θ_L when the query was sent, possibly before other updates
            theta_L = np.take(self.history, u.past, axis=0)
        else:
            theta_L = self.theta_L if rows is None else self.theta_L[rows]
        theta_bar = 0.5 * (theta_L + np.take(self.copies, u.flat, axis=0))
        answer = answers.of(u.slots, theta_bar, u.gathered) + u.noise
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
        if self.history is not None:
            start = (self.k % self.window) * len(self.offsets)
            self.history[start:start + len(self.offsets)] = self.theta_L


@dataclass(frozen=True)
class Step:
    """One update of some replications: owners' slots, their rows among the copies, their shares
    n_i/n, their statistics (squared loss) and their answers' noise."""

    slots: np.ndarray
    flat: np.ndarray
    share: np.ndarray
    gathered: Gathered | None
    noise: np.ndarray
    past: np.ndarray | None


@dataclass(frozen=True)
class Block:
    """A block of updates (update-major arrays), from which each update's :class:`Step` is cut."""

    slots: np.ndarray
    flat: np.ndarray
    share: np.ndarray
    gathered: Gathered | None
    noise: Drawn
    past: np.ndarray | None  # rows of the ring of recent θ_L holding each query's θ_L

    def __getitem__(self, at) -> Step:
        gathered = None if self.gathered is None else self.gathered[at]
        past = None if self.past is None else self.past[at]
        return Step(self.slots[at], self.flat[at], self.share[at], gathered, self.noise[at], past)


class SyncBatch:
    """R copies of a synchronous learner's state (plain, or averaged as Algorithm 2 of paper 002)."""

    def __init__(self, learner: SyncLearner, replications: int) -> None:
        self.c, self.averaged = learner, isinstance(learner, SyncAveragedLearner)
        self.theta_now = np.zeros((replications, learner.theta_now.shape[0]))
        self.theta_avg = np.zeros_like(self.theta_now)
        self.k = 0

    @property
    def model(self) -> np.ndarray:
        """The published model of every replication: the iterate, or its average."""
        return self.theta_avg if self.averaged else self.theta_now

    def step(self, rows: np.ndarray | None, noise: np.ndarray, answers: Answers) -> None:
        """Round k + 1 of the replications ``rows`` (None: all): every owner answers at the iterate."""
        rows = slice(None) if rows is None else rows
        c, theta = self.c, self.theta_now[rows].copy()  # the query point, and the previous iterate
        replies = answers.every(theta) + noise
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
    """The replayed runs: the model of every replication at each of ``at`` (sorted update counts)."""

    at: list[int]
    models: np.ndarray  # (len(at), R, p)
    batch: AsyncBatch | SyncBatch  # the final state


def replay(learner: AsyncLearner | SyncLearner, owners: list[DataOwner], tapes: list[Tape],
           seeds: Sequence[int], capacity: np.ndarray, at: Sequence[int]) -> Replayed:
    """Apply ``tapes`` (replication r's, with noise from ``seeds[r]``) to fresh copies of ``learner``
    (a template: only its constants are read) and keep the models after the updates ``at``."""
    at = sorted(set(int(k) for k in at))
    asynchronous = isinstance(learner, AsyncLearner)
    staleness = max((t.staleness for t in tapes), default=0)
    batch = AsyncBatch(learner, len(tapes), staleness) if asynchronous else SyncBatch(learner, len(tapes))
    answers, noise = Answers(owners), Noise(seeds, owners, capacity)
    ends = np.array([t.updates for t in tapes], dtype=np.int64)
    models = np.zeros((len(at), len(tapes), learner.model.shape[0]))
    index = {k: i for i, k in enumerate(at)}
    if 0 in index:
        models[index[0]] = batch.model
    answers_per_update = 1 if asynchronous else len(owners)
    block = max(1, BLOCK_VALUES // max(1, len(tapes) * learner.model.shape[0] * answers_per_update))
    last = int(ends.max(initial=0))
    for k0 in range(0, last, block):
        _replay_block(batch, tapes, noise, answers, ends, k0, min(last, k0 + block), models, index)
    return Replayed(at, models, batch)


def _replay_block(batch, tapes: list[Tape], noise: Noise, answers: Answers, ends: np.ndarray, k0: int,
                  k1: int, models: np.ndarray, index: dict[int, int]) -> None:
    """Updates k0+1…k1 of every replication whose tape is that long."""
    asynchronous = isinstance(batch, AsyncBatch)
    if asynchronous:
        slots = _slots(tapes, k0, k1)
        query = _queries(tapes, k0, k1) if batch.history is not None else None
        table = batch.block(slots, noise.exchanges(tapes, k0, k1, slots), answers, query)
    else:
        table = noise.rounds(tapes, k0, k1)
    shortest = int(ends.min())
    for step in range(k1 - k0):
        k = k0 + step + 1
        rows = None if shortest >= k else np.flatnonzero(ends >= k)
        batch.step(rows, table[step if rows is None else (step, rows)], answers)
        if k in index:
            models[index[k]] = batch.model


def _slots(tapes: list[Tape], k0: int, k1: int) -> np.ndarray:
    """(k1 − k0, R): the owner of each update of each tape (0 past its end, never applied)."""
    return _column(tapes, k0, k1, "owner")


def _queries(tapes: list[Tape], k0: int, k1: int) -> np.ndarray:
    """(k1 − k0, R): the updates done when each update's query was sent (k − 1 without staleness)."""
    out = np.arange(k0, k1)[:, None].repeat(len(tapes), axis=1)
    for r, tape in enumerate(tapes):
        if tape.query is not None:
            part = tape.query[k0:k1]
            out[:len(part), r] = part
    return out


def _column(tapes: list[Tape], k0: int, k1: int, name: str) -> np.ndarray:
    """(k1 − k0, R): a column of every tape (owner or answer) for updates k0+1…k1, 0 past its end."""
    out = np.zeros((k1 - k0, len(tapes)), dtype=np.int64)
    for r, tape in enumerate(tapes):
        part = getattr(tape, name)[k0:k1]
        out[:len(part), r] = part
    return out
