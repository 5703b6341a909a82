"""(ε, δ) accounting on Google's dp-accounting: per-answer noise calibrated for m answers, and the ε
after j answers.

An owner that may answer m_i queries must add noise such that the m_i answers *compose* to
(ε_i, δ_i). Basic composition splits the budget evenly (Theorem 1: b = 2Ξm/(nε) for Laplace).
The RDP and privacy-loss-distribution (PLD) accountants of dp-accounting compose far more
tightly, so the same guarantee usually needs less noise. No composition maths is written here: the
library's accountants price a noise multiplier z (the noise's Laplace b or Gaussian standard
deviation per unit of one answer's sensitivity) and :func:`noise_multiplier` searches z with the
library's own calibration (``calibrate_dp_mechanism``: Brent's method on a bracket, then a
bisection that guarantees the returned z does not exceed the budget), as Opacus does for its
accountants.

**Tight is never looser than basic.** Basic composition is always a valid proof (each of m answers
(ε/m, δ/m)-DP composes to (ε, δ)), and at very small δ (or few answers) it proves the guarantee with
*less* noise than RDP or PLD, whose conversions to (ε, δ) and discretisations are loose there (PLD
needed 70–445 times basic's Gaussian noise and 667 times its Laplace noise at δ = 10⁻¹⁰⁰…5·10⁻³²⁴).
At δ ≤ 10⁻³⁰ PLD's grid (its truncated tails) also needs far more noise than RDP (Gaussian answers,
ε = 10, δ = 10⁻³⁰, m = 200: z = 7,558 against RDP's 16.8). So :func:`calibration` takes the least noise
among the accountants that prove the guarantee — the scenario's, basic composition, and under PLD also
RDP — and says which one it used; an owner then keeps that accountant's ledger. Basic composition's
share δ/m of a Gaussian answer is kept in 80 digits where it falls below the doubles' normal range
(:func:`delta_share`), so basic composition proves every δ > 0.

Neighbouring datasets differ in one record of one owner, every owner's size n_i public and
unchanged (replace-one; docs/how-to/privacy.md). One answer's sensitivity Δ (2Ξ/n_i,
dpmarket/privacy/owners.py) is the largest shift of the answer between two such datasets, in L1 for
Laplace and L2 for Gaussian answers. The library defines its events for exactly that:
``LaplaceDpEvent(s/C)`` is coordinate-wise Laplace(s) noise on a vector of L1 norm at most C,
``GaussianDpEvent(s/C)`` N(0, s²I) noise on one of L2 norm at most C; so z = scale/Δ (no sampling
here). Add/remove neighbours are not covered: n_i is published and sets the noise.

dp-accounting (with the scipy.stats and scipy.signal it loads, about 0.9 s) is imported inside the
functions below only: runs with Laplace answers under basic composition never load it.
"""

from __future__ import annotations

import functools
import math
import sys
from dataclasses import dataclass, replace

from dpmarket.errors import CalibrationError, DeltaError
from dpmarket.privacy.guarantee import Guarantee

