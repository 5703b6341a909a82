"""Differential privacy of the owners' answers: the mechanisms, the answer caps, the ledgers.

Theorem 1 of the papers: one answer ``Q_i(θ̄) = (1/n_i) Σ ∇ℓ(θ̄; z, y)`` has L1 sensitivity
``2Ξ/n_i`` when ``Ξ ≥ sup ‖∇ℓ‖₁``. An owner that may answer up to ``m_i`` queries and splits
``ε_i`` evenly (basic composition) adds Laplace noise of scale ``b_i = 2Ξ m_i/(n_i ε_i)`` to
every coordinate, and must refuse the (m_i+1)-th query. The :class:`Accountant` enforces that
refusal for any schedule of queries, with exact rational arithmetic so rounding can never let
an owner's spent ε creep past its budget.

(ε, δ) answers (paper 004, Remark 3 of 001): Laplace (L1 sensitivity) or Gaussian (L2) noise
calibrated so that the m_i answers compose to (ε_i, δ_i) under an RDP or PLD accountant
(dpmarket/privacy/accounting.py). The owner still refuses the (m_i+1)-th query — the noise is calibrated
for m_i answers, so the cap is exactly where its budget ends — and :class:`ComposedLedger` reports
the accountant's ε after the answers given.
"""

from __future__ import annotations

import functools
import math
import os
from fractions import Fraction

import numpy as np

from dpmarket.errors import BudgetExhaustedError
from dpmarket.privacy.guarantee import Guarantee

SPLITS = ("horizon", "capped")


def noise_multiplier(guarantee: Guarantee, answers: int) -> float:
    """z: the noise scale per unit of one answer's sensitivity such that ``answers`` answers compose
    to the guarantee's (ε, δ); see dpmarket/privacy/accounting.py (loaded only for (ε, δ) answers)."""
    if guarantee.pure:
        return answers / guarantee.epsilon
    from dpmarket.privacy.accounting import noise_multiplier as calibrated

    return calibrated(guarantee, int(answers))


def proved_by(guarantee: Guarantee, answers: int) -> Guarantee:
    """The guarantee as the accountant that proves it with the least noise for ``answers`` answers
    states it: unchanged, or under ``basic`` where basic composition needs less noise than the
    scenario's RDP or PLD accountant (then Laplace answers are pure ε-DP, with its exact ledger)."""
    if guarantee.accountant == "basic":
        return guarantee
    from dpmarket.privacy.accounting import calibration

    used = calibration(guarantee, int(answers)).accountant
    return guarantee if used == guarantee.accountant else guarantee.using(used)


UNIT = 2.0**-53  # the unit roundoff of a double


def rounding_margin(records: int, dim: int) -> float:
    """κ: how far two neighbouring datasets' answers *as computed in floating point* may differ beyond
    the exact sensitivity 2Ξ/n_i, relative to it; the noise is calibrated to 2Ξ/n_i·(1 + κ).

    An answer is a sum over the owner's n records (from its records, or from its statistics ZᵀZ, Zᵀy
    and then p more products): whatever the order of the sums (BLAS), each coordinate's rounding error
    is at most γ_k = ku/(1 − ku) (k = n + p + 8 operations deep, u = 2⁻⁵³) times the sum of the records'
    absolute contributions to it (Higham 2002, §3.1). Each record contributes at most Ξ/n_i in the norm
    Ξ bounds, so an answer's error is at most γ_kΞ, and two answers that differ in one record differ by
    at most 2Ξ/n_i + 2γ_kΞ = 2Ξ/n_i·(1 + n·γ_k); the n + 1 also covers the scale's own roundings.
    This is the floating-point correction of a sum's sensitivity that Casacuberta et al. (2022) showed
    DP libraries need (an attacker can choose records whose rounding errors add up): 4·10⁻¹² relative
    for 200 records,
    3·10⁻⁷ for 50,000, 10⁻² for 10⁷.
    """
    k = records + dim + 8
    gamma = k * UNIT / (1.0 - k * UNIT)
    return (records + 1) * gamma


def laplace_scale(xi: float, answers: int, n_records: int, epsilon: float) -> float:
    """Per-coordinate Laplace scale ``2Ξm/(nε)`` for one of ``answers`` equal-share answers."""
    if xi <= 0 or answers < 1 or n_records < 1 or epsilon <= 0:
        raise ValueError(
            f"Laplace scale needs Ξ > 0, m ≥ 1, n ≥ 1, ε > 0; got Ξ={xi}, m={answers}, "
            f"n={n_records}, ε={epsilon}"
        )
    return 2.0 * xi * answers / (n_records * epsilon)


