"""What an attack's success proves about ε: lower bounds from error rates, with exact confidence.

An (ε, δ)-DP mechanism limits every test that tells two neighbouring datasets D₀, D₁ apart from its
output: its false-positive rate α (saying D₁ under D₀) and false-negative rate β satisfy

    α + e^ε β ≥ 1 − δ   and   β + e^ε α ≥ 1 − δ

(Wasserman & Zhou 2010; Kairouz, Oh & Viswanath 2015). So an attack's measured error rates bound ε
from below. With exact Clopper–Pearson upper confidence bounds ᾱ, β̄ on the two rates, each at level
γ/2 (a union bound over the two), ε ≥ max(log((1 − δ − ᾱ)/β̄), log((1 − δ − β̄)/ᾱ)) holds with
probability at least 1 − γ over the runs (Jagielski, Ullman & Oprea 2020; Nasr et al. 2021). The test's
threshold is chosen on one half of the runs and the rates are counted on the other, so the choice costs
no confidence.

The audit "by one run" (Steinke, Nasr & Jagielski 2023) instead includes each of m canaries
independently with probability ½ and counts the attack's correct guesses among r: under (ε, δ)-DP,
P[W ≥ v] ≤ P[Binomial(r, e^ε/(1 + e^ε)) ≥ v] + 2mδ·max_i P[v > Binomial(r, ·) ≥ v − i]/i (their
Theorem 3.3 and Appendix D), which :func:`one_run_epsilon` inverts.

**What the runs could detect.** A lower bound at or below the claim proves nothing either way unless
the runs could have shown a violation had there been one. The audit replays its adversary on the same
runs' schedules and query points as if the owner answered with its claimed mechanism and its noise
divided by a leak factor c (an owner c times leakier than it claims), for c on the grid :data:`LEAKS`,
and asks at which c the same test proves more than the claim (:func:`first_detected`). The least such c,
as an ε through the accountant, is the smallest violation these runs detect; the verdict is a pass only
when that is within :data:`PASS_FACTOR` of the claim.

Pure functions of counts and scores (numpy and scipy.stats): the audit itself, which runs the protocol
and scores what the adversary sees, is :mod:`dpmarket.runs.audit`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# Scores are rounded to this fraction of their largest magnitude before they are compared: the
# likelihood ratio of Laplace answers takes a few values exactly (its atoms), which rounding in the
# ninth digit would otherwise order at random.
SCORE_GRID = 1e-9
# The leak factors the runs are replayed at (the owner's noise divided by each): 2^(k/4) from 1 to 256,
# steps of 19 %. A violation beyond 256 times the noise is reported as undetectable by these runs.
LEAKS = 2.0 ** (np.arange(33) / 4.0)
# A pass needs the runs to detect an owner leaking at most this many times its claimed ε: the smallest of
# the implementation errors the tests plant (noise halved, a sensitivity off by 2) leaks twice its claim.
PASS_FACTOR = 2.0


def upper_bound(count: int, trials: int, level: float) -> float:
    """The exact (Clopper–Pearson) one-sided upper confidence bound on a binomial rate: the p with
    P[Binomial(trials, p) ≤ count] = ``level`` (1 when every trial counted)."""
    from scipy import stats  # deferred: only audits need scipy.stats

    if trials <= 0:
        return 1.0
    if count >= trials:
        return 1.0
    return float(stats.beta.ppf(1.0 - level, count + 1, trials - count))


def epsilon_from_rates(false_positive: float, false_negative: float, delta: float) -> float:
    """The least ε that (ε, δ)-DP allows with these error rates: max(log((1 − δ − α)/β),
    log((1 − δ − β)/α)), 0 when neither is positive."""
    best = 0.0
    for a, b in ((false_positive, false_negative), (false_negative, false_positive)):
        top = 1.0 - delta - a
        if top > 0 and b < top:
            best = max(best, math.inf if b <= 0 else math.log(top / b))
    return best


@dataclass(frozen=True)
class ErrorRates:
    """A test "say D₁ when the score ≥ ``threshold``" counted on runs of both worlds, and the ε it proves."""

    threshold: float
    false_positives: int  # runs of D₀ said D₁
    negatives: int  # runs of D₀
    false_negatives: int  # runs of D₁ said D₀
    positives: int  # runs of D₁
    level: float  # γ: the bound holds with probability ≥ 1 − γ
    delta: float

    @property
    def false_positive_rate(self) -> float:
        return self.false_positives / max(1, self.negatives)

    @property
    def false_negative_rate(self) -> float:
        return self.false_negatives / max(1, self.positives)

    @property
    def false_positive_upper(self) -> float:
        """ᾱ: exact upper confidence bound at level γ/2."""
        return upper_bound(self.false_positives, self.negatives, self.level / 2)

    @property
    def false_negative_upper(self) -> float:
        """β̄: exact upper confidence bound at level γ/2."""
        return upper_bound(self.false_negatives, self.positives, self.level / 2)

    @property
    def epsilon_lower(self) -> float:
        """ε proved with probability ≥ 1 − γ: from the rates' upper confidence bounds."""
        return epsilon_from_rates(self.false_positive_upper, self.false_negative_upper, self.delta)

    @property
    def epsilon_estimate(self) -> float:
        """ε from the measured rates themselves (no confidence: what the sample shows), each rate taken
        as (count + ½)/(runs + 1) so that a count of 0 does not read as an infinite ε."""
        return epsilon_from_rates((self.false_positives + 0.5) / (self.negatives + 1),
                                  (self.false_negatives + 0.5) / (self.positives + 1), self.delta)


