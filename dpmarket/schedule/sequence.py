"""i_k, the owner of each update k (the papers' Figures 4 and 9), in memory bounded whatever T.

Up to :data:`EXACT` planned updates every i_k is kept, as it always was (every shipped scenario):
the run's ``timeline.png`` draws them as dots, or beyond 5,000 updates as a density of the exact
values. Beyond, the figure can only be a density, so the updates are counted as they come, per
row of the figure (owners binned into at most :data:`ROWS` rows, as the figure bins them) and per
block of consecutive k (at most :data:`BLOCKS` blocks over 1…T): memory O(ROWS × BLOCKS) instead
of O(T), so T = 10⁹ runs without a 10⁹-entry list.
"""

from __future__ import annotations

import math

import numpy as np

EXACT = 1_000_000  # planned updates up to which every i_k is kept
ROWS = 100  # the figure's rows of owners at most (plots.owner_sequence)
BLOCKS = 4_000  # blocks of consecutive k at most, beyond EXACT
CHUNK = 65_536  # updates buffered before they are counted (one numpy call per chunk)


def owner_rows(owners: int) -> np.ndarray:
    """The figure's row of each scenario owner 0…N−1: ``np.histogram``'s bin of i + 1 among
    ``min(N, ROWS)`` equal bins over [0.5, N + 0.5] (the last bin closed on the right)."""
    rows = min(owners, ROWS)
    edges = np.linspace(0.5, owners + 0.5, rows + 1)
    return np.minimum(np.searchsorted(edges, np.arange(1, owners + 1), side="right") - 1, rows - 1)


class OwnerSequence:
    """The owner of every update so far, exactly (``exact``) or counted per (row, block of k).

    ``ids`` maps the training's owner slots to scenario indices (a market may leave owners
    out); ``owners`` is the scenario's N; ``iterations`` the planned T, which fixes the mode.
    """

    def __init__(self, ids: list[int], owners: int, iterations: int) -> None:
        self.ids, self.owners, self.exact = list(ids), owners, iterations <= EXACT
        self.items: list[int] = []  # every slot i_k (exact), or those not yet counted
        if self.exact:
            self.append = self.items.append  # the per-update call: a bare list append
            return
        self.block = math.ceil(iterations / BLOCKS)
        self.row_of = owner_rows(owners)[np.asarray(self.ids)]  # per slot
        self.counts = np.zeros((min(owners, ROWS), BLOCKS), dtype=np.int64)
        self.counted = 0  # updates already in ``counts``

    def append(self, slot: int) -> None:
        """Record the owner (slot) of the next update (counting mode; exact mode rebinds this)."""
        self.items.append(slot)
        if len(self.items) >= CHUNK:
            self._count()

    def extend(self, slots: np.ndarray) -> None:
        """Record the owners (slots) of the next updates, in order (a chunk of a run's tape)."""
        self.items.extend(np.asarray(slots, dtype=np.int64).tolist())
        if not self.exact and len(self.items) >= CHUNK:
            self._count()

    def _count(self) -> None:
        slots = np.asarray(self.items, dtype=np.int64)
        k = np.arange(self.counted, self.counted + len(slots))  # k − 1 of each buffered update
        flat = self.row_of[slots] * BLOCKS + k // self.block
        self.counts += np.bincount(flat, minlength=self.counts.size).reshape(self.counts.shape)
        self.counted += len(slots)
        self.items.clear()

    def __len__(self) -> int:
        return len(self.items) + (0 if self.exact else self.counted)

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        """The slots of every update, in order (exact mode only)."""
        if not self.exact:
            raise ValueError(f"updates beyond {EXACT:,} are counted, not kept one by one")
        return np.asarray(self.items, dtype=dtype)

    def figure(self) -> dict:
        """What the timeline figure needs: ``sequence`` (scenario index of every update), or
        ``density`` (counts per row and block, with the block length) beyond :data:`EXACT`."""
        if self.exact:
            ids = self.ids
            return {"sequence": [ids[s] for s in self.items], "density": None}
        self._count()
        used = -(-self.counted // self.block)  # blocks holding updates
        return {"sequence": [], "density": {"counts": self.counts[:, :used].tolist(), "block": self.block,
                                            "updates": self.counted}}