@functools.lru_cache(maxsize=4096)
def answer_cap(split: str, iterations: int, share: float, cap: int | None,
               quantile: float) -> int:
    """m_i: the number of answers an owner's budget is split over.

    ``horizon``: m_i = T, as in the papers (any schedule could send every query to one owner).
    ``capped``: m_i = ``cap`` when given, else the ``quantile`` of Binomial(T, share), the
    owner's number of queries when each exchange goes to it with probability ``share``.
    """
    if split == "horizon":
        return int(iterations)
    if split != "capped":
        raise ValueError(f"Unknown budget split {split!r}; expected one of {', '.join(SPLITS)}")
    if cap is not None:
        return int(cap)
    return max(1, binomial_quantile(quantile, int(iterations), float(share)))


EXACT_PMF = 10_000_000  # up to this n the whole pmf is summed; beyond, a window around the mean


def binomial_quantile(q: float, n: int, p: float) -> int:
    """The smallest k with P(Binomial(n, p) ≤ k) ≥ q, from the pmf in log space.

    numpy only: importing scipy.stats for this one number would cost a run about 0.9 s. Beyond
    :data:`EXACT_PMF` trials only the 40 standard deviations either side of the mean are summed
    (the rest weighs under e⁻⁸⁰⁰, nothing in floating point), so T = 10⁹ needs no 10⁹-term arrays.
    """
    if p >= 1.0:
        return n
    if n > EXACT_PMF:
        return _windowed_quantile(q, n, p)
    k = np.arange(n + 1)
    log_fact = np.concatenate(([0.0], np.cumsum(np.log(np.arange(1, n + 1)))))
    log_pmf = log_fact[n] - log_fact - log_fact[::-1] + k * np.log(p) + (n - k) * np.log1p(-p)
    cdf = np.cumsum(np.exp(log_pmf))
    return min(n, int(np.searchsorted(cdf, q - _tie(log_fact[n]))))


def _tie(largest_log: float) -> float:
    """How far below q a computed cdf may lie and still count as reaching it: the cdf's own rounding,
    about the unit roundoff times the largest log-factorial it exponentiates (its pmf's relative error)
    and a vector loop's sums, which differ by CPU. Where the cdf equals q in exact arithmetic (n odd,
    p = q = ½: the median) it was 0.49999999983 at n = 9,999 and the cap one more than the median; the
    cap must not depend on the machine. A cap one answer lower is as private (noise is sized for it)."""
    return 64.0 * np.finfo(float).eps * max(1.0, abs(largest_log))


def _windowed_quantile(q: float, n: int, p: float) -> int:
    """:func:`binomial_quantile` for large n, from the pmf on mean ± 40 standard deviations: its
    log at the window's start, then running sums of log(pmf(k+1)/pmf(k)), normalised to total 1
    (the start's log-factorials of 10⁹ are only good to a few 10⁻⁶, an error the ratio cancels)."""
    mean, sd = n * p, math.sqrt(n * p * (1.0 - p))
    low, high = max(0, math.floor(mean - 40.0 * sd - 10)), min(n, math.ceil(mean + 40.0 * sd + 10))
    k = np.arange(low, high, dtype=float)
    start = (math.lgamma(n + 1) - math.lgamma(low + 1) - math.lgamma(n - low + 1)
             + low * math.log(p) + (n - low) * math.log1p(-p))
    steps = np.log(n - k) - np.log(k + 1) + (math.log(p) - math.log1p(-p))
    cdf = np.cumsum(np.exp(start + np.concatenate(([0.0], np.cumsum(steps)))))
    return min(n, low + int(np.searchsorted(cdf / cdf[-1], q - _tie(math.lgamma(n + 1)))))


def answer_caps(split: str, iterations: int, shares: np.ndarray, caps: np.ndarray,
                quantile: float) -> np.ndarray:
    """:func:`answer_cap` elementwise over arrays of shares and caps (NaN: no cap given).

    The market's forecast needs m_i for every owner of every coalition it considers; the values
    are those of :func:`answer_cap` itself (called once per distinct share), so the forecast and
    the owners agree on every m_i.
    """
    shares, caps = np.broadcast_arrays(np.asarray(shares, dtype=float), np.asarray(caps, dtype=float))
    if split == "horizon":
        return np.full(shares.shape, float(iterations))
    values, inverse = np.unique(shares, return_inverse=True)
    m = np.array([answer_cap(split, iterations, float(v), None, quantile) for v in values], dtype=float)
    return np.where(np.isnan(caps), m[np.ravel(inverse)].reshape(shares.shape), caps)