# The PLD accountant discretises privacy losses on a grid (rounding up, so the bound stays valid);
# its step, relative to the target ε, keeps the grid's size (and the time) about constant across ε.
# Measured against a grid 30 (Laplace) or 100 (Gaussian) times finer: the calibrated noise's true ε
# is at most 0.04 % (Laplace) or 10⁻⁶ (Gaussian) below the target, and one evaluation takes 3–20 ms.
PLD_RESOLUTION = {"laplace": 3e-4, "gaussian": 1e-3}
# Calibrate to ε(1 − MARGIN): the ledger composes the answers one at a time, which can differ from
# the calibration's m-fold self-composition in the ninth digit (measured 1e-8); the margin keeps the
# ledger's ε after m answers below ε_i. Basic composition's Gaussian takes it too: the library's
# analytic σ met its (ε, δ) only to 3·10⁻¹⁴ (and missed δ by 2 % at δ = 10⁻³⁰³ with ε/m = 10⁻⁹),
# so its σ is also checked in 80-digit arithmetic (:func:`_gaussian_delta`).
MARGIN = 1e-6
SEARCH_RANGE = 1e6  # z is searched within [ref/1e6, ref·1e6], ref = m/ε (basic Laplace's z)
# On log z: the calibrated noise is within 10⁻⁹ (relative) of the smallest that fits. Why so tight: the
# search (Brent's method) may stop anywhere within its tolerance, and where it stops depends on the last
# bits of dp-accounting's ε, another on each CPU (PLD: 10⁻¹¹ to 2·10⁻⁹ apart between numpy's vector
# loops); at 10⁻⁴ two machines calibrated noise 1.6·10⁻⁸ apart (lending_banks, Laplace under PLD), and up
# to 10⁻⁴ could be. At 10⁻⁹ they agree to a few 10⁻⁹, for 2–9 more evaluations of the accountant.
TOLERANCE = 1e-9
UNIT = 2.0**-53  # the unit roundoff of a double
# What the library raises where its numerics give up at extreme δ (NaN to an integer, a domain error,
# brentq's failures): the accountant cannot prove anything there, which :func:`calibration` treats as
# it treats an unreachable (ε, δ).
LIBRARY_FAILURES = (ValueError, ArithmeticError, RuntimeError)


@dataclass(frozen=True)
class Calibration:
    """The noise multiplier z of an owner's answers and the accountant whose proof it rests on."""

    multiplier: float
    accountant: str


@functools.lru_cache(maxsize=4096)
def calibration(guarantee: Guarantee, answers: int) -> Calibration:
    """The least noise that a valid accountant proves lets ``answers`` answers compose to the
    guarantee's (ε, δ): its own accountant's, basic composition's (always valid), or — under PLD —
    RDP's, whichever is least, with the name of the one used.

    A CalibrationError when none reaches (ε, δ); a :class:`~dpmarket.errors.DeltaError` when δ is what
    makes the calibration impossible. Cached per (guarantee, m). dp-accounting's floating-point warnings
    at extreme δ (a log of 0 inside its search, handled there) are not shown: the results are checked.
    """
    with quiet():
        return _least(guarantee, answers)


def _least(guarantee: Guarantee, answers: int) -> Calibration:
    """:func:`calibration`, uncached."""
    g = guarantee
    try:
        found = [Calibration(_basic(g, answers), "basic")]
    except DeltaError as degenerate:
        found, why = [], degenerate
    if g.accountant == "basic":
        if not found:
            raise why
        return found[0]
    # PLD discretises the privacy loss on a grid and truncates its tails: at δ ≤ 10⁻³⁰ its proof needs up
    # to 10⁴ times the noise RDP's does (Gaussian answers, δ = 10⁻³⁰, ε = 10, m = 200: z = 7,558 against
    # RDP's 16.8 and basic's 225), so under PLD the RDP accountant is asked too
    for accountant in dict.fromkeys((g.accountant, "rdp") if g.accountant == "pld" else (g.accountant,)):
        try:
            found.append(Calibration(_tight(g.using(accountant), answers), accountant))
        except CalibrationError:
            continue
    if not found:
        raise why
    return min(found, key=lambda c: c.multiplier)  # ties: the first, basic's


def quiet():
    """numpy's floating-point warnings switched off around dp-accounting's numerics: at extreme δ its
    searches take logs of 0 and overflow on the way (``divide by zero in log1p``), which it handles and
    whose results are checked here; they must not reach the user's terminal."""
    import numpy as np

    return np.errstate(all="ignore")


def noise_multiplier(guarantee: Guarantee, answers: int) -> float:
    """z such that ``answers`` answers with noise scale z·Δ compose to the guarantee's (ε, δ): the
    least a valid accountant proves (:func:`calibration`).

    ``basic`` splits (ε, δ) evenly: Laplace z = m/ε (Theorem 1), Gaussian the analytic Gaussian
    mechanism's σ for (ε/m, δ/m) (Balle & Wang 2018, dp-accounting's ``get_sigma_gaussian``, checked).
    """
    return calibration(guarantee, int(answers)).multiplier


