"""The learner's step constant ρ from public information, its stability, and the floor law.

**The floor law**. Each update of Algorithm 1 moves the mean of the N+1 copies by
about ρ/(T²σ(N+1)) times ∇f, so without noise T exchanges are a gradient flow of length
ρ/(Tσ(N+1)) from θ = 0, and

    ψ_T ≈ Σ_j w_j exp(−2ρ h_j / (T σ (N+1))),     w_j = h_j e_j² / (2 f*),

with h_j the eigenvalues of ∇²f and e_j the coordinates of θ* in that basis. With ρ fixed the
floor grows with N and T; it falls with ρ.

**Stability.** Owner i's copy takes a gradient step of length a = Nρ/(T²σ) on
λθᵀθ/N + (n_i/n)·(its data term), whose curvature is at most λ/N + (n_i/n)·L with L a bound on
one owner's data-term curvature; a gradient step longer than 2/curvature overshoots, so the
stability number s = a·max_i(λ/N + (n_i/n)L) must stay below STABILITY_LIMIT = 2. For equal
sizes s = ρL/(T²σ) + …, which does not depend on N: ρ can grow with N.

**ρ = "auto"** takes the smaller of decay·(N+1)Tσ/h_min (the slowest mode of the floor falls by
exp(−2·decay)) and ``fraction`` of the stability limit. N, T, σ and the sizes are public; L and
h_min come from the public proxy (:func:`dpmarket.data.proxy.resolve_step` derives a run's ρ), never
from the owners' records: a ρ computed from them would make the published model depend on the
records outside the DP accounting.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

STABILITY_LIMIT = 2.0


@dataclass(frozen=True)
class StepSize:
    """The ρ a run uses, where it came from, and its public stability number."""

    rho: float
    source: str  # "given" or how "auto" derived it
    stability: float | None  # s at this ρ with the public curvature bound (None for a given ρ)


def stability_number(rho: float, owners: int, iterations: int, lam: float, share_max: float,
                     *, curvature: float) -> float:
    """s = Nρ/(T²σ)·(λ/N + max_i(n_i/n)·L): the longest owner step times its curvature."""
    sigma = 2.0 * lam
    return owners * rho / (iterations * iterations * sigma) * (lam / owners + share_max * curvature)


def floor_law(rho: float | np.ndarray, owners: int | np.ndarray, iterations: int, lam: float,
              eigenvalues: np.ndarray, *, weights: np.ndarray,
              updates: np.ndarray | None = None) -> float | np.ndarray:
    """ψ_T the floor law predicts without noise (module docstring).

    ``rho`` and ``owners`` may be arrays (one entry per coalition, as the market's forecast asks
    for many at once); the result then has their shape. ``updates``: the updates a coalition
    actually makes, when its answer caps end it before T (the flow then has length ηU, not ηT,
    with the step η planned for T).
    """
    rate = 2.0 * np.asarray(rho, dtype=float) / (iterations * 2.0 * lam * (np.asarray(owners) + 1))
    if updates is not None:
        rate = rate * (np.asarray(updates, dtype=float) / iterations)
    psi = np.sum(weights * np.exp(-rate[..., None] * np.asarray(eigenvalues)), axis=-1)
    return float(psi) if np.ndim(psi) == 0 else psi


def auto_rho(owners: int | np.ndarray, iterations: int, lam: float, share_max: float | np.ndarray,
             curvature: float, *, h_min: float, decay: float, fraction: float) -> float | np.ndarray:
    """min(decay·(N+1)Tσ/h_min, fraction·ρ at the stability limit); elementwise for arrays of
    ``owners`` and ``share_max`` (one per coalition), so the forecast uses this very formula."""
    floor_rho = decay * (owners + 1) * iterations * 2.0 * lam / h_min
    limit = STABILITY_LIMIT / stability_number(1.0, owners, iterations, lam, share_max, curvature=curvature)
    rho = np.minimum(floor_rho, fraction * limit)
    return float(rho) if np.ndim(rho) == 0 else rho
