"""Owners' privacy costs C_i(ε) and their best response to a price per unit ε.

Three shapes: linear c ε, quadratic c ε²/2 and exponential c (e^ε − 1). An owner
offered p per unit ε on [ε_min, ε_max] maximises p ε − C(ε); the closed forms below are the
oracles the policies and their tests rely on. ``coef`` may be an array (one coefficient per
owner, all of one shape): every method then works on all owners at once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

KINDS = ("linear", "quadratic", "exponential")


@dataclass(frozen=True)
class Cost:
    """C(ε) of one owner (or of several, with an array ``coef``): ``kind`` with ``coef`` > 0."""

    kind: str
    coef: float | np.ndarray

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"Unknown cost kind {self.kind!r}; expected one of {', '.join(KINDS)}")
        if not np.all(np.asarray(self.coef) > 0):
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

    def best_response(self, price: float | np.ndarray, eps_min: float,
                      eps_max: float) -> float | np.ndarray:
        """argmax over [ε_min, ε_max] of price·ε − C(ε) (per owner when ``coef`` is an array).

        Quadratic: clip(p/c); exponential: clip(log(p/c)) (ε_min when p ≤ c); linear: the
        objective is linear in ε, so ε_max when p > c and ε_min otherwise.
        """
        c = np.asarray(self.coef, dtype=float)
        if self.kind == "linear":
            eps = np.where(price > c, eps_max, eps_min)
        elif self.kind == "quadratic":
            eps = np.clip(price / c, eps_min, eps_max)
        else:
            with np.errstate(divide="ignore", invalid="ignore"):
                eps = np.where(price <= c, eps_min,
                               np.clip(np.log(np.maximum(price, 1e-300) / c), eps_min, eps_max))
        return float(eps) if np.ndim(eps) == 0 else eps

    def inverse_marginal_times_cube(self, target: np.ndarray, eps_min: float,
                                    eps_max: float) -> np.ndarray:
        """The ε in [ε_min, ε_max] with C'(ε)·ε³ = target (per owner; the left side increases).

        This is the stationarity condition 2ε⁻³ = μC'(ε) of minimising Σε⁻² under a cost
        budget (target = 2/μ). Quadratic: (t/c)^(1/4); linear: (t/c)^(1/3); exponential has no
        closed form and is solved by bisection on log ε.
        """
        c = np.asarray(self.coef, dtype=float)
        t = np.asarray(target, dtype=float)
        if self.kind == "quadratic":
            return np.clip((t / c) ** 0.25, eps_min, eps_max)
        if self.kind == "linear":
            return np.clip((t / c) ** (1 / 3), eps_min, eps_max)
        lo = np.full(np.broadcast(t, c).shape, np.log(eps_min))
        hi = np.full_like(lo, np.log(eps_max))
        for _ in range(60):  # 60 halvings of log(ε_max/ε_min) ≪ 1e-12 relative
            mid = 0.5 * (lo + hi)
            above = c * np.exp(np.exp(mid)) * np.exp(3 * mid) > t
            hi, lo = np.where(above, mid, hi), np.where(above, lo, mid)
        return np.exp(0.5 * (lo + hi))
