"""Owners' privacy costs C_i(ε) and their best response to a price per unit ε.

Three shapes (design §6): linear c ε, quadratic c ε²/2 and exponential c (e^ε − 1). An owner
offered p per unit ε on [ε_min, ε_max] maximises p ε − C(ε); the closed forms below are the
oracles the policies and their tests rely on.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

KINDS = ("linear", "quadratic", "exponential")


@dataclass(frozen=True)
class Cost:
    """C(ε) of one owner: ``kind`` with coefficient ``coef`` > 0."""

    kind: str
    coef: float

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"Unknown cost kind {self.kind!r}; expected one of {', '.join(KINDS)}")
        if not self.coef > 0:
            raise ValueError(f"Cost coefficient must be positive, got {self.coef}")

    def __call__(self, eps: float | np.ndarray) -> float | np.ndarray:
        """C(ε)."""
        if self.kind == "linear":
            return self.coef * eps
        if self.kind == "quadratic":
            return 0.5 * self.coef * np.square(eps)
        return self.coef * np.expm1(eps)

    def marginal(self, eps: float | np.ndarray) -> float | np.ndarray:
        """C'(ε)."""
        if self.kind == "linear":
            return self.coef * np.ones_like(eps, dtype=float)
        if self.kind == "quadratic":
            return self.coef * eps
        return self.coef * np.exp(eps)

    def best_response(self, price: float, eps_min: float, eps_max: float) -> float:
        """argmax over [ε_min, ε_max] of price·ε − C(ε).

        Quadratic: clip(p/c); exponential: clip(log(p/c)) (ε_min when p ≤ c); linear: the
        objective is linear in ε, so ε_max when p > c and ε_min otherwise.
        """
        if self.kind == "linear":
            return eps_max if price > self.coef else eps_min
        if self.kind == "quadratic":
            return float(np.clip(price / self.coef, eps_min, eps_max))
        if price <= self.coef:
            return eps_min
        return float(np.clip(np.log(price / self.coef), eps_min, eps_max))