def _basic(guarantee: Guarantee, answers: int) -> float:
    """Basic composition's z: each of m answers (ε/m, δ/m)-DP (Laplace: pure ε/m-DP)."""
    g = guarantee
    if g.mechanism == "laplace":
        return answers / g.epsilon
    return basic_gaussian(g.epsilon / answers, delta_share(g.delta, answers), g.delta)


def delta_share(delta: float, answers: int):
    """δ/m, each of m answers' share of δ under basic composition, such that m shares never exceed δ:
    a double rounded down (by 4 units in the last place) where δ/m is a normal double; else an 80-digit
    mpmath number (rounded down by 10⁻⁶⁰). Below 2.2·10⁻³⁰⁸ a double keeps too few bits for the shares to
    add up within δ (a subnormal's rounding is up to half its 4.9·10⁻³²⁴ step), and at δ = 5·10⁻³²⁴ the
    share underflowed to 0 — where basic composition still proves the guarantee."""
    share = delta / answers * (1.0 - 4.0 * UNIT)
    if share >= sys.float_info.min or delta <= 0.0:
        return share
    import mpmath

    with mpmath.workdps(80):
        return mpmath.mpf(delta) / answers * (1 - mpmath.mpf(10) ** -60)


@functools.lru_cache(maxsize=1024)
def basic_gaussian(epsilon: float, delta: float, whole: float | None = None) -> float:
    """σ (per unit of L2 sensitivity) of one Gaussian answer that is (ε, δ)-DP: the analytic Gaussian
    mechanism's (dp-accounting) for ε(1 − MARGIN), checked in 80-digit arithmetic at (ε, δ); where
    the library's σ fails that check (or fails), the least σ that passes it, by bisection in the same
    arithmetic. ``delta`` may be an mpmath number below the doubles' range (:func:`delta_share`: the
    library is not asked then). A DeltaError at δ = 0 (``whole``: the scenario's δ, for the message)."""
    if not delta > 0.0:
        raise DeltaError(f"δ/m = {float(delta):g} (δ = {whole if whole is not None else delta:g}): "
                         "no Gaussian noise is (ε, δ)-DP at δ = 0")
    from dp_accounting import get_sigma_gaussian

    target = epsilon * (1.0 - MARGIN)
    try:
        sigma = float(get_sigma_gaussian(target, delta)) if isinstance(delta, float) else math.nan
    except LIBRARY_FAILURES:
        sigma = math.nan
    if math.isfinite(sigma) and sigma > 0 and _gaussian_delta(sigma, epsilon) <= delta:
        return sigma
    return _bisect_gaussian(target, epsilon, delta)


def _gaussian_delta(sigma: float, epsilon: float):
    """δ(ε) of the Gaussian mechanism of σ (sensitivity 1), Φ(1/2σ − εσ) − e^ε Φ(−1/2σ − εσ) (Balle &
    Wang 2018, Theorem 8), in 80-digit arithmetic: the two terms cancel to many digits where ε is small
    and δ tiny, which double precision cannot follow (mpmath, a dependency of dp-accounting)."""
    import mpmath

    with mpmath.workdps(80):
        s, e = mpmath.mpf(sigma), mpmath.mpf(epsilon)
        return mpmath.ncdf(1 / (2 * s) - e * s) - mpmath.exp(e) * mpmath.ncdf(-1 / (2 * s) - e * s)


def _gaussian_epsilon(sigma: float, delta) -> float:
    """The least ε (to 10⁻¹² relative, rounded up) at which one Gaussian answer of σ is (ε, δ)-DP, in
    80-digit arithmetic: where δ is below the doubles' range (:func:`delta_share`)."""
    if _gaussian_delta(sigma, 0.0) <= delta:
        return 0.0
    lo, hi = 0.0, 1.0
    while _gaussian_delta(sigma, hi) > delta:
        lo, hi = hi, 2.0 * hi
        if hi > 1e300:
            return math.inf
    while hi - lo > 1e-12 * hi:
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if _gaussian_delta(sigma, mid) <= delta else (mid, hi)
    return hi


