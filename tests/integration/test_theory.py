"""The papers' central result: with equal budgets, ψ falls as ε⁻² and as n⁻² where noise dominates.

Theorem 2 of paper 003 bounds E ψ(θ_L,T) by c₁/n·sqrt(Σε_i⁻²) + c₂/n²·Σε_i⁻², and the papers'
figures show slope −2 on log-log axes. For squared loss with the box inactive, Algorithm 1 is
linear in the noise, so θ_L,T = θ_L,T(∞) + D/(εn) up to the data term, and the noise part of
E ψ is exactly proportional to b² ∝ (nε)⁻²; the slope is −2 once the noise-free error (the
"bias") is negligible. These tests check that regime first, then the slope, with a tolerance of
5 bootstrap standard errors plus the largest slope shift the measured bias could cause.

Replications share seeds across the grid (common random numbers: the same owners are asked
in the same order, with the same standard Laplace draws scaled by each b_i), which is what
makes a few dozen replications enough.
"""

from __future__ import annotations

import numpy as np
import pytest

from dpmarket import rng as streams
from dpmarket.data import build_consortium
from dpmarket.learning.objective import Objective, make_loss
from dpmarket.privacy import owners as owners_module
from dpmarket.privacy.cohort import build_owners
from dpmarket.scenario.loading import validate
from dpmarket.schedule.events import EventLog
from dpmarket.schedule.protocol import Training, make_learner, run_uniform

REPLICATIONS = 24
SEEDS = range(100, 100 + REPLICATIONS)


def _table(epsilon: float, records: int) -> dict:
    return {
        "name": "slope", "data": {"kind": "interest_rate", "owners": 3, "records": int(records),
                                  "features": 4, "seed": 1},
        "privacy": {"epsilon": epsilon, "preset": "paper"},  # Theorem 1's noise: linear in 1/(εn)
        "learner": {"iterations": 1000, "rho": 3.0},
    }


def final_psis(table: dict, seeds, linear: bool = True) -> np.ndarray:
    """ψ(θ_L,T) of Algorithm 1 for each seed; the data stay fixed (data.seed), the rest varies.

    With ``linear`` the box Θ must never bind (the regime where the slope is exactly −2).
    """
    scenario = validate(table, "test")
    consortium = build_consortium(scenario)
    m, lr = scenario.model, scenario.learner
    objective = Objective(make_loss(m.loss), consortium.owners, m.regularization, m.theta_max)
    out = []
    for seed in seeds:
        run = scenario.model_copy(update={"seed": seed})
        owners = build_owners(run, consortium, objective)
        learner = make_learner("async", consortium.sizes, objective.p, lr.iterations, lr.rho,
                               lam=m.regularization, theta_max=m.theta_max, theta_l_step="printed",
                               weighting="none")
        training = Training(learner, owners, objective, EventLog(None), np.array([lr.iterations]))
        run_uniform(training, lr.iterations, streams.stream(seed, "selection"),
                    streams.stream(seed, "clocks"))
        if linear:
            assert np.max(np.abs(learner.theta)) < m.theta_max, "box active: linear regime left"
        out.append(training.metrics.psi[-1])
    return np.array(out)


def loglog_slope(x: np.ndarray, psis: np.ndarray, boot: int = 400) -> tuple[float, float]:
    """Least-squares slope of log mean ψ against log x, and its bootstrap standard error.

    ``psis`` has one row per grid value and one column per replication; the bootstrap resamples
    replications (columns) jointly, keeping the common-random-number pairing across the grid.
    """
    lx = np.log(x)

    def slope(cols: np.ndarray) -> float:
        return float(np.polyfit(lx, np.log(psis[:, cols].mean(axis=1)), 1)[0])

    gen = np.random.default_rng(7)
    reps = psis.shape[1]
    draws = [slope(gen.integers(0, reps, reps)) for _ in range(boot)]
    return slope(np.arange(reps)), float(np.std(draws, ddof=1))


def slope_is(target: float, x: np.ndarray, psis: np.ndarray, bias: float) -> tuple[bool, str]:
    """Whether the fitted slope is within 5 SE (plus the bias allowance) of ``target``.

    A bias β added to a term C x⁻² changes d log ψ/d log x by at most 2β/ψ_min (relative
    size of the bias at the smallest ψ on the grid); that is the allowance.
    """
    fitted, se = loglog_slope(x, psis)
    allowance = 2.0 * bias / psis.mean(axis=1).min()
    ok = abs(fitted - target) <= 5.0 * se + allowance
    return ok, f"slope {fitted:.4f} ± {se:.4f} (allowance {allowance:.4f}) vs {target}"


def _check_noise_dominates(bias: float, psis: np.ndarray) -> None:
    # The regime the papers' slope refers to: noise-free error under 1% of every noisy ψ.
    assert bias < 0.01 * psis.mean(axis=1).min(), (bias, psis.mean(axis=1))


EPSILONS = np.array([25.0, 50.0, 100.0, 200.0])
RECORDS = np.array([5_000, 10_000, 20_000, 40_000])


@pytest.fixture(scope="module")
def bias_eps() -> float:
    return float(final_psis(_table(1e12, 20_000), SEEDS[:4]).mean())


def test_psi_falls_as_epsilon_to_minus_two(bias_eps):
    psis = np.array([final_psis(_table(e, 20_000), SEEDS) for e in EPSILONS])
    _check_noise_dominates(bias_eps, psis)
    ok, text = slope_is(-2.0, EPSILONS, psis, bias_eps)
    print(text)
    assert ok, text


def test_epsilon_slope_check_rejects_a_wrong_noise_scale(monkeypatch, bias_eps):
    """Noise scaled by 1/sqrt(ε) instead of 1/ε (a plausible bug) must fail the same check."""
    def wrong(xi, answers, n_records, epsilon):
        return 2.0 * xi * answers / (n_records * np.sqrt(epsilon))

    monkeypatch.setattr(owners_module, "laplace_scale", wrong)
    psis = np.array([final_psis(_table(e, 20_000), SEEDS, linear=False) for e in EPSILONS])
    ok, text = slope_is(-2.0, EPSILONS, psis, bias_eps)
    print(text)
    assert not ok, text


def test_psi_falls_as_records_to_minus_two():
    psis = np.array([final_psis(_table(100.0, n), SEEDS) for n in RECORDS])
    bias = max(float(final_psis(_table(1e12, n), SEEDS[:4]).mean()) for n in RECORDS)
    _check_noise_dominates(bias, psis)
    ok, text = slope_is(-2.0, RECORDS, psis, bias)
    print(text)
    assert ok, text


def test_records_slope_check_rejects_noise_that_ignores_n(monkeypatch):
    """Noise sized for a fixed n (the sensitivity not shrinking with the dataset) must fail."""
    def wrong(xi, answers, n_records, epsilon):
        return 2.0 * xi * answers / (20_000 * epsilon)

    monkeypatch.setattr(owners_module, "laplace_scale", wrong)
    psis = np.array([final_psis(_table(100.0, n), SEEDS, linear=False) for n in RECORDS])
    ok, text = slope_is(-2.0, RECORDS, psis, 0.0)
    print(text)
    assert not ok, text
