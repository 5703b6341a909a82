"""Sets of coalitions as a forecast evaluates them: rows of a boolean mask, or every prefix of orders.

A forecast needs, per coalition, sums over its members of a few per-owner quantities (records,
clock rates, ε⁻²…) and the largest of one. For K coalitions of N owners given as masks that is a
product with the (K, N) mask; the prefixes of random orders, which sampled Shapley values walk
through, are nested, so there the same sums are running sums along each order — O(K) instead of
O(K·N), which matters for tens of thousands of coalitions of 86 hospitals. Both describe coalitions
to the same ``forecast.coalitions`` call, so ψ̂ has one formula whichever way they come.
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


def as_members(coalitions) -> Masks | Prefixes:
    """``coalitions`` as :class:`Masks` (from a boolean array: one row or many) unless it already is."""
    if isinstance(coalitions, Masks | Prefixes):
        return coalitions
    return Masks(np.atleast_2d(np.asarray(coalitions, dtype=bool)))