def _bisect_gaussian(target: float, epsilon: float, delta: float) -> float:
    """The least σ (to 10⁻¹² relative) whose δ at ``target`` ≤ ``delta``, verified at ``epsilon``."""
    import mpmath

    lo, hi = 1e-300, max(1.0, math.sqrt(2.0 * float(mpmath.log(mpmath.mpf(1.25) / delta)))) / target
    while _gaussian_delta(hi, target) > delta:  # the classical bound holds only for ε < 1
        lo, hi = hi, 2.0 * hi
        if not math.isfinite(hi):  # ε/m so small that σ overflows: ε's key is named
            raise CalibrationError(f"no finite Gaussian noise is ({epsilon:g}, {delta:g})-DP per answer "
                                   "(σ would overflow)")
    lo = max(lo, hi * 1e-6)
    while hi / lo > 1.0 + 1e-12:
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if _gaussian_delta(mid, target) <= delta else (mid, hi)
    if not _gaussian_delta(hi, epsilon) <= delta:  # unreachable: δ falls as σ grows, target < ε
        raise DeltaError(f"the Gaussian's δ at σ = {hi!r} cannot be shown below {float(delta):g}")
    return hi


def _tight(guarantee: Guarantee, answers: int) -> float:
    """The guarantee's own accountant's z (RDP or PLD); a CalibrationError where it cannot reach
    (ε, δ) within the search range, or where its numerics give up (extreme δ)."""
    try:
        return _tight_cached(guarantee, answers)
    except CalibrationError:
        raise
    except LIBRARY_FAILURES as exc:
        g = guarantee
        raise CalibrationError(_unreachable(g, answers, why=f"what the {g.accountant!r} accountant cannot "
                                            f"compute at δ = {g.delta:g} ({type(exc).__name__}: {exc})")) \
            from None


@functools.lru_cache(maxsize=4096)
def _tight_cached(guarantee: Guarantee, answers: int) -> float:
    return _calibrate(guarantee, answers)


def composed_epsilon(guarantee: Guarantee, multiplier: float, answers: int) -> float:
    """The guarantee's accountant's ε at its δ after ``answers`` answers of multiplier z (its ε, the
    target, sets the PLD grid; the calibration measures with this very function)."""
    import dp_accounting

    g = guarantee
    fresh = _fresh_accountant(g.accountant, g.mechanism, g.epsilon)
    fresh.compose(dp_accounting.SelfComposedDpEvent(_event(g.mechanism, multiplier), answers))
    return float(fresh.get_epsilon(g.delta))


def _event(mechanism: str, multiplier: float):
    import dp_accounting

    kind = dp_accounting.LaplaceDpEvent if mechanism == "laplace" else dp_accounting.GaussianDpEvent
    return kind(multiplier)


def _fresh_accountant(accountant: str, mechanism: str, epsilon: float):
    if accountant == "rdp":
        from dp_accounting.rdp import RdpAccountant

        return RdpAccountant()
    from dp_accounting.pld import PLDAccountant

    return PLDAccountant(value_discretization_interval=pld_resolution(mechanism, epsilon))


def pld_resolution(mechanism: str, epsilon: float) -> float:
    """The PLD grid step for a target ε (see :data:`PLD_RESOLUTION`)."""
    return PLD_RESOLUTION[mechanism] * epsilon


def _calibrate(guarantee: Guarantee, answers: int) -> float:
    """The smallest z (to :data:`TOLERANCE`) whose m-fold composition has ε ≤ target at δ."""
    import dp_accounting

    g = guarantee
    target = g.epsilon * (1.0 - MARGIN)

    def gap(log_z: float) -> float:
        return composed_epsilon(g, math.exp(log_z), answers) - target

    what = (g, answers)
    lo, hi = _bracket(gap, _guess(g, answers), math.log(answers / g.epsilon), what)
    log_z = dp_accounting.calibrate_dp_mechanism(
        lambda: _Remembered(g),
        lambda u: dp_accounting.SelfComposedDpEvent(_event(g.mechanism, math.exp(u)), answers),
        target, g.delta, dp_accounting.ExplicitBracketInterval(lo, hi), tol=TOLERANCE)
    return math.exp(log_z)


