"""Theorem 2's form of the forecast, and what every forecast's fit reports.

ψ̂ = c₀ + c₁/n · sqrt(Σ ε_i⁻²) + c₂/n² · Σ ε_i⁻² (Theorem 2 for large T, paper 003 eq. (6)), over the
owners that take part (n = their total records). The constants are not known in advance:
:func:`calibrate` fits them to (ε, n, observed ψ) by non-negative least squares on relative
errors, and reports how well the fit explains the observations, overall and per coalition size.

Theorem 2 is an asymptote in T: at a finite horizon ψ also has an optimisation floor that no
budget removes. The optional constant c₀ (default 0, so the papers' form is the default) absorbs
it, one floor for coalitions of every size. The market's default is the law of
dpmarket/markets/law.py, whose floor knows N, T and ρ; this form stays for explicit constants
(``market.forecast = {c0, c1, c2}``), for learners the law does not describe (synchronous, hinge
loss), and for the sweeps' fit of the papers' slopes.

Every forecast object offers the same three calls to the market: ``coalitions(ε, records,
masks)`` (ψ̂ of many coalitions: the only place ψ̂ is computed), ``noise_weights`` and
``describe``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Protocol

import numpy as np

from dpmarket.markets.members import Masks, Prefixes, Subsets, as_members
from dpmarket.privacy.guarantee import Guarantee
from dpmarket.privacy.mechanisms import answer_caps


class Forecaster(Protocol):
    """What the market asks of a forecast (:class:`Forecast` here, ``law.LawForecast``)."""

    form: str

    def coalitions(self, epsilons: np.ndarray, records: np.ndarray, coalitions) -> np.ndarray:
        """ψ̂ of every coalition (a (K, N) boolean mask, or members.Prefixes) at ``epsilons``; inf
        for an empty one."""

    def noise_weights(self, records: np.ndarray, masks: np.ndarray) -> np.ndarray:
        """Per coalition, the relative weight of each member's ε_i⁻² in ψ̂."""

    def describe(self) -> str:
        """The formula and its constants, for the terminal."""

    def to_dict(self) -> dict:
        """A JSON-ready form."""


def regressors(epsilons: np.ndarray, records: float) -> tuple[float, float]:
    """The two terms of the bound without their constants: sqrt(Σε⁻²)/n and Σε⁻²/n²."""
    s = float(np.sum(np.asarray(epsilons, dtype=float) ** -2.0))
    return np.sqrt(s) / records, s / records**2


