"""Who trained: the scenario's owners 0…N−1 and their slots 0…M−1 among a run's participants.

A market can leave owners out. The simulation then numbers only the participants (slot k is the
k-th of them, in increasing scenario index), while every table and ``events.csv`` names owners by
their scenario index. This is the one mapping between the two, so that no table indexes one
numbering with the other: an owner that declined has no slot, and the tables give it ε = 0,
no answers and ``participates = false``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Roster:
    """The N owners of a scenario and the scenario index of each participant's slot."""

    owners: int  # N: every owner of the scenario, participating or not
    members: tuple[int, ...]  # members[k]: the scenario index of slot k (increasing)

    def __post_init__(self) -> None:
        if list(self.members) != sorted(set(self.members)) or any(
                not 0 <= i < self.owners for i in self.members):
            raise ValueError(f"members {self.members} are not increasing indices below {self.owners}")

    def slot(self, owner: int) -> int | None:
        """The slot of scenario owner ``owner`` among the participants, None if it declined."""
        return self._slots.get(owner)

    @cached_property
    def _slots(self) -> dict[int, int]:
        return {i: k for k, i in enumerate(self.members)}

    @property
    def participates(self) -> np.ndarray:
        """(N,) bool: which scenario owners took part."""
        mask = np.zeros(self.owners, dtype=bool)
        mask[list(self.members)] = True
        return mask

    def spread(self, values: Sequence[Any], fill: Any) -> list[Any]:
        """Per-slot ``values`` as a list over every scenario owner, ``fill`` for those that declined."""
        if len(values) != len(self.members):
            raise ValueError(f"{len(values)} values for {len(self.members)} participants")
        out = [fill] * self.owners
        for i, value in zip(self.members, values, strict=True):
            out[i] = value
        return out