def check_reachable(guarantee: Guarantee, answers: int) -> None:
    """The error :func:`calibration` would raise for m answers at this guarantee, if any, in
    microseconds where it can: basic composition reaching (ε, δ) (always, for Laplace answers) shows
    that some valid noise does, whatever the tighter accountant says."""
    try:
        _basic(guarantee, answers)
        return
    except DeltaError:
        pass  # basic cannot: the guarantee's own accountant decides, below
    calibration(guarantee, answers)


class _Remembered:
    """A fresh accountant for ``calibrate_dp_mechanism`` that answers through :func:`composed_epsilon`
    (the same accountant, cached), so that the bracket's two evaluations are not computed again."""

    def __init__(self, guarantee: Guarantee) -> None:
        import dp_accounting

        self.guarantee = guarantee
        self.ledger, self.event = dp_accounting.NoOpDpEvent(), None

    def compose(self, event) -> _Remembered:
        self.event = event  # SelfComposedDpEvent(Laplace or Gaussian event of multiplier z, m)
        return self

    def get_epsilon(self, delta: float) -> float:
        event = self.event
        at = replace(self.guarantee, delta=delta)
        return composed_epsilon(at, event.event.noise_multiplier, event.count)


def _guess(guarantee: Guarantee, answers: int) -> tuple[float, float, float]:
    """Where the search starts: (log z, half-width of the first bracket, the step it widens by).

    PLD, Gaussian answers: just above the exact analytic noise (:func:`_exact_gaussian`). PLD, Laplace
    answers: the forecast's table of this (m, δ) (:class:`MultiplierTable`, within 2·10⁻⁴ of the result:
    its two nodes are PLD evaluations the market's forecast shares), or, where the table's RDP start
    cannot reach (ε, δ), the RDP answer (a few per cent above: RDP is the looser accountant). Else
    basic Laplace's m/ε, within a factor √2. Each guess is a function of (the guarantee, m) alone, so
    the calibration does not depend on what was computed before it.
    """
    mechanism, accountant, epsilon, delta = (guarantee.mechanism, guarantee.accountant, guarantee.epsilon,
                                             guarantee.delta)
    coarse = math.log(4.0)
    if accountant == "pld" and mechanism == "gaussian":
        exact = _exact_gaussian(answers, epsilon * (1.0 - MARGIN), delta)
        if exact is not None:
            return exact + 1e-3, 1e-3, 8e-3  # [1, 1.002] × the exact noise
    if accountant == "pld":
        try:
            rdp = math.log(_tight(replace(guarantee, accountant="rdp"), answers))
        except CalibrationError:  # RDP cannot reach every (ε, δ) that PLD can: start from m/ε instead
            return math.log(answers / epsilon), coarse / 8, coarse
        try:  # the table starts from the RDP answer just computed: no search for this very z
            table = multiplier_table(mechanism, "pld", answers, delta).multiplier(epsilon)
            return math.log(table), 3e-4, 3e-3
        except CalibrationError:
            return rdp - 0.07, 0.08, coarse  # [0.86, 1.01] × the RDP noise
    return math.log(answers / epsilon), coarse / 8, coarse


def _exact_gaussian(answers: int, epsilon: float, delta: float) -> float | None:
    """log z of the least Gaussian noise for (ε, δ) over m answers, or None where the library's search
    fails: m answers of multiplier z are one of z/√m, whose exact σ dp-accounting computes (the
    analytic Gaussian mechanism). The PLD accountant discretises that same distribution pessimistically,
    so its z lies just above (measured 1.00009 times at ε = 1–10, δ = 10⁻⁶, m = 23–1,000)."""
    from dp_accounting import get_sigma_gaussian

    try:
        sigma = float(get_sigma_gaussian(epsilon, delta))
    except (ValueError, RuntimeError, OverflowError):  # brentq's failures at extreme (ε, δ)
        return None
    return math.log(sigma * math.sqrt(answers)) if math.isfinite(sigma) and sigma > 0 else None