class SystemNoise:
    """Standard Laplace and normal draws from the operating system's cryptographically secure generator
    (``os.urandom``), for ``privacy.noise = "system"``: nothing published (the run's seed included)
    regenerates them, so a run is no longer reproducible bit for bit.

    Each draw takes 53 random bits to a uniform u in (0, 1) (the midpoints of 2⁵³ cells), then the
    inverse CDF (Laplace) or Box–Muller (normal): textbook floating-point samplers still, so this
    answers the seed caveat, not Mironov's (2012) attack on the low bits (docs/how-to/privacy.md).
    """

    @staticmethod
    def uniform(size) -> np.ndarray:
        """Uniform draws in (0, 1) from os.urandom (53 bits each)."""
        count = int(np.prod(size))
        bits = np.frombuffer(os.urandom(8 * count), dtype=np.uint64) >> np.uint64(11)
        return ((bits.astype(float) + 0.5) * 2.0**-53).reshape(size)

    def laplace(self, loc: float, scale: float, size) -> np.ndarray:
        """Laplace(loc, scale) by the inverse CDF."""
        u = self.uniform(size) - 0.5
        return loc - scale * np.sign(u) * np.log1p(-2.0 * np.abs(u))

    def standard_normal(self, size) -> np.ndarray:
        """N(0, 1) by Box–Muller."""
        u1, u2 = self.uniform(size), self.uniform(size)
        return np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)


NOISE_SOURCES = ("seeded", "system")


class LaplaceNoise:
    """Independent Laplace(0, b) noise for one owner's answers, drawn in blocks for speed.

    Each owner has its own stream, so the j-th answer of an owner always carries the same
    draw whatever the schedule of other owners (common random numbers across policies).
    Blocks do not change the values: numpy draws Laplace variates one after another.
    """

    def __init__(self, rng: np.random.Generator, scale: float, dim: int, block: int = 256):
        self.rng, self.scale, self.dim, self.block = rng, float(scale), dim, block
        self._buf = np.empty((0, dim))
        self._pos = 0

    @staticmethod
    def standard(rng: np.random.Generator, rows: int, dim: int) -> np.ndarray:
        """The next ``rows`` standard draws (scale 1) of ``rng``: row j is the j-th answer's, before
        scaling, whatever the blocks (the batched replay draws an owner's rows in one call)."""
        return rng.laplace(0.0, 1.0, size=(rows, dim))

    def draw(self) -> np.ndarray:
        """One noise vector w with i.i.d. Laplace(0, scale) coordinates."""
        if self._pos == len(self._buf):
            self._buf = self.standard(self.rng, self.block, self.dim)
            self._pos = 0
        w = self._buf[self._pos] * self.scale
        self._pos += 1
        return w


class GaussianNoise(LaplaceNoise):
    """Independent N(0, σ²) noise (σ = ``scale``) for one owner's answers, drawn in blocks."""

    @staticmethod
    def standard(rng: np.random.Generator, rows: int, dim: int) -> np.ndarray:
        """The next ``rows`` standard normal draws of ``rng`` (row j: the j-th answer's)."""
        return rng.standard_normal(size=(rows, dim))


def noise_kind(mechanism: str) -> type[LaplaceNoise]:
    """The noise sampler class of ``mechanism``."""
    return LaplaceNoise if mechanism == "laplace" else GaussianNoise


def make_noise(mechanism: str, rng: np.random.Generator, scale: float, dim: int,
               block: int = 256) -> LaplaceNoise:
    """The noise sampler of ``mechanism`` (the scale is its Laplace b or Gaussian σ)."""
    return noise_kind(mechanism)(rng, scale, dim, block)