def rounded(scores: np.ndarray, scale: float) -> np.ndarray:
    """Scores on a grid of :data:`SCORE_GRID` times ``scale`` (their largest possible magnitude)."""
    step = SCORE_GRID * scale if scale > 0 else 0.0
    return np.asarray(scores, dtype=float) if step == 0 else np.round(np.asarray(scores) / step) * step


def rates_at(world0: np.ndarray, world1: np.ndarray, threshold: float, level: float,
             delta: float) -> ErrorRates:
    """The error rates of "say D₁ when score ≥ ``threshold``" on these runs' scores."""
    return ErrorRates(float(threshold), int(np.sum(world0 >= threshold)), len(world0),
                      int(np.sum(world1 < threshold)), len(world1), level, delta)


def split_rates(world0: np.ndarray, world1: np.ndarray, calibration: int, level: float,
                delta: float) -> ErrorRates:
    """The audit's test on these scores: its threshold chosen on the first ``calibration`` runs of each
    world (:func:`best_threshold`), its error rates counted on the others (:func:`rates_at`)."""
    threshold = best_threshold(world0[:calibration], world1[:calibration], level, delta)
    return rates_at(world0[calibration:], world1[calibration:], threshold, level, delta)


def first_detected(proves, claimed: float) -> int | None:
    """The index of the first leak factor of :data:`LEAKS` at which ``proves(k)`` (the ε lower bound the
    runs replayed at factor k prove) exceeds ``claimed``; None if none does. The factors are tried in
    order from the smallest, so that the answer is the least on the grid."""
    for k in range(len(LEAKS)):
        if proves(k) > claimed:
            return k
    return None


def best_threshold(world0: np.ndarray, world1: np.ndarray, level: float, delta: float) -> float:
    """The threshold at which these runs' scores prove the largest ε (every distinct score tried; the
    smallest of equals): chosen on runs that the bound is then not counted on."""
    candidates = np.unique(np.concatenate([world0, world1]))
    if not len(candidates):
        return 0.0
    s0, s1 = np.sort(world0), np.sort(world1)
    fp = len(s0) - np.searchsorted(s0, candidates, side="left")  # scores ≥ t among D₀'s runs
    fn = np.searchsorted(s1, candidates, side="left")  # scores < t among D₁'s runs
    proved = _epsilons(uppers(fp, len(s0), level / 2), uppers(fn, len(s1), level / 2), delta)
    return float(candidates[int(np.argmax(proved))])