def _bracket(gap, guess: tuple[float, float, float], reference: float,
             what: tuple) -> tuple[float, float]:
    """(lo, hi) in log z with gap(lo) > 0 ≥ gap(hi), widened from the guess's (start, width) by its
    step (at most a factor 4 at a time) within :data:`SEARCH_RANGE` of the reference; a
    CalibrationError when the range holds no such pair."""
    (start, width, step), limit = guess, math.log(SEARCH_RANGE)
    lo, hi = start - width, start + width
    while gap(hi) > 0:
        lo, hi = hi, hi + step
        step = min(4.0 * step, math.log(4.0))
        if hi > reference + limit:
            raise CalibrationError(_unreachable(*what, why="more noise than the search allows (z up to "
                                                f"{math.exp(reference + limit):.3g})"))
    while gap(lo) <= 0:
        hi, lo = lo, lo - step
        step = min(4.0 * step, math.log(4.0))
        if lo < reference - limit:
            raise CalibrationError(_unreachable(*what, why="less noise than the search allows (z down to "
                                                f"{math.exp(reference - limit):.3g})"))
    return lo, hi


def _unreachable(guarantee: Guarantee, answers: int, why: str) -> str:
    g = guarantee
    return (f"no {g.mechanism} noise makes {answers} answers compose to (ε, δ) = "
            f"({g.epsilon:g}, {g.delta:g}) under the {g.accountant!r} accountant: it would need {why}")


class EpsilonCurve:
    """ε at δ after j = 1, 2, … answers of multiplier z, computed lazily as answers are given and
    shared by the owners with the same parameters.

    RDP: j times one answer's Rényi divergences, exactly what the accountant holds after composing
    the j answers. PLD, Laplace answers: the accountant's distribution convolved once more per answer
    (a self-composition from scratch at every j would cost ten times more). PLD, Gaussian answers:
    j answers of multiplier z are exactly one of z/√j (the accountant's own first step), whose ε at δ
    dp-accounting gives exactly (``get_epsilon_gaussian``, the analytic Gaussian mechanism) — the value
    the PLD's discretised distribution bounds from above (by 10⁻⁴ relative or less), in a third of the
    time of building that distribution for every j (it was 85 ms per curve on ny_hospitals).
    """

    def __init__(self, guarantee: Guarantee, multiplier: float) -> None:
        g = guarantee  # its ε is the target the noise was calibrated to (it sets the PLD grid)
        self.mechanism, self.accountant, self.multiplier = g.mechanism, g.accountant, multiplier
        self.delta, self.epsilon = g.delta, g.epsilon
        self.values: list[float] = []
        self._state = None  # RDP: (orders, one answer's RDP); PLD: (one answer's PLD, the composed one)

    def after(self, answers: int) -> float:
        """ε after ``answers`` answers (0 for none)."""
        while len(self.values) < answers:
            self.values.append(self._next())
        return self.values[answers - 1] if answers > 0 else 0.0

    def _next(self) -> float:
        with quiet():
            return self._compose_one_more()

    def _compose_one_more(self) -> float:
        """ε after one answer more than :attr:`values` holds."""
        j = len(self.values) + 1
        if self.accountant == "rdp":
            from dp_accounting.rdp import rdp_privacy_accountant as rdp

            if self._state is None:
                one = _fresh_accountant("rdp", self.mechanism, self.epsilon)
                one.compose(_event(self.mechanism, self.multiplier))
                self._state = (one.orders, one.rdp)
            orders, single = self._state
            return float(rdp.compute_epsilon(orders, j * single, self.delta)[0])  # as SelfComposed(j)
        if self.mechanism == "gaussian":
            from dp_accounting import get_epsilon_gaussian

            return float(get_epsilon_gaussian(self.multiplier / math.sqrt(j), self.delta))
        if self._state is None:
            single = self._single_pld()
            self._state = (single, single)
        else:
            single, composed = self._state
            self._state = (single, composed.compose(single))
        return float(self._state[1].get_epsilon_for_delta(self.delta))

    def _single_pld(self):
        """One Laplace answer's privacy-loss distribution, built as dp-accounting's PLDAccountant
        builds it."""
        from dp_accounting.pld import privacy_loss_distribution as pld

        step = pld_resolution("laplace", self.epsilon)
        return pld.from_laplace_mechanism(parameter=self.multiplier, value_discretization_interval=step)


