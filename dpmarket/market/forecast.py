"""The forecast of design §4 and its calibration from pilot simulations.

ψ̂ = c₁/n · sqrt(Σ ε_i⁻²) + c₂/n² · Σ ε_i⁻² (Theorem 2 for large T, paper 003 eq. (6)), over the
owners that take part (n = their total records). The constants are not known in advance:
:func:`calibrate` fits them to (ε, n, observed ψ) from short pilot runs by non-negative least
squares on relative errors, and reports how well the fit explains the pilots.

Theorem 2 is an asymptote in T: at a finite horizon ψ also has an optimisation floor that no
budget removes (ny_hospitals at T = 1,000 levels off near ψ = 0.14 for ε → ∞). The optional
constant c₀ (default 0, so the papers' form is the default) absorbs it: ψ̂ = c₀ + the bound.
Without it a forecast at large ε would promise far better models than training delivers.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np


def regressors(epsilons: np.ndarray, records: float) -> tuple[float, float]:
    """The two terms of the bound without their constants: sqrt(Σε⁻²)/n and Σε⁻²/n²."""
    s = float(np.sum(np.asarray(epsilons, dtype=float) ** -2.0))
    return np.sqrt(s) / records, s / records**2


@dataclass(frozen=True)
class Forecast:
    """Calibrated constants and the quality of their fit."""

    c1: float
    c2: float
    r2: float = float("nan")  # of log ψ̂ against log ψ over the pilots
    rms_relative_error: float = float("nan")
    points: int = 0
    c0: float = 0.0  # the finite-T optimisation floor (see the module docstring)

    def psi(self, epsilons: np.ndarray, records: float) -> float:
        """ψ̂ for the given budgets of the participating owners and their total records."""
        a, b = regressors(epsilons, records)
        return self.c0 + self.c1 * a + self.c2 * b

    def to_dict(self) -> dict:
        """A JSON-ready form, for caching next to the scenario."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Forecast:
        """Inverse of :meth:`to_dict`."""
        return cls(**data)


def calibrate(epsilons: list[np.ndarray], records: list[float], psi: list[float],
              terms: tuple[str, ...] = ("c1", "c2")) -> Forecast:
    """Fit c₁, c₂ ≥ 0 to pilot observations by non-negative least squares on relative errors.

    Each row is divided by its observed ψ, so a pilot at ψ = 10⁻⁴ weighs as much as one at
    ψ = 1 (ψ spans decades across budgets). ``terms`` selects the model among c0, c1, c2
    (e.g. ("c2",), or ("c0", "c1", "c2") with the finite-T floor).
    """
    from scipy.optimize import nnls  # deferred: scipy.optimize is slow to import

    X = np.array([(*regressors(e, n), 1.0) for e, n in zip(epsilons, records, strict=True)])
    y = np.asarray(psi, dtype=float)
    if np.any(y <= 0):
        raise ValueError("pilot ψ values must be positive to calibrate on relative errors")
    keep = [i for i, name in enumerate(("c1", "c2", "c0")) if name in terms]
    coef, _ = nnls(X[:, keep] / y[:, None], np.ones_like(y))
    full = np.zeros(3)
    full[keep] = coef
    predicted = X @ full
    return Forecast(float(full[0]), float(full[1]), _r2(np.log(y), np.log(np.maximum(predicted, 1e-300))),
                    float(np.sqrt(np.mean((predicted / y - 1) ** 2))), len(y), float(full[2]))


def _r2(observed: np.ndarray, predicted: np.ndarray) -> float:
    residual = np.sum((observed - predicted) ** 2)
    total = np.sum((observed - observed.mean()) ** 2)
    return float(1 - residual / total) if total > 0 else float("nan")
