"""What a compensation policy decides: every owner's ε, payment, cost and utility, and the learner's side.

An :class:`Outcome` is plain data (numpy arrays indexed by owner) so that the run, the
tables and the comparison all read the same object. Owners that decline have ε = 0, pay
nothing, bear no cost and take no part in training.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dpmarket.system.reproducibility import difference


def learner_value(value: float, psi: float) -> float:
    """What a model of forecast quality ψ̂ is worth to the learner: value·max(0, 1 − ψ̂).

    ``value`` is the worth of a perfect model (ψ = 0); every unit of ψ costs ``value``, and a
    model with ψ ≥ 1 (its loss at least twice the optimum's) is worth nothing. Linear in ψ̂
    where it matters, which gives the Stackelberg price a closed form (see policies).
    """
    return float(value * max(0.0, 1.0 - psi))


@dataclass(frozen=True)
class Outcome:
    """Result of one policy: per-owner arrays and the learner's value, spend and surplus."""

    policy: str
    epsilon: np.ndarray  # chosen ε (0 for owners that decline)
    payment: np.ndarray
    cost: np.ndarray  # C_i(ε_i) (0 when declining)
    gain: np.ndarray  # the owner's value of the shared model over its own (0 unless market.model_value)
    participates: np.ndarray  # bool
    psi_forecast: float  # ψ̂ of the participants at their ε (inf when nobody takes part)
    value: float  # learner_value(market.value, ψ̂)
    price: float | None = None  # the price the policy posted or found, where there is one
    coef: np.ndarray | None = None  # the owners' cost coefficients c_i (for the tables)

    @property
    def utility(self) -> np.ndarray:
        """Owners' utility: payment − cost + value of the shared model."""
        return self.payment - self.cost + self.gain

    @property
    def spend(self) -> float:
        """The learner's total payment."""
        return float(np.sum(self.payment))

    @property
    def surplus(self) -> float:
        """The learner's surplus: value of the forecast model minus payments (0 where they are equal to
        the precision of their sums, as when Shapley payments share out the whole value)."""
        return difference(self.value, self.spend)

    @property
    def members(self) -> np.ndarray:
        """Indices of the owners that take part, in increasing order."""
        return np.flatnonzero(self.participates)