def uppers(counts: np.ndarray, trials: int, level: float) -> np.ndarray:
    """:func:`upper_bound` of many counts out of the same ``trials`` at once."""
    from scipy import stats  # deferred: only audits need scipy.stats

    counts = np.asarray(counts)
    inside = counts < trials
    out = np.ones(len(counts))
    out[inside] = stats.beta.ppf(1.0 - level, counts[inside] + 1, trials - counts[inside])
    return out


def _epsilons(false_positive: np.ndarray, false_negative: np.ndarray, delta: float) -> np.ndarray:
    """:func:`epsilon_from_rates` elementwise."""
    with np.errstate(divide="ignore", invalid="ignore"):
        one = np.where((1.0 - delta - false_positive > false_negative),
                       np.log((1.0 - delta - false_positive) / false_negative), 0.0)
        two = np.where((1.0 - delta - false_negative > false_positive),
                       np.log((1.0 - delta - false_negative) / false_positive), 0.0)
    return np.maximum(np.maximum(one, two), 0.0)


def roc(world0: np.ndarray, world1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(false-positive rates, true-positive rates) of "say D₁ when score ≥ t" over every threshold,
    from (0, 0) to (1, 1)."""
    candidates = np.unique(np.concatenate([world0, world1, [np.inf]]))[::-1]
    s0, s1 = np.sort(world0), np.sort(world1)
    fpr = (len(s0) - np.searchsorted(s0, candidates, side="left")) / max(1, len(s0))
    tpr = (len(s1) - np.searchsorted(s1, candidates, side="left")) / max(1, len(s1))
    return np.concatenate([fpr, [1.0]]), np.concatenate([tpr, [1.0]])


def claimed_frontier(false_positive: np.ndarray, epsilon: float, delta: float) -> np.ndarray:
    """The largest true-positive rate any test may reach at these false-positive rates under
    (ε, δ)-DP: min(1, e^ε α + δ, 1 − e^−ε (1 − δ − α))."""
    a = np.asarray(false_positive, dtype=float)
    with np.errstate(over="ignore"):
        first = np.exp(epsilon) * a + delta
    second = 1.0 - np.exp(-epsilon) * (1.0 - delta - a)
    return np.clip(np.minimum(first, second), 0.0, 1.0)


# --- the audit by one run (Steinke, Nasr & Jagielski 2023) --------------------------------------

def one_run_p_value(canaries: int, guesses: int, correct: int, epsilon: float, delta: float) -> float:
    """P[at least ``correct`` of ``guesses`` guesses right] under (ε, δ)-DP with ``canaries`` canaries
    each included independently with probability ½ (their Theorem 3.3, Appendix D)."""
    from scipy import stats  # deferred: only audits need scipy.stats

    if not 0 <= correct <= guesses <= canaries:
        raise ValueError(f"need 0 ≤ correct ≤ guesses ≤ canaries, got {correct}, {guesses}, {canaries}")
    q = 1.0 / (1.0 + math.exp(-epsilon))  # the accuracy of ε-DP randomised response
    tail = float(stats.binom.sf(correct - 1, guesses, q))
    if delta == 0 or correct == 0:
        return min(1.0, tail)
    below = stats.binom.pmf(correct - np.arange(1, correct + 1), guesses, q)  # P[B = v − i], i = 1…v
    worst = float(np.max(np.cumsum(below) / np.arange(1, correct + 1)))
    return min(1.0, tail + worst * delta * 2 * canaries)


def one_run_epsilon(canaries: int, guesses: int, correct: int, delta: float, level: float) -> float:
    """The largest ε whose p-value for these guesses is below ``level``: proved with probability
    ≥ 1 − level (bisection to 10⁻⁶; 0 when no ε is rejected)."""
    if one_run_p_value(canaries, guesses, correct, 0.0, delta) >= level:
        return 0.0
    lo, hi = 0.0, 1.0
    while one_run_p_value(canaries, guesses, correct, hi, delta) < level:
        lo, hi = hi, 2.0 * hi
        if hi > 1e3:
            return math.inf
    while hi - lo > 1e-6:
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if one_run_p_value(canaries, guesses, correct, mid, delta) < level else (lo, mid)
    return lo