@functools.lru_cache(maxsize=256)
def epsilon_curve(guarantee: Guarantee, multiplier: float) -> EpsilonCurve:
    """The shared :class:`EpsilonCurve` of these parameters."""
    return EpsilonCurve(guarantee, multiplier)


NODES_PER_DECADE = 32  # of the forecast's z grid: log z interpolated in log ε is within 10⁻⁴ of exact


class MultiplierTable:
    """z(ε) for fixed (mechanism, accountant, m, δ), for the market's forecast, which asks for the
    noise at thousands of budgets (a procurement's coalitions, a Stackelberg price search).

    Nodes z_k = 10^(k/32) cost one accountant evaluation each (ε(z_k), no search) and are computed
    as needed and kept; between two nodes log z is linear in log ε. The owners themselves always use
    the exact calibration of :func:`noise_multiplier`, which the table matches to about 10⁻⁴ (and
    whose search for PLD's Laplace answers starts from it). PLD's Gaussian nodes are the analytic
    Gaussian's ε (m answers of z are one of z/√m), which PLD's grid bounds from above by ≤ 10⁻⁴.
    """

    def __init__(self, mechanism: str, accountant: str, answers: int, delta: float) -> None:
        self.mechanism, self.accountant, self.answers, self.delta = mechanism, accountant, answers, delta
        self.nodes: dict[int, float] = {}  # k → log ε(z_k)

    def log_epsilon(self, k: int) -> float:
        """log ε of the node z_k (computed once)."""
        if k not in self.nodes:
            z = 10.0 ** (k / NODES_PER_DECADE)
            epsilon = self._epsilon(z)
            if not epsilon > 0:  # δ so close to 1 that m answers of any noise are (0, δ)-DP
                raise DeltaError(f"at δ = {self.delta:g} every noise level is (0, δ)-DP: the guarantee "
                                 "says nothing (take δ well below 1/n_i)")
            self.nodes[k] = math.log(epsilon)
        return self.nodes[k]

    def _epsilon(self, z: float) -> float:
        """ε at δ of m answers of multiplier z: the least that a valid accountant proves (the
        table's, basic composition's, or under PLD RDP's), as :func:`calibration` chooses the owners'
        noise."""
        with quiet():
            basic = self._basic_epsilon(z)
            if self.accountant == "basic":
                return basic
            found = [basic]
            for proof in [self._tight_epsilon] + ([self._rdp_epsilon] if self.accountant == "pld" else []):
                try:
                    found.append(proof(z))
                except LIBRARY_FAILURES:  # its numerics give up at this δ: the others' proofs stand
                    continue
        return min(e for e in found if not math.isnan(e))

    def _basic_epsilon(self, z: float) -> float:
        """Basic composition's ε of m answers of z: m/z for Laplace, m shares of δ/m each for the
        Gaussian (exact per answer; in 80 digits where δ/m is not a normal double, :func:`delta_share`)."""
        m, delta = self.answers, self.delta
        if self.mechanism == "laplace":
            return m / z
        share = delta_share(delta, m)
        if not isinstance(share, float):
            return m * _gaussian_epsilon(z, share)
        from dp_accounting import get_epsilon_gaussian

        try:
            return m * float(get_epsilon_gaussian(z, delta / m))
        except LIBRARY_FAILURES:
            return math.inf

    def _rdp_epsilon(self, z: float) -> float:
        """RDP's ε of m answers of z (asked too under PLD, which is looser at δ ≤ 10⁻³⁰)."""
        return composed_epsilon(Guarantee(self.mechanism, "rdp", 1.0, self.delta), z, self.answers)

    def _tight_epsilon(self, z: float) -> float:
        """The table's own accountant's ε (RDP or PLD) of m answers of z."""
        m, delta = self.answers, self.delta
        if self.accountant == "rdp":
            return composed_epsilon(Guarantee(self.mechanism, "rdp", 1.0, delta), z, m)
        if self.mechanism == "gaussian":  # exactly one answer of z/√m: the analytic ε, which PLD's
            from dp_accounting import get_epsilon_gaussian  # grid bounds from above (by ≤ 10⁻⁴)

            return float(get_epsilon_gaussian(z / math.sqrt(m), delta))
        scale = composed_epsilon(Guarantee(self.mechanism, "rdp", 1.0, delta), z, m)  # ≈ PLD's ε: its grid
        if not (math.isfinite(scale) and scale > 0):
            return math.inf
        return composed_epsilon(Guarantee(self.mechanism, "pld", scale, delta), z, m)

    def multiplier(self, epsilon: float) -> float:
        """z at ``epsilon``, interpolated between the two nodes whose ε bracket it."""
        target = math.log(epsilon)
        k = self._start(epsilon, target)
        limit = NODES_PER_DECADE * (math.log10(self.answers / epsilon) + math.log10(SEARCH_RANGE))
        while self.log_epsilon(k) < target:  # ε falls as z grows: walk down to ε(z_k) ≥ ε …
            k -= 1
            self._check(abs(k) <= limit, epsilon)
        while self.log_epsilon(k + 1) >= target:  # … and up to ε(z_{k+1}) < ε
            k += 1
            self._check(abs(k) <= limit, epsilon)
        hi, lo = self.log_epsilon(k), self.log_epsilon(k + 1)
        return 10.0 ** ((k + (hi - target) / (hi - lo)) / NODES_PER_DECADE)

    def _start(self, epsilon: float, target: float) -> int:
        """Where the walk starts: a known node within a few of the target, or else the calibration, by
        the RDP accountant for PLD (microseconds, and a node or two away)."""
        nearest = min(self.nodes, key=lambda k: abs(self.nodes[k] - target), default=None)
        if nearest is not None and abs(self.nodes[nearest] - target) < 0.2:  # a few nodes away
            return nearest
        guess = "rdp" if self.accountant == "pld" else self.accountant
        try:
            z = noise_multiplier(self._at(epsilon, guess), self.answers)
        except CalibrationError:  # RDP cannot reach every (ε, δ) that PLD can
            z = noise_multiplier(self._at(epsilon), self.answers)
        return math.floor(NODES_PER_DECADE * math.log10(z))

    def _check(self, within: bool, epsilon: float) -> None:
        if not within:
            raise CalibrationError(_unreachable(self._at(epsilon), self.answers,
                                                why="a noise level outside the search range"))

    def _at(self, epsilon: float, accountant: str | None = None) -> Guarantee:
        """The guarantee of this table's answers at ``epsilon`` (under another ``accountant``)."""
        return Guarantee(self.mechanism, accountant or self.accountant, epsilon, self.delta)