@dataclass(frozen=True, eq=False)
class EffectiveBudgets:
    """Theorem 2's ε_i when the noise is not Theorem 1's m_i/ε_i (Gaussian answers, or an RDP or PLD
    accountant): the budget ε̃_i whose basic Laplace answers carry the noise the owner's calibrated
    answers carry — ε̃ = m_i/z_i for Laplace (variance 2(z_iΔ)² = 2(m_iΔ/ε̃)²), √2·(m_i/z_i)·Ξ/Ξ₂ for
    Gaussian ((z_iΔ₂)², Δ₂ = 2Ξ₂/n_i the L2 sensitivity against Laplace's L1 Δ = 2Ξ/n_i), z_i = z(m_i,
    ε_i, δ_i) from dpmarket/privacy/accounting.py's tables and m_i as each member budgets it in the coalition
    (the capped split's shares). The ε⁻² of Theorem 2 then follows the calibrated noise, as the law's
    noise term does, and one fit can span cells of several mechanisms and accountants.
    """

    mechanism: str
    accountant: str
    deltas: np.ndarray  # δ_i per owner
    rates: np.ndarray | None  # clock rates λ_i (a member's share of the exchanges); None: synchronous
    caps: np.ndarray  # cap_i given, NaN where none
    split: str
    iterations: int
    quantile: float
    norm_ratio: float = 1.0  # Ξ/Ξ₂, the L1 sensitivity over the L2 one (Gaussian answers; 1 for Laplace)

    def __call__(self, epsilons: np.ndarray, masks: np.ndarray) -> np.ndarray:
        """ε̃ (K, N) of every member of the coalitions ``masks`` at ``epsilons`` ((N,) or (K, N));
        0 for non-members and for owners that sell nothing."""
        from dpmarket.privacy.accounting import multipliers  # deferred: dp-accounting loads scipy

        if self.rates is None:  # every member answers every round
            shares = np.ones(masks.shape)
        else:
            rates = np.where(masks, self.rates, 0.0)
            totals = rates.sum(axis=1, keepdims=True)
            shares = np.where(masks, rates / np.where(totals > 0, totals, 1.0), 1.0)
        m = answer_caps(self.split, self.iterations, shares, self.caps, self.quantile)
        eps = np.broadcast_to(np.asarray(epsilons, dtype=float), masks.shape)
        take = masks & (eps > 0)
        deltas = np.broadcast_to(self.deltas, masks.shape)
        out = np.zeros(masks.shape)
        z = multipliers(self.mechanism, self.accountant, m[take], eps[take], deltas[take])
        out[take] = m[take] / z * (1.0 if self.mechanism == "laplace" else math.sqrt(2.0) * self.norm_ratio)
        return out

    def of_members(self, epsilons: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """ε̃ of the members of one coalition (``mask`` (N,)), in owner order."""
        mask = np.asarray(mask, dtype=bool)
        return self(epsilons, mask[None, :])[0][mask]


def effective_budgets(scenario, owners: int, norm_ratio: float | None = None) -> EffectiveBudgets | None:
    """The scenario's :class:`EffectiveBudgets` for ``owners`` owners, or None under Theorem 1's
    noise (Laplace answers, basic composition), where ε̃ is ε itself. ``norm_ratio`` is Ξ/Ξ₂ of the
    owners' data (from the consortium); left out, the declared bounds give it (:func:`norm_ratio`)."""
    p = scenario.privacy
    if Guarantee.of(p).pure:
        return None
    value = scenario.owner_value
    caps = [np.nan if value(i, "cap") is None else value(i, "cap") for i in range(owners)]
    rates = (np.array([value(i, "clock_rate") for i in range(owners)], dtype=float)
             if scenario.learner.algorithm == "async" else None)
    ratio = 1.0 if p.mechanism == "laplace" else (norm_ratio if norm_ratio is not None else
                                                   declared_norm_ratio(scenario))
    return EffectiveBudgets(p.mechanism, p.accountant,
                            np.array([value(i, "delta") for i in range(owners)], dtype=float), rates,
                            np.array(caps, dtype=float), p.split, scenario.learner.iterations, p.cap_quantile,
                            ratio)


def declared_norm_ratio(scenario) -> float:
    """Ξ/Ξ₂ from the declared domain: sup‖z‖₁/sup‖z‖₂ = (pX + 1)/√(pX² + 1) (the 1s: an intercept),
    as dpmarket/privacy/cohort.py bounds both (1 with clipping, whose bound is Ξ in either norm). A table's
    number of features p is known only once it is read: a ValueError says so."""
    d, m = scenario.data, scenario.model
    if scenario.privacy.sensitivity == "clip":
        return 1.0
    if d.source != "synthetic":
        raise ValueError("the effective budgets of Gaussian answers on table data need the number of "
                         "features, known once the table is read")
    one = 1.0 if m.intercept else 0.0
    return (d.features * d.feature_bound + one) / math.sqrt(d.features * d.feature_bound**2 + one)


def member_masks(members: Masks | Prefixes | Subsets, owners: int) -> np.ndarray:
    """The (K, N) membership of coalitions given as masks, prefixes of orders or subsets."""
    if isinstance(members, Subsets):
        return members.masks()
    if not isinstance(members, Prefixes):
        return members.masks
    count, length = members.orders.shape
    added = np.zeros((count, length, owners), bool)  # the player each prefix adds, one-hot
    added[np.arange(count)[:, None], np.arange(length)[None, :], members.orders] = True
    return np.logical_or.accumulate(added, axis=1).reshape(count * length, owners)


@dataclass(frozen=True)
class Forecast:
    """Theorem 2's calibrated constants and the quality of their fit; with ``noise``, its ε_i are the
    effective budgets of the owners' calibrated noise (:class:`EffectiveBudgets`)."""

    c1: float
    c2: float
    r2: float = float("nan")  # of log ψ̂ against log ψ over the pilots
    rms_relative_error: float = float("nan")
    points: int = 0
    c0: float = 0.0  # the finite-T optimisation floor (see the module docstring)
    by_size: tuple = ()  # per pilot coalition size: members, points, RMS relative error
    excluded: int = 0  # pilots left out of the fit (calibration.PilotRuns.in_range)
    noise: EffectiveBudgets | None = field(default=None, repr=False, compare=False)  # from the scenario
    form = "theorem2"

    def psi(self, epsilons: np.ndarray, records: float) -> float:
        """ψ̂ for the given budgets of the participating owners and their total records."""
        a, b = regressors(epsilons, records)
        return self.c0 + self.c1 * a + self.c2 * b

    def coalitions(self, epsilons: np.ndarray, records: np.ndarray, coalitions) -> np.ndarray:
        """ψ̂ of every coalition (a (K, N) boolean mask, or members.Prefixes) at the owners' ε ((N,)
        or (K, N)); inf when empty. The one place the market computes ψ̂ (law.LawForecast has the
        same call)."""
        members = as_members(coalitions)
        eps = np.asarray(epsilons, dtype=float)
        if self.noise is not None:  # ε̃ per coalition and member: the calibrated noise's budgets
            members = Masks(member_masks(members, len(records)))
            eps = self.noise(eps, members.masks)
        inverse = 1.0 / np.square(np.where(eps > 0, eps, 1.0))  # 0 (declined) for non-members: unused
        if inverse.ndim == 1:
            inv = members.sums(inverse)
        else:
            inv = members.weighted_sums(np.broadcast_to(inverse, members.masks.shape), np.ones(len(records)))
        some = members.nonempty()  # an empty coalition: ψ̂ = inf, without dividing by zero
        n = np.where(some, members.sums(np.asarray(records, dtype=float)), 1.0)
        psi = self.c0 + self.c1 * np.sqrt(inv) / n + self.c2 * inv / n**2
        return np.where(some, psi, np.inf)

    def noise_weights(self, records: np.ndarray, masks: np.ndarray) -> np.ndarray:
        """Every member's ε_i⁻² weighs the same here (ψ̂ grows with Σε⁻² within a coalition)."""
        return np.atleast_2d(masks).astype(float)

    def describe(self) -> str:
        """The formula with its constants, for the terminal."""
        budgets = "" if self.noise is None else (
            f"; eps: the budgets of basic Laplace answers as noisy as the owners' {self.noise.mechanism} "
            f"answers under the {self.noise.accountant} accountant")
        return (f"psi = {self.c0:.4g} + {self.c1:.4g}/n*sqrt(sum eps^-2) + {self.c2:.4g}/n^2*sum eps^-2 "
                f"(Theorem 2's form{budgets})")

    def to_dict(self) -> dict:
        """A JSON-ready form, for caching next to the scenario."""
        facts = {k: v for k, v in asdict(self).items() if k != "noise"}  # rebuilt from the scenario
        return {"form": self.form, **facts, "by_size": [dict(row) for row in self.by_size]}

    @classmethod
    def from_dict(cls, data: dict) -> Forecast:
        """Inverse of :meth:`to_dict`."""
        fields = {k: v for k, v in data.items() if k != "form"}
        return cls(**{**fields, "by_size": tuple(fields.get("by_size", ()))})


def fit_quality(predicted: np.ndarray, observed: np.ndarray, sizes: np.ndarray) -> dict:
    """R² of log ψ, RMS relative error and points, overall and per coalition size (largest first)."""
    predicted, observed = np.asarray(predicted, dtype=float), np.asarray(observed, dtype=float)
    relative = predicted / observed - 1.0
    sizes = np.asarray(sizes)
    by_size = tuple({"members": int(k), "points": int(np.sum(sizes == k)),
                     "rms_relative_error": float(np.sqrt(np.mean(relative[sizes == k] ** 2)))}
                    for k in sorted(set(sizes.tolist()), reverse=True))
    return {"r2": _r2(np.log(observed), np.log(np.maximum(predicted, 1e-300))),
            "rms_relative_error": float(np.sqrt(np.mean(relative**2))), "points": len(observed),
            "by_size": by_size}


def relative_nnls(columns: np.ndarray, psi: np.ndarray) -> np.ndarray:
    """Non-negative coefficients x minimising Σ_k (columns_k·x/ψ_k − 1)²: least squares on relative
    errors, so a pilot at ψ = 10⁻⁴ weighs as much as one at ψ = 1 (ψ spans decades)."""
    from scipy.optimize import nnls  # deferred: scipy.optimize is slow to import

    y = np.asarray(psi, dtype=float)
    if np.any(y <= 0):
        raise ValueError("pilot ψ values must be positive to calibrate on relative errors")
    coef, _ = nnls(np.asarray(columns, dtype=float) / y[:, None], np.ones_like(y))
    return coef


SHAPES = ("laplace", "gaussian")  # the answers' noise, which shapes a clipped copy's spread


TINY = {"laplace": 1.0 / 700.0, "gaussian": 0.01}  # below: g = u, P = 0 to 1e-14 relative (e^-37, φ(10))


def clipped_copy(u: np.ndarray, shape: str, slopes: bool = False) -> tuple[np.ndarray, ...]:
    """(g, P), and with ``slopes`` (dg/du, dP/du), for X of the answers' noise ``shape`` with
    variance u·θmax², centred: g = E Π(X)²/θmax² (Π clips to [−θmax, θmax]) and P = P(|X| > θmax), the
    share Π clips.

    Closed forms (t = θmax/b, b = θmax·sqrt(u/2) the Laplace scale; a = 1/sqrt(u) for the Gaussian):
    Laplace g = 2b²(1 − e⁻ᵗ) − 2b·e⁻ᵗ, P = e⁻ᵗ; Gaussian g = u·erf(a/√2) − 2φ(a)/a + erfc(a/√2),
    P = erfc(a/√2). g ≈ u while clipping is rare (exponentially small corrections), g → 1 as u → ∞
    with 1 − g ≈ (2/3)·P(|X| ≤ θmax) ∝ 1/sqrt(u): a copy lands inside Θ with a probability of about
    θmax over its noise scale. Series where the closed forms cancel (u > 10⁶); g = u, P = 0 below
    ``TINY`` (where the corrections are under 10⁻¹⁴ of g), and only the other entries are computed: the
    market asks for tens of thousands of coalitions' members at once.
    """
    if shape not in TINY:
        raise ValueError(f"unknown noise shape {shape!r}; expected one of {SHAPES}")
    u = np.asarray(u, dtype=float)
    g, p = u.copy(), np.zeros_like(u)
    dg, dp = np.ones_like(u), np.zeros_like(u)
    some = u > TINY[shape]
    if some.any():
        values = _clipped(u[some], shape, slopes)
        g[some], p[some] = values[:2]
        if slopes:
            dg[some], dp[some] = values[2:]
    return (g, p, dg, dp) if slopes else (g, p)


def _clipped(u: np.ndarray, shape: str, slopes: bool) -> tuple[np.ndarray, ...]:
    """:func:`clipped_copy` where u > TINY (positive, possibly inf)."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if shape == "laplace":
            b = np.sqrt(0.5 * u)
            t = 1.0 / b
            inside = -np.expm1(-t)  # 1 − e⁻ᵗ, exact for small t
            out = 1.0 - inside
            g = u * inside - 2.0 * b * out
            slope = (inside - out * t * (1.0 + 0.5 * t)) if slopes else None
            small = t < 1e-3  # u > 2·10⁶: the closed forms cancel, the series do not
            if small.any():
                ts = t[small]
                g[small] = 1.0 - ts * (2.0 / 3.0 - ts * (0.25 - ts / 15.0))
                if slopes:
                    slope[small] = ts**3 / 6.0
            return (g, out, slope, out * t / (2.0 * u)) if slopes else (g, out)
        from scipy.special import erf, erfc  # deferred: scipy.special is slow to import

        a = 1.0 / np.sqrt(u)
        phi = np.exp(-0.5 * a * a) / math.sqrt(2.0 * math.pi)
        inside, out = erf(a / math.sqrt(2.0)), erfc(a / math.sqrt(2.0))
        g = u * inside - 2.0 * phi / a + out
        slope = (inside - 2.0 * a * phi) if slopes else None
        small = a < 1e-3
        if small.any():
            phi0, As = 1.0 / math.sqrt(2.0 * math.pi), a[small]
            g[small] = 1.0 - phi0 * As * (4.0 / 3.0 - 2.0 / 15.0 * As * As)
            if slopes:
                slope[small] = 2.0 / 3.0 * phi0 * As**3
        return (g, out, slope, phi * a**3) if slopes else (g, out)


def clipped_shifted(m: np.ndarray, scale: np.ndarray, shape: str) -> tuple[np.ndarray, np.ndarray]:
    """(E Π(X), E Π(X)²) for X = m + Y, m in [−1, 1], Y of the noise ``shape`` with standard deviation
    ``scale`` (in θmax), Π clipping to [−1, 1] (arrays broadcast together).

    Π(X) = X − (X − 1)₊ + (−1 − X)₊ and Π(X)² = X² − (X − 1)₊² − 2(X − 1)₊ − (−1 − X)₊² − 2(−1 − X)₊,
    with the partial moments E(Y − d)₊, E(Y − d)₊² of Y beyond d = 1 ∓ m ≥ 0 in closed form:
    Laplace of scale b = scale/√2, ½b·e^{−d/b} and b²·e^{−d/b}; Gaussian of standard deviation s,
    sφ(z) − dQ(z) and (s² + d²)Q(z) − dsφ(z), z = d/s, Q the upper tail.
    """
    with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        if shape == "laplace":
            b = np.maximum(scale / math.sqrt(2.0), 1e-300)
            up, down = np.exp((m - 1.0) / b), np.exp(-(m + 1.0) / b)  # e^{−d/b} at either face
            first = m - 0.5 * b * (up - down)
            second = m * m + 2.0 * b * b - (b * b + b) * (up + down)
        else:
            from scipy.special import erfc  # deferred: scipy.special is slow to import

            s = np.maximum(scale, 1e-300)
            first, second = m + 0.0 * s, m * m + s * s
            for d, sign in ((1.0 - m, -1.0), (1.0 + m, 1.0)):
                z = d / s
                upper = 0.5 * erfc(z / math.sqrt(2.0))
                density = np.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)
                one = s * density - d * upper
                first = first + sign * one
                second = second - ((s * s + d * d) * upper - d * s * density) - 2.0 * one
    return first, np.clip(second, 0.0, 1.0)


REACH = 0.01  # the mean's variance (θmax²) below which it stays 10 SD inside Θ: the copies alone
GRID = 31  # points of the shared mean's density (trapezoid rule on a grid dense at the faces)
BLOCK = 1 << 18  # entries of one (coalitions × owners × GRID) block: sampled Shapley values of 86 owners
#                  ask for 344,000 coalitions at once


def split_moment(u: np.ndarray, mean: np.ndarray, step: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(S, d): θ_L's unclipped second moment u (in θmax², ×3) split between the copies' shared mean,
    variance S, and each copy's own deviation, second moment d — the rest of u beyond the mean's
    variance ``mean``, but at least one noise ``step`` — so that 3S + d = u."""
    dev = np.minimum(np.maximum(u - 3.0 * mean, step), u)
    return (u - dev) / 3.0, dev


def shared_mean(pi: np.ndarray, ratio: np.ndarray, S: np.ndarray, dev: np.ndarray, step: np.ndarray, *,
                owners: np.ndarray, shape: str) -> np.ndarray:
    """3·E θ_L²/θmax² when the copies' shared mean wanders to the faces (rows: coalitions; ``pi``,
    ``ratio``: (K, N) as :func:`saturated`'s spread; ``S``, ``dev``: :func:`split_moment`; ``step``:
    one copy's noise step in θmax²; ``owners``: N per row).

    The copies are m + d_i: m their mean, which wanders slowly with unclipped variance S, d_i copy
    i's own deviation (second moment ``dev``). At an exchange with copy i the mean moves by
    (Π(m + k_i w) − m)/(N + 1), k_i w the copy's noise step, clipped; it is pulled back at the rate c
    that makes S its stationary variance unclipped, c = k̄²/(2(N + 1)S). Its
    density is the stationary one of that drift a and diffusion B, p(m) ∝ exp(∫ 2a/B)/B, which the
    clipping narrows (an outward step at a face is lost). Given m, θ_L = Σ_k 2⁻ᵏ Π(m + d_k) has
    3E[θ_L²|m] = 2μ̄(m)² + Σ_i π_i E Π(m + d_i)², μ̄ = Σ_i π_i E Π(m + d_i) (closed forms of a shifted,
    clipped Laplace or Gaussian: :func:`clipped_shifted`). Where nothing is clipped it is 3S + dev.
    """
    S = np.maximum(S, 1e-300)
    c = step / (2.0 * (owners + 1.0) * S)
    half = np.minimum(1.0, 8.0 * np.sqrt(S))  # m lies within 8 standard deviations, and within Θ
    grid = np.sin(0.5 * np.pi * np.linspace(-1.0, 1.0, GRID))  # dense at the faces
    m = half[:, None] * grid[None, :]  # (K, M)
    scales = np.sqrt(np.stack([step, dev])[:, :, None] * ratio[None])[..., None]  # (2, K, N, 1)
    first, second = clipped_shifted(m[None, :, None, :], scales, shape)  # (2, K, N, M): steps, copies
    share = pi[None, :, :, None]  # θ_L meets copy i at a share π_i of the exchanges
    first, second = np.sum(share * first, axis=2), np.sum(share * second, axis=2)
    moved = second[0] - 2.0 * m * first[0] + m * m  # E(Π(m + k w) − m)², over the owners
    drift = 2.0 * (owners[:, None] + 1.0) * (first[0] - m - c[:, None] * m)
    slope = drift / np.maximum(moved, 1e-300)
    logp = np.concatenate([np.zeros((len(S), 1)),
                           np.cumsum(0.5 * (slope[:, 1:] + slope[:, :-1]) * np.diff(m, axis=1), axis=1)],
                          axis=1) - np.log(np.maximum(moved, 1e-300))
    weight = np.exp(logp - logp.max(axis=1, keepdims=True)) * np.gradient(m, axis=1)
    weight /= weight.sum(axis=1, keepdims=True)
    inner = 2.0 * first[1] ** 2 + second[1]  # 3E[θ_L²|m]
    return np.sum(weight * inner, axis=1)


def step_lost(step: np.ndarray, shape: str) -> np.ndarray:
    """1 − g(κ)/κ: the share of a copy's noise step (second moment κ, in θmax²) that the box clips
    away when the step starts at the centre — 0 for steps well inside Θ, → 1 for steps that swamp it
    (:func:`saturated` weighs its two pictures of the copies by it)."""
    g, _ = clipped_copy(step, shape)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(step > 0, 1.0 - g / np.where(step > 0, step, 1.0), 0.0)


def blended(kept: np.ndarray, u: np.ndarray, pi: np.ndarray, ratio: np.ndarray, shared: tuple, *,
            shape: str) -> np.ndarray:
    """The share of the box's spread θ_L keeps (``kept``: the copies' picture, Σ_i π_i g(u_i)), where
    the copies' shared mean can reach the faces: (1 − w)·:func:`shared_mean` + w·kept, w =
    :func:`step_lost` of one copy's noise step. ``shared`` = (the mean's share of u unclipped, one
    copy's step over θ_L's second moment u/3, N) per row (law.shared_parts).

    Two pictures of the copies, each right at one end (measured on 1,147 policies of eleven
    development designs, dpmarket/markets/law.py): when a step is small against Θ the copies follow
    their slowly wandering mean, which the box clips (the shared mean); when a step swamps Θ every
    copy is redrawn at each exchange, independently of the mean (the copies alone). The share of a
    step the box clips says how far a coalition is along the way.
    """
    share, kick, owners = (np.broadcast_to(np.asarray(a, dtype=float), u.shape).ravel() for a in shared)
    flat, kept = u.ravel(), np.array(kept, dtype=float).ravel()
    step = kick * flat / 3.0
    S, dev = split_moment(flat, share * flat / 3.0, step)
    rows = np.flatnonzero(S > REACH)  # the mean can reach the faces: below, the copies alone
    block = max(1, BLOCK // (pi.shape[1] * GRID))  # rows at a time: bounds the (2, K, N, GRID) arrays
    for start in range(0, len(rows), block):
        at = rows[start:start + block]
        w = step_lost(step[at], shape)
        closure = shared_mean(pi[at], ratio[at], S[at], dev[at], step[at], owners=owners[at], shape=shape)
        kept[at] = (1.0 - w) * closure + w * kept[at]
    return kept.reshape(u.shape)


def saturated(noise: np.ndarray, box: float, zero: float = 0.0, shape: str = "laplace",
              spread: tuple[np.ndarray, np.ndarray] | None = None, *, slope: bool = False,
              shared: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None):
    """The noise term as the box Θ lets it grow (``box`` = inf: unchanged); with ``slope``, also its
    derivative in ``noise`` (for the fit).

    ``box`` = ψ_box, the ψ of a model spread uniformly over Θ, and ``zero`` = ψ(0), its part that
    θ*'s offset makes. θ_L is averaged with the copy it meets at every exchange, θ_L ← (θ_L + θ_i)/2,
    so it is Σ_k 2⁻ᵏ of the copies it met, and a copy is clipped to Θ after its own noisy step
    (dpmarket/markets/law.py). Copies of second moment u per coordinate (in θmax²) give θ_L a third of
    it, u/3, unclipped: so u = 3·E θ_L²/θmax² = noise/(box − zero), the noise term over the box's
    spread. Clipped, each copy keeps g(u) = E Π(X)² of an X with the answers' noise ``shape``
    (:func:`clipped_copy`), θ_L a third of that, and the clipping at faces centred on 0 — not on θ* —
    moves θ_L's mean back towards 0 by the clipped share P, which costs P²·ψ(0). Copy by copy
    (``spread`` = (π_i, r_i) per row, law.copy_spread: θ_L meets copy i at a share π_i of the
    exchanges, and it is r_i times as spread as the average copy; None: all alike), u_i = r_i·u and

        sat = (box − zero)·Σ_i π_i·g(u_i) + zero·(Σ_i π_i·P(u_i))²,

    ≈ noise while copies are rarely clipped, → box as they all are (then θ_L = Σ 2⁻ᵏ·(±θmax) is
    uniform on Θ). It approaches the box as 1/sqrt(noise) — a copy lands inside Θ with probability
    ∝ θmax over its noise scale — where the harmonic 1/sat = 1/noise + 1/box approached it as
    1/noise and overshot the simulated ψ up to ×1.7 (dpmarket/markets/law.py).

    With ``shared`` (law.shared_parts: the mean's share of u, one copy's step over u/3, N per row),
    where the copies' shared mean can reach the faces Σ_i π_i·g(u_i) becomes :func:`blended`'s mix of
    the copies alone and the shared mean clipped by the box.
    """
    noise = np.asarray(noise, dtype=float)
    if not np.isfinite(box):
        return (noise, np.ones_like(noise)) if slope else noise
    span = box - zero
    finite = np.isfinite(noise)
    u = np.where(finite, noise, 0.0) / span
    if spread is None:
        pi, ratio = np.ones((u.size, 1)), np.ones((u.size, 1))
    else:
        pi, ratio = (np.asarray(a, dtype=float).reshape(u.size, -1) for a in spread)
    if shared is not None and slope:  # the shared mean's slope by a central difference (the fit only)
        up, value, down = (saturated(noise * f, box, zero, shape, spread, shared=shared)
                           for f in (1 + 1e-5, 1.0, 1 - 1e-5))
        return value, np.where(finite, (up - down) / np.maximum(2e-5 * noise, 1e-300), 0.0)
    copies = clipped_copy(u.reshape(-1, 1) * ratio, shape, slopes=slope)
    g, p = copies[:2]
    outside = np.sum(pi * p, axis=1).reshape(u.shape)
    kept = np.sum(pi * g, axis=1).reshape(u.shape)
    if shared is not None:
        kept = blended(kept, u, pi, ratio, shared, shape=shape)
    value = span * kept + zero * outside * outside
    value = np.where(finite, value, box)  # inf noise (no coalition) stays inf upstream
    if not slope:
        return value
    dg, dp = copies[2:]
    d_outside = np.sum(pi * ratio * dp, axis=1).reshape(u.shape) / span
    derivative = np.sum(pi * ratio * dg, axis=1).reshape(u.shape) + 2.0 * zero * outside * d_outside
    return value, np.where(finite, derivative, 0.0)


def quasi_nnls(columns: np.ndarray, psi: np.ndarray, box: float = np.inf,
               prior: np.ndarray | None = None, iterations: int = 200, *, zero: float = 0.0,
               shape: str = "laplace", spread: tuple | None = None,
               shared: tuple | None = None) -> np.ndarray:
    """Non-negative multipliers x of ψ ≈ μ(x) = Σ_{c<C} x_c·A_c + saturated(x_C·A_C, box, zero, shape,
    spread) (A_C the last
    column) that solve the quasi-likelihood equations of a constant *relative* error,
    Σ_k (ψ_k − μ_k)/μ_k² · ∂μ_k/∂x = 0, plus ``prior`` pseudo-observations λ_c (x_c − 1)² that hold a
    multiplier the pilots cannot tell apart at the law's own value 1.

    Why not :func:`relative_nnls`: dividing each residual by the *observed* ψ_k weighs a pilot whose
    mean came out low by chance more than one that came out high, so the fit is pulled down by about
    twice the squared relative standard error of the pilots' means — 15–30 % with the default 2–4
    replications and ψ's run-to-run spread (a quadratic form of the noise, relative SD ≈ 0.5–0.7).
    Weighing by the *fitted* ψ (iteratively reweighted least squares, Gauss–Newton on the saturated
    column) removes that bias: the equations above have mean zero at the true multipliers.

    Pilots above the box (ψ_k beyond ``box`` plus the other columns) would take x_C to infinity, the
    saturated term creeping towards ``box`` (as 1/sqrt(x_C)); x_C stops where every pilot's term is
    within 10⁻⁶ of saturation (x_C·A_C ≥ 10¹²·box), which forecasts the same ψ to that precision and
    stays finite.
    """
    A, y = np.asarray(columns, dtype=float), np.asarray(psi, dtype=float)
    count = A.shape[1]
    lam = np.zeros(count) if prior is None else np.asarray(prior, dtype=float)
    x = np.maximum(relative_nnls(A, y), 1e-12)  # the observed-weight fit: a start near the answer

    def model(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """μ(x) and its Jacobian."""
        value, slope = saturated(x[-1] * A[:, -1], box, zero, shape, spread, slope=True, shared=shared)
        jac = np.column_stack([A[:, :-1], A[:, -1] * slope])
        return A[:, :-1] @ x[:-1] + value, jac

    from scipy.optimize import nnls  # deferred: scipy.optimize is slow to import

    positive = A[:, -1][A[:, -1] > 0]
    cap = 1e12 * box / positive.min() if np.isfinite(box) and positive.size else np.inf
    for step in range(iterations):
        mu, jac = model(x)
        weight = 1.0 / np.maximum(mu, 1e-300)
        rows = np.vstack([jac * weight[:, None], np.diag(np.sqrt(lam))])
        target = np.concatenate([(y - mu + jac @ x) * weight, np.sqrt(lam)])
        new, _ = nnls(rows, target)
        new = new if step < 20 else 0.5 * (x + new)  # damped if plain steps have not settled
        new[-1] = min(new[-1], cap)
        if np.max(np.abs(new - x) / np.maximum(np.abs(x), 1e-12)) < 1e-12:
            return new
        x = new
    return x


def calibrate(epsilons: list[np.ndarray], records: list[float], psi: list[float],
              terms: tuple[str, ...] = ("c1", "c2"), weights: str = "observed") -> Forecast:
    """Fit c₁, c₂ ≥ 0 (and c₀ with ``terms``) to pilot observations, on relative errors.

    ``terms`` selects the model among c0, c1, c2 (e.g. ("c2",), or ("c0", "c1", "c2") with the
    finite-T floor). ``weights``: relative to the observed ψ (:func:`relative_nnls`, the sweeps' fit
    of the papers' slopes, on means of many replications) or to the fitted ψ (:func:`quasi_nnls`,
    unbiased on the few replications of market pilots).
    """
    X = np.array([(*regressors(e, n), 1.0) for e, n in zip(epsilons, records, strict=True)])
    keep = [i for i, name in enumerate(("c1", "c2", "c0")) if name in terms]
    full = np.zeros(3)
    fit = relative_nnls if weights == "observed" else quasi_nnls
    full[keep] = fit(X[:, keep], psi)
    quality = fit_quality(X @ full, np.asarray(psi, dtype=float), [len(e) for e in epsilons])
    return Forecast(float(full[0]), float(full[1]), c0=float(full[2]), **quality)


def _r2(observed: np.ndarray, predicted: np.ndarray) -> float:
    residual = np.sum((observed - predicted) ** 2)
    total = np.sum((observed - observed.mean()) ** 2)
    return float(1 - residual / total) if total > 0 else float("nan")