class ComposedLedger:
    """One owner's ledger under an RDP or PLD accountant: at most ``cap`` answers, and the
    accountant's ε at δ_i after the answers given.

    The noise was calibrated so that ``cap`` answers compose to (ε_i, δ_i), and ε grows with every
    answer, so the refusal rule is the cap itself: an integer comparison for any schedule, and all
    that paying an answer does. ``spent`` is read from the shared
    :class:`~dpmarket.privacy.accounting.EpsilonCurve` when it is asked for (``events.csv``, ``owners.csv``,
    the summaries), never when an answer is paid, and checked against the budget there: above it
    would be a calibration bug.
    """

    def __init__(self, owner: int, budget: float, cap: int, curve) -> None:
        if not budget > 0 or cap < 1:
            raise ValueError(f"Privacy budget and cap must be positive, got {budget}, {cap}")
        self.owner, self.budget, self.cap, self.curve = owner, float(budget), int(cap), curve
        self.answers = 0

    @property
    def spent_float(self) -> float:
        """ε spent so far: the accountant's ε at δ_i after the answers given (0 before any)."""
        spent = self.curve.after(self.answers)
        if not spent <= self.budget:
            raise RuntimeError(f"owner {self.owner}: the accountant's ε after {self.answers} answers is "
                               f"{spent!r}, above the budget {self.budget!r} the noise was calibrated for")
        return spent

    @property
    def spent(self) -> float:
        """ε spent so far (as :attr:`spent_float`)."""
        return self.spent_float

    def can_pay(self, charge: int = 1) -> bool:
        """Whether one more answer fits under the cap (``charge`` is always one answer)."""
        return self.answers < self.cap

    def remaining(self, charge: int = 1) -> int:
        """How many more answers fit under the cap."""
        return self.cap - self.answers

    def try_pay(self, charge: int = 1) -> bool:
        """Record one answer if it fits; False (nothing recorded) at the cap."""
        if self.answers >= self.cap:
            return False
        self.answers += 1
        return True


class Accountant:
    """One owner's ε ledger under basic composition: spent = Σ charges, never above the budget.

    Charges are exact rationals (the float ε_i is converted exactly), so ``m_i`` charges of
    ``ε_i/m_i`` sum to ``ε_i`` exactly and an (m_i+1)-th is refused, never let through by
    rounding. Refusal does not depend on who asks or when: it holds for any schedule.

    Owners charge the same amount for every answer, so the ledger remembers, for the last
    charge seen, how many more of it fit (an exact integer computed once with rationals);
    repeated charges then cost an integer comparison instead of rational arithmetic.
    """

    def __init__(self, owner: int, budget: float) -> None:
        if not budget > 0:
            raise ValueError(f"Privacy budget must be positive, got {budget}")
        self.owner, self.budget = owner, Fraction(float(budget))
        self.answers = 0
        self.spent_float = 0.0
        self._base = Fraction(0)  # spent before the current run of equal charges
        self._charge = Fraction(1)
        self._run = 0  # charges of self._charge paid since _base
        self._fits = None  # how many more of self._charge fit (None: not computed yet)
        self._float_terms = (0, 1, 0)  # spent as a float: (numerator + run·step) / denominator

    @property
    def spent(self) -> Fraction:
        """ε spent so far, exactly."""
        return self._base + self._charge * self._run

    @staticmethod
    def even_share(budget: float, answers: int) -> Fraction:
        """The exact charge of one of ``answers`` equal shares of ``budget``."""
        return Fraction(float(budget)) / int(answers)

    def _fitting(self, charge: Fraction) -> int:
        if self._fits is None or (charge is not self._charge and charge != self._charge):
            if charge <= 0:
                raise ValueError(f"Non-positive privacy charge {charge}")
            self._base, self._run = self.spent, 0
            self._charge, self._fits = charge, int((self.budget - self._base) // charge)
            a, b = charge.numerator, charge.denominator
            c, d = self._base.numerator, self._base.denominator
            self._float_terms = (c * b, d * b, a * d)
        return self._fits

    def can_pay(self, charge: Fraction) -> bool:
        """Whether ``charge`` fits in what is left of the budget."""
        if charge is self._charge and self._fits is not None:  # the usual repeated charge
            return self._fits > 0
        return self._fitting(charge) > 0

    def remaining(self, charge: Fraction) -> int:
        """How many more answers costing ``charge`` fit in what is left of the budget, exactly."""
        if charge is self._charge and self._fits is not None:
            return self._fits
        return self._fitting(charge)

    def pay(self, charge: Fraction) -> None:
        """Record one answer costing ``charge``; raises BudgetExhaustedError if it would not fit."""
        if not self.try_pay(charge):
            raise BudgetExhaustedError(self.owner, float(self.spent), float(charge), float(self.budget))

    def try_pay(self, charge: Fraction) -> bool:
        """Record one answer costing ``charge`` if it fits; False (nothing recorded) if not."""
        if not (charge is self._charge and self._fits is not None):
            self._fitting(charge)  # a new charge: start a run of equal charges
        if self._fits <= 0:
            return False
        self._fits -= 1
        self._run += 1
        self.answers += 1
        # float(spent) = (c/d + run·a/b) as one correctly rounded division of integers
        numerator, denominator, step = self._float_terms
        self.spent_float = (numerator + self._run * step) / denominator
        return True
