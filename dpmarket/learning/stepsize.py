"""The learner's step constant ρ from public information, its stability, and the floor law.

**The floor law**. Each update of Algorithm 1 moves the mean of the N+1 copies by
about ρ/(T²σ(N+1)) times ∇f, so without noise T exchanges are a gradient flow of length
ρ/(Tσ(N+1)) from θ = 0, and

    ψ_T ≈ Σ_j w_j exp(−2ρ h_j / (T σ (N+1))),     w_j = h_j e_j² / (2 f*),

with h_j the eigenvalues of ∇²f and e_j the coordinates of θ* in that basis. With ρ fixed the
floor grows with N and T; it falls with ρ.

**Unequal shares** slow that flow. The flow is the copies' mean, but owner i's data term reaches
the mean only through its own copy, which moves by t_ij = (N+1)η(2λ + N·s_i·d_j) of its distance
when i is asked (η = ρ/(T²σ(N+1)), d_j = h_j − 2λ the data's curvature along mode j, s_i = n_i/n):
an owner with most of the records pulls its copy most of the way to θ* at once, and the model
learns of it only as fast as θ_L meets that copy. Without noise, the expected copies follow a
linear map (θ_L and the asked copy averaged, then the copy's step); its leading eigenvalue per mode
is 1 − u_j/(2N), u_j the smallest root of

    (1 − u/2)·(1/N)·Σ_i 1/(1 + t_ij − u) = 1 − u/(2N),

whose equal-share root u⁰_j (a quadratic, all t_ij = (N+1)ηh_j) is the flow's 2Nηh_j to first
order. The floor's rate per mode is multiplied by κ_j = u_j/u⁰_j ≤ 1 (:func:`floor_slowdown`):
1 for equal shares, 0.65–0.9 for a member holding 25–80 % of 12–26 owners' records, where it moves
the floor up to a hundredfold. The law knows a coalition by its largest share, Σ s_i² and Σ s_i³:
the sum takes the largest share exactly and the others as the two-point distribution of their
mean, variance and skewness, within 1.1 % of the root over every member's share (0.2 % where the
leader's copy moves half the way; Pareto draws of 3 to 50 owners). Noise-free runs
of the engine agree within 6 % (tests/learning/test_stepsize.py). Selection is taken uniform, as
in the rest of the law.

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
              updates: np.ndarray | None = None, shares: tuple | None = None) -> float | np.ndarray:
    """ψ_T the floor law predicts without noise (module docstring).

    ``rho`` and ``owners`` may be arrays (one entry per coalition, as the market's forecast asks
    for many at once); the result then has their shape. ``updates``: the updates a coalition
    actually makes, when its answer caps end it before T (the flow then has length ηU, not ηT,
    with the step η planned for T). ``shares``: (largest share, Σ s_i², Σ s_i³) of the members'
    records (:func:`share_moments`), which slow the flow when unequal (:func:`floor_slowdown`); None:
    equal shares.
    """
    rate = 2.0 * np.asarray(rho, dtype=float) / (iterations * 2.0 * lam * (np.asarray(owners) + 1))
    if updates is not None:
        rate = rate * (np.asarray(updates, dtype=float) / iterations)
    exponent = rate[..., None] * np.asarray(eigenvalues)
    if shares is not None:
        eta = copy_step(rho, owners, iterations, lam)
        slowdown = floor_slowdown(owners, eta, lam, eigenvalues, shares, exponent=exponent, weights=weights)
        exponent = exponent * np.reshape(slowdown, exponent.shape)
    psi = np.sum(weights * np.exp(-exponent), axis=-1)
    return float(psi) if np.ndim(psi) == 0 else psi


def copy_step(rho, owners, iterations: int, lam: float):
    """η = ρ/(T²σ(N+1)), σ = 2λ: the step each of the N + 1 copies takes per unit of gradient (elementwise
    for arrays of ``rho`` and ``owners``, one entry per coalition)."""
    return np.asarray(rho, dtype=float) / (iterations**2 * 2.0 * lam * (np.asarray(owners) + 1))


def share_moments(records) -> tuple[float, float, float]:
    """(largest share, Σ s_i², Σ s_i³) of owners holding ``records``: what :func:`floor_law` needs to
    know of their shares."""
    shares = np.asarray(records, dtype=float) / np.sum(records)
    return float(shares.max()), float(np.sum(shares**2)), float(np.sum(shares**3))


def floor_slowdown(owners, eta, lam: float, eigenvalues: np.ndarray, shares: tuple, *, exponent=None,
                   weights=None) -> np.ndarray:
    """κ_j = u_j/u⁰_j per coalition and mode (module docstring): how much slower than the equal-share
    flow the expected copies decay when the members' shares differ; (..., p), 1 for equal shares.
    ``shares``: (largest share, Σ s_i², Σ s_i³) per coalition (:func:`share_moments` for one).

    The secular equation's sum keeps the largest member's term exact and replaces the others by the
    two-point distribution with their mean, variance and skewness (from Σ s_i² and Σ s_i³: Gauss's
    rule, exact for cubics in t), within 1.1 % of the root over every member's share.

    Given the floor's equal-share ``exponent`` and ``weights`` per mode, a mode whose term stays below
    10⁻¹⁷ of Σ w even at the lower bound κ_lb ≤ κ is not solved and gets κ_lb: with every member at
    the smallest node's t the equation's left side only grows, so its root u_eq(t_low) ≤ u. The
    floors of fast modes (the many beyond the slowest few) then cost one closed form.
    """
    empty = np.asarray(owners)[..., None] < 1  # an empty coalition's row (unused): one owner of share 1
    N = np.where(empty, 1.0, np.asarray(owners, dtype=float)[..., None])
    pull = (N + 1) * np.asarray(eta, dtype=float)[..., None]
    h = np.asarray(eigenvalues, dtype=float)
    d = np.maximum(h - 2.0 * lam, 0.0)
    s_max, low, high, p_low = _rest_nodes(N, empty, *shares)
    u0 = _equal_root(N, pull * h)  # at equal shares every t is pull·h, the members' mean t at any shares
    nodes = [pull * (2.0 * lam + N * x * d) for x in (s_max, low, high)]
    weights_k = (1.0, (N - 1) * p_low, (N - 1) * (1.0 - p_low))
    shape = np.broadcast_shapes(u0.shape, *(x.shape for x in nodes))
    u = _equal_root(N, np.where(N > 1, nodes[1], nodes[0]))  # the lower bound, where not solved
    u = np.broadcast_to(u, shape).copy()
    solve = np.ones(shape, bool)
    if exponent is not None:
        lowest = _slowdown(u, u0)
        bound = np.asarray(weights) * np.exp(-np.reshape(exponent, shape) * lowest)
        solve = bound > 1e-17 * np.sum(weights)
    if solve.all():  # the floor matters in every mode: no gathering
        u = _secular_root(N, u0, nodes, weights_k)
    elif solve.any():
        at = np.nonzero(solve)
        pick = [np.broadcast_to(x, shape)[at] for x in (N, u0, *nodes, *weights_k[1:])]
        u[at] = _secular_root(pick[0], pick[1], pick[2:5], (1.0, *pick[5:]))
    return _slowdown(u, u0)


def _slowdown(u, u0):
    """κ = u/u⁰, and 1 where u⁰ = 0 (a mode nothing moves: no flow to slow)."""
    return np.where(u0 > 0, u / np.where(u0 > 0, u0, 1.0), 1.0)


def _equal_root(N, t):
    """The smallest root of the secular equation with every member's t equal: u² − (N + 1 + t)u + 2Nt
    = 0, in the cancellation-free form."""
    b = N + 1 + t
    return 2.0 * N * t / (0.5 * (b + np.sqrt(np.maximum(b * b - 8.0 * N * t, 0.0))))


def _secular_root(N, u0, nodes: list, weights: tuple) -> np.ndarray:
    """The smallest root u of (1 − u/2)·Σ_k w_k/(1 + t_k − u)/N = 1 − u/(2N) (Σ_k w_k = N).

    It is bracketed in [0, u⁰]: the left side minus the right is < 0 at 0, and ≥ 0 at u⁰ (the sum is
    convex in t, whose mean is u⁰'s) — or below the first pole 1 + t where that comes first (long
    steps: few owners, a large ρ), where the left side grows without bound. Newton's method, kept
    inside the bracket, takes 2–3 steps on the markets of the benchmarks.
    """
    poles = [np.where(w > 0, 1.0 + t, np.inf) for w, t in zip(weights, nodes, strict=True)]
    lo, hi = np.zeros_like(u0), np.minimum(u0, np.minimum.reduce(poles) * (1.0 - 1e-12))
    u, shifted, half_n = hi.copy(), [1.0 + t for t in nodes], 0.5 / N
    active = np.ones(np.broadcast_shapes(u.shape, *(x.shape for x in shifted)), bool)
    for _ in range(100):  # Newton's method, kept inside the bracket [lo, hi]
        inverse = [1.0 / (x - u) for x in shifted]
        total = sum(w * r for w, r in zip(weights, inverse, strict=True))
        slope = sum(w * r * r for w, r in zip(weights, inverse, strict=True))
        lead = (1.0 - 0.5 * u) / N
        g = lead * total - 1.0 + u * half_n
        dg = lead * slope + half_n * (1.0 - total)
        lo, hi = np.where(g < 0, u, lo), np.where(g < 0, hi, u)
        newton = u - g / np.where(dg > 0, dg, np.inf)
        inside = (dg > 0) & (newton >= lo) & (newton <= hi)
        step = np.where(g == 0, 0.0, np.where(inside, newton, 0.5 * (lo + hi)) - u)
        u = np.where(active, u + step, u)
        # κ to 1e-8 (the floor to 1e-7 at an exponent of 10), or as far as g's rounding (1e-16 of its
        # O(1) terms) can place the root. Each root stops at its own last step, so its bits do not
        # depend on which others it was solved with (a coalition's forecast is the same in any call).
        active &= np.abs(step) > 1e-8 * u0 + 1e-15
        if not active.any():
            break
    return u


def _rest_nodes(N, empty, share_max, share_squares, share_cubes) -> tuple:
    """(s_max, low, high, p_low): the largest share, and the two-point stand-in for the other N − 1
    members' shares (nodes ``low`` with probability ``p_low`` and ``high``) with their mean, variance
    and skewness, nodes kept within [0, s_max]."""
    s_max = np.where(empty, 1.0, np.asarray(share_max, dtype=float)[..., None])
    rest = np.maximum(N - 1, 1.0)
    squares = (np.where(empty, 1.0, np.asarray(share_squares, dtype=float)[..., None]) - s_max**2) / rest
    cubes = (np.where(empty, 1.0, np.asarray(share_cubes, dtype=float)[..., None]) - s_max**3) / rest
    mean = np.where(N > 1, (1.0 - s_max) / rest, 0.0)
    var = np.maximum(squares - mean**2, 0.0)
    sd = np.sqrt(var)
    third = cubes - 3.0 * mean * squares + 2.0 * mean**3
    spread = sd > 1e-9 * np.maximum(mean, 1e-300)  # else the others' shares are equal: no skewness
    skew = np.divide(third, sd**3, out=np.zeros_like(sd), where=spread)
    # Kept off 0 and 1, which only a skewness of ±10⁶ reaches: there one node carries all the weight.
    p_low = np.clip(0.5 * (1.0 + skew / np.sqrt(4.0 + skew * skew)), 1e-12, 1.0 - 1e-12)
    low = np.maximum(mean - sd * np.sqrt((1.0 - p_low) / p_low), 0.0)
    high = np.minimum(mean + sd * np.sqrt(p_low / (1.0 - p_low)), s_max)
    return s_max, low, high, p_low


def auto_rho(owners: int | np.ndarray, iterations: int, lam: float, share_max: float | np.ndarray,
             curvature: float, *, h_min: float, decay: float, fraction: float) -> float | np.ndarray:
    """min(decay·(N+1)Tσ/h_min, fraction·ρ at the stability limit); elementwise for arrays of
    ``owners`` and ``share_max`` (one per coalition), so the forecast uses this very formula."""
    floor_rho = decay * (owners + 1) * iterations * 2.0 * lam / h_min
    limit = STABILITY_LIMIT / stability_number(1.0, owners, iterations, lam, share_max, curvature=curvature)
    rho = np.minimum(floor_rho, fraction * limit)
    return float(rho) if np.ndim(rho) == 0 else rho
