"""Sets of coalitions as a forecast evaluates them: rows of a boolean mask, every prefix of orders, or
every subset of a set of players.

A forecast needs, per coalition, sums over its members of a few per-owner quantities (records,
clock rates, ε⁻²…) and the largest of one. For K coalitions of N owners given as masks that is a
product with the (K, N) mask; the prefixes of random orders, which sampled Shapley values walk
through, are nested, so there the same sums are running sums along each order — O(K) instead of
O(K·N), which matters for tens of thousands of coalitions of 86 hospitals; all 2^k subsets of k
players, which exact Shapley values enumerate, are sums over the low bits of their codes plus the
high bits'. All describe coalitions to the same ``forecast.coalitions`` call, so ψ̂ has one formula
whichever way they come.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Masks:
    """K coalitions as rows of a (K, N) boolean mask."""

    masks: np.ndarray

    @property
    def count(self) -> int:
        """K."""
        return len(self.masks)

    def nonempty(self) -> np.ndarray:
        """Which coalitions have a member."""
        return self.masks.any(axis=1)

    def rows(self, index: np.ndarray) -> Masks:
        """The coalitions at ``index`` (to evaluate many in bounded chunks)."""
        return Masks(self.masks[index])

    def sums(self, columns: np.ndarray) -> np.ndarray:
        """Σ_{i∈S} columns_i per coalition: (K,) for (N,) columns, (K, C) for (N, C)."""
        return self.masks.astype(float) @ columns

    def weighted_sums(self, per_owner: np.ndarray, columns: np.ndarray) -> np.ndarray:
        """Σ_{i∈S} per_owner_ki·columns_i with a value per coalition and owner (``per_owner`` (K, N))."""
        return np.where(self.masks, per_owner, 0.0) @ columns

    def largest(self, values: np.ndarray) -> np.ndarray:
        """max_{i∈S} values_i per coalition (values ≥ 0; 0 for an empty coalition)."""
        return np.max(np.where(self.masks, values, 0.0), axis=1)


@dataclass(frozen=True)
class Prefixes:
    """Every prefix of each order: coalitions {o_1}, {o_1, o_2}, … of order 0, then of order 1, …

    ``orders`` is (S, k) owner indices, each row a random order of the same k players; the
    coalitions come out in that row-major order, S·k of them, none empty.
    """

    orders: np.ndarray

    @property
    def count(self) -> int:
        """S·k."""
        return self.orders.size

    def nonempty(self) -> np.ndarray:
        """Every prefix has its first player."""
        return np.ones(self.count, bool)

    def sums(self, columns: np.ndarray) -> np.ndarray:
        """Running sums of ``columns`` (N,) or (N, C) along each order, one row per prefix."""
        running = np.cumsum(np.asarray(columns)[self.orders], axis=1)
        return running.reshape(self.count, *running.shape[2:])

    def weighted_sums(self, per_owner: np.ndarray, columns: np.ndarray) -> np.ndarray:
        """Not defined: a prefix has no budgets of its own (give one ε per owner)."""
        raise ValueError("prefixes of orders take one ε per owner, not one per coalition")

    def largest(self, values: np.ndarray) -> np.ndarray:
        """Running maximum of ``values`` along each order."""
        return np.maximum.accumulate(np.asarray(values)[self.orders], axis=1).ravel()


@dataclass(frozen=True)
class Subsets:
    """Every subset of the players ``players`` with codes in [start, stop), never as a (2^k, N) mask.

    Subset ``code`` holds player j when bit k−1−j of the code is set (the order of
    ``itertools.product([False, True], repeat=k)``: code 0 is the empty coalition). Exact Shapley
    values of 20 players ask for all 2^20 ≈ 1 M of them; over a block of 2^L consecutive codes the
    low L bits run through every combination while the high bits stay fixed, so a block's sums are
    a table over the low bits (built by doubling: L vector additions) plus one row for the high
    bits — additions only, no (K, N) mask and no matrix product.
    """

    players: np.ndarray
    owners: int
    start: int = 0
    stop: int | None = None

    @property
    def end(self) -> int:
        """The code after the last one."""
        return (1 << len(self.players)) if self.stop is None else self.stop

    @property
    def count(self) -> int:
        """How many subsets."""
        return self.end - self.start

    def codes(self) -> np.ndarray:
        """The subsets' codes."""
        return np.arange(self.start, self.end, dtype=np.int64)

    def nonempty(self) -> np.ndarray:
        """Every subset but code 0."""
        return self.codes() != 0

    def blocks(self, size: int) -> list[Subsets]:
        """The range cut into consecutive pieces of at most ``size`` codes (``size`` a power of 2),
        each within one aligned block, code 0 left out."""
        first = max(self.start, 1)
        cuts = list(range(first, self.end, size)) if first % size == 0 else [first, *range(
            (first // size + 1) * size, self.end, size)]
        return [Subsets(self.players, self.owners, a, min(b, self.end))
                for a, b in zip(cuts, [*cuts[1:], self.end], strict=True)]

    def _table(self, values: np.ndarray, combine) -> np.ndarray:
        """``combine`` over the members of each subset, built on the aligned block holding the range."""
        k, values = len(self.players), np.asarray(values, dtype=float)
        low = max(1, (self.count - 1).bit_length())  # the block's low bits
        low = min(low, k)
        while (self.start >> low) != ((self.end - 1) >> low):  # the range straddles a boundary
            low += 1
        base_code = (self.start >> low) << low
        per_player = values[self.players]  # (k,) or (k, C)
        table = np.zeros((1 << low, *per_player.shape[1:]))
        for b in range(low):  # bit b is player k−1−b
            half = 1 << b
            table[half:2 * half] = combine(table[:half], per_player[k - 1 - b])
        base = np.zeros(per_player.shape[1:])
        for b in range(low, k):
            if base_code >> b & 1:
                base = combine(base, per_player[k - 1 - b])
        return combine(table, base)[self.start - base_code:self.end - base_code]

    def sums(self, columns: np.ndarray) -> np.ndarray:
        """Σ_{i∈S} columns_i per subset: (K,) for (N,) columns, (K, C) for (N, C)."""
        return self._table(columns, np.add)

    def weighted_sums(self, per_owner: np.ndarray, columns: np.ndarray) -> np.ndarray:
        """Not defined: subsets share one ε per owner."""
        raise ValueError("subsets take one ε per owner, not one per coalition")

    def largest(self, values: np.ndarray) -> np.ndarray:
        """max_{i∈S} values_i per subset (values ≥ 0; 0 for the empty subset)."""
        return self._table(values, np.maximum)

    def masks(self) -> np.ndarray:
        """The (K, N) membership of the subsets (for the few calls that need it)."""
        k = len(self.players)
        bits = (self.codes()[:, None] >> np.arange(k - 1, -1, -1)) & 1
        out = np.zeros((self.count, self.owners), bool)
        out[:, self.players] = bits.astype(bool)
        return out


def as_members(coalitions) -> Masks | Prefixes | Subsets:
    """``coalitions`` as :class:`Masks` (from a boolean array: one row or many) unless it already is."""
    if isinstance(coalitions, Masks | Prefixes | Subsets):
        return coalitions
    return Masks(np.atleast_2d(np.asarray(coalitions, dtype=bool)))