@functools.lru_cache(maxsize=256)
def multiplier_table(mechanism: str, accountant: str, answers: int, delta: float) -> MultiplierTable:
    """The shared :class:`MultiplierTable` of these parameters."""
    return MultiplierTable(mechanism, accountant, answers, delta)


def proved_epsilon(guarantee: Guarantee, multiplier: float, answers: int) -> float:
    """The least ε at the guarantee's δ that a valid accountant proves for ``answers`` answers of noise
    multiplier z — basic composition's, the guarantee's accountant's, under PLD also RDP's — as
    :func:`calibration` chooses: what an owner with that noise leaks (an audit's leakier owners)."""
    g = guarantee
    return multiplier_table(g.mechanism, g.accountant, int(answers), g.delta)._epsilon(multiplier)


def multipliers(mechanism: str, accountant: str, answers, epsilons, deltas):
    """z for arrays of (m, ε, δ) (broadcast together) from the shared tables: the forecast's noise."""
    import numpy as np

    m, eps, delta = np.broadcast_arrays(np.asarray(answers, dtype=float), np.asarray(epsilons, dtype=float),
                                        np.asarray(deltas, dtype=float))
    keys = np.stack([m.ravel(), eps.ravel(), delta.ravel()], axis=1)
    unique, inverse = np.unique(keys, axis=0, return_inverse=True)
    values = np.array([multiplier_table(mechanism, accountant, int(a), float(d)).multiplier(float(e))
                       for a, e, d in unique])
    return values[np.ravel(inverse)].reshape(m.shape)
