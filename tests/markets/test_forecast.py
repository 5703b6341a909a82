"""The forecast (dpmarket/markets/forecast.py): its formula, and its calibration on pilots (recovering
known constants, a floor among them) and through the box's saturation."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import copies_chain

from dpmarket.markets.forecast import Forecast, calibrate, quasi_nnls, saturated


def test_forecast_falls_as_epsilon_and_n_to_minus_two_without_c1():
    f = Forecast(0.0, 2.1e9)
    eps = np.full(3, 2.0)
    assert f.psi(eps / 2, 750_000) == pytest.approx(4 * f.psi(eps, 750_000))
    assert f.psi(eps, 375_000) == pytest.approx(4 * f.psi(eps, 750_000))
    # the papers' lending constants: c̄'₂ = 2.1e9 at ε = 1, n = 3 × 250,000
    assert f.psi(np.ones(3), 750_000) == pytest.approx(2.1e9 * 3 / 750_000**2)


def pilots(c1: float, c2: float, noise: float, count: int = 60, seed: int = 0):
    gen = np.random.default_rng(seed)
    eps = [np.full(int(gen.integers(2, 8)), float(e)) for e in np.exp(gen.uniform(-1, 3, count))]
    n = list(np.exp(gen.uniform(np.log(1e4), np.log(1e6), count)))
    truth = [Forecast(c1, c2).psi(e, m) for e, m in zip(eps, n, strict=True)]
    observed = [t * np.exp(noise * gen.standard_normal()) for t in truth]
    return eps, n, observed


def test_calibration_recovers_known_constants():
    """60 pilots with 10% log-normal noise: constants within 5 SE, where SE ≈ noise/√points."""
    c1, c2 = 30.0, 4e8
    fit = calibrate(*pilots(c1, c2, noise=0.1))
    tolerance = 5 * 0.1 / np.sqrt(60) * 3  # relative; ×3 for the correlation of the two terms
    assert fit.c1 == pytest.approx(c1, rel=tolerance) and fit.c2 == pytest.approx(c2, rel=tolerance)
    assert fit.r2 > 0.99 and fit.rms_relative_error < 0.2 and fit.points == 60
    assert Forecast.from_dict(fit.to_dict()) == fit


def test_a_model_missing_a_term_fits_clearly_worse():
    data = pilots(300.0, 4e8, noise=0.05)
    full, c2_only = calibrate(*data), calibrate(*data, terms=("c2",))
    assert c2_only.c1 == 0.0
    assert c2_only.rms_relative_error > 3 * full.rms_relative_error
    assert c2_only.r2 < full.r2


# --- the market pilots' estimator -----------------------------------------------------------------

def noisy_pilot_means(truth: np.ndarray, spread: float, runs: int, gen: np.random.Generator) -> np.ndarray:
    """Means of ``runs`` simulated ψ per pilot: ψ = truth × Gamma noise of mean 1 and relative SD
    ``spread`` (ψ is a quadratic form of the noise: skewed, relative SD 0.5–0.7 per run)."""
    shape = 1.0 / spread**2
    return truth * gen.gamma(shape, 1.0 / shape, size=(runs, len(truth))).mean(axis=0)


def test_weights_from_the_fitted_psi_remove_the_bias_of_weights_from_the_observed_psi():
    """300 calibrations on 15 pilots of 4 runs each (relative SD 0.6 per run), true multipliers 1:
    the fit weighted by the fitted ψ averages 1 within 5 SE; the old fit weighted by the observed ψ
    is biased down by far more (theory: about −2σ², σ² = 0.6²/4 ≈ 0.09)."""
    from dpmarket.markets.forecast import quasi_nnls, relative_nnls

    gen = np.random.default_rng(29)
    noise = np.geomspace(1e-4, 0.5, 15)  # the noise term over the pilots' budgets
    columns = np.column_stack([0.01 * noise, noise])  # a small noise-free term beside it
    truth = columns.sum(axis=1)
    old, new = [], []
    for _ in range(300):
        psi = noisy_pilot_means(truth, 0.6, 4, gen)
        old.append(relative_nnls(columns, psi)[1])
        new.append(quasi_nnls(columns, psi, prior=np.array([1.0, 0.0]))[1])
    old, new = np.array(old), np.array(new)
    se = new.std(ddof=1) / np.sqrt(len(new))
    assert abs(new.mean() - 1.0) < 5 * se
    assert old.mean() < 1.0 - 0.1 and old.mean() < new.mean() - 5 * se  # the bias the issue saw


def test_the_pseudo_observations_hold_a_multiplier_the_pilots_cannot_see_and_let_a_seen_one_move():
    """15 pilot cells of 2 runs (relative SD 0.6 per run) whose noise term is 1 % of ψ at most: with
    the pilots' pseudo-observations (runs/pilots.py PRIOR) c₂ stays within 1 % of the law's 1 in
    every one of 200 calibrations; held at c₀ only (the fit before), it ran off to 0 or to more than
    10 — a forecast that says ε does not matter, or matters ten times more. The seen term still
    moves: cells at twice the law give c₀ = 1.34, at half of it 0.66."""
    from dpmarket.runs.pilots import PRIOR

    gen = np.random.default_rng(29)
    columns = np.column_stack([np.full(15, 50.0), np.geomspace(1e-4, 0.5, 15)])  # the floor dominates
    truth = columns.sum(axis=1)
    held = np.array([quasi_nnls(columns, noisy_pilot_means(truth, 0.6, 2, gen), prior=PRIOR)[1]
                     for _ in range(200)])
    assert np.all(np.abs(held - 1.0) < 0.01), (held.min(), held.max())
    before = np.array([1.0, 0.0])  # c₀ held by one pseudo-observation, c₂ free
    loose = np.array([quasi_nnls(columns, noisy_pilot_means(truth, 0.6, 2, gen), prior=before)[1]
                      for _ in range(200)])
    assert np.mean((loose < 0.1) | (loose > 10.0)) > 0.25  # the wrong prior fails the check above
    assert quasi_nnls(columns, 2.0 * truth, prior=PRIOR)[0] == pytest.approx(1.34, abs=0.01)
    assert quasi_nnls(columns, 0.5 * truth, prior=PRIOR)[0] == pytest.approx(0.66, abs=0.01)


@pytest.mark.parametrize("shape", ["laplace", "gaussian"])
def test_a_clipped_copy_keeps_what_monte_carlo_says(shape):
    """E Π(X)² and P(|X| > θmax) in closed form against 400,000 draws of X (variance u·θmax², θmax = 1)
    within 5 standard errors of the draws' means, at u from rarely to mostly clipped; the other
    noise's closed form (the deliberately wrong input) is many standard errors off at u = 1."""
    from dpmarket.markets.forecast import clipped_copy

    gen = np.random.default_rng(29)
    other = "gaussian" if shape == "laplace" else "laplace"
    for u in (0.1, 1.0, 10.0):
        x = (gen.laplace(0.0, np.sqrt(u / 2), 400_000) if shape == "laplace"
             else gen.normal(0.0, np.sqrt(u), 400_000))
        kept, out = np.clip(x, -1.0, 1.0) ** 2, np.abs(x) > 1.0
        g, p = clipped_copy(np.array([u]), shape)
        se_g, se_p = kept.std(ddof=1) / np.sqrt(x.size), out.std(ddof=1) / np.sqrt(x.size)
        assert abs(g[0] - kept.mean()) <= 5 * se_g and abs(p[0] - out.mean()) <= 5 * se_p, (u, g, p)
        if u == 1.0:
            assert abs(clipped_copy(np.array([u]), other)[0][0] - kept.mean()) > 50 * se_g


@pytest.mark.parametrize("shape", ["laplace", "gaussian"])
def test_a_shifted_clipped_copy_keeps_what_monte_carlo_says(shape):
    """E Π(m + Y) and E Π(m + Y)² in closed form against 400,000 draws of Y (standard deviation s,
    θmax = 1) within 5 standard errors, from a copy near a face to one that swamps Θ; the other
    noise's closed form (the deliberately wrong input) is many standard errors off."""
    from dpmarket.markets.forecast import clipped_shifted

    gen = np.random.default_rng(29)
    other = "gaussian" if shape == "laplace" else "laplace"
    for m in (-0.9, 0.0, 0.5):
        for s in (0.05, 0.5, 3.0):
            y = (gen.laplace(0.0, s / np.sqrt(2), 400_000) if shape == "laplace"
                 else gen.normal(0.0, s, 400_000))
            x = np.clip(m + y, -1.0, 1.0)
            first, second = clipped_shifted(np.array(m), np.array(s), shape)
            se1, se2 = x.std(ddof=1) / np.sqrt(x.size), (x * x).std(ddof=1) / np.sqrt(x.size)
            assert abs(first - x.mean()) <= 5 * se1 and abs(second - np.mean(x * x)) <= 5 * se2, (m, s)
            if (m, s) == (0.5, 0.5):
                assert abs(clipped_shifted(np.array(m), np.array(s), other)[1] - np.mean(x * x)) > 20 * se2


@pytest.mark.parametrize("owners, pull, kick", [(4, 0.005, 0.3), (6, 0.001, 0.1), (6, 0.001, 0.2),
                                                (3, 0.002, 0.2)])
def test_the_shared_mean_clipped_by_the_box_follows_the_copies(owners, pull, kick):
    """Few owners with small steps and a weak pull: the copies follow their slowly wandering mean,
    which the box clips. The saturation with the shared mean (forecast.blended) is within 5
    standard errors of the copies' chain (4,000 replications); the copies taken alone (the law
    before, the deliberately wrong input) forecast 16–29 % too little, beyond 5 standard errors."""
    from dpmarket.markets.forecast import saturated

    unclipped, mean = (3.0 * x for x in copies_chain(owners, pull, kick, clip=False))  # 3θ²: box's share
    clipped = 3.0 * copies_chain(owners, pull, kick, clip=True)[0]
    u = unclipped.mean()  # 3·E θ_L² unclipped: the noise term over the box's spread (box 1, ψ(0) 0)
    spread = (np.full((1, owners), 1.0 / owners), np.ones((1, owners)))
    shared = (np.array([min(mean / u, 1.0)]), np.array([kick**2 / (u / 3.0)]), np.array([float(owners)]))
    se = clipped.std(ddof=1) / np.sqrt(clipped.size)
    blended = saturated(np.array([u]), 1.0, 0.0, "laplace", spread, shared=shared)[0]
    alone = saturated(np.array([u]), 1.0, 0.0, "laplace", spread)[0]
    assert abs(blended - clipped.mean()) <= 5 * se, (blended, clipped.mean(), se)
    assert clipped.mean() - alone > 5 * se, (alone, clipped.mean(), se)


def test_the_shared_mean_leaves_unclipped_and_swamped_copies_as_they_were():
    """Where nothing is clipped the shared mean's closure gives u (to 10⁻⁸: its quadrature); where one
    step swamps Θ every copy is redrawn at each exchange and the saturation is the copies' alone (the
    weight 1 − g(κ)/κ of that picture → 1), near the box."""
    from dpmarket.markets.forecast import saturated, shared_mean, split_moment, step_lost

    for shape in ("laplace", "gaussian"):
        for u, share in ((0.003, 0.9), (0.06, 0.99)):
            S, dev = split_moment(np.array([u]), np.array([share * u / 3]), np.array([1e-5]))
            closure = shared_mean(np.full((1, 4), 0.25), np.ones((1, 4)), S, dev, np.array([1e-5]),
                                  owners=np.array([4.0]), shape=shape)
            assert closure[0] == pytest.approx(u, rel=1e-8)
        assert step_lost(np.array([1e-4, 1e4]), shape) == pytest.approx([0.0, 1.0], abs=2e-2)
        spread = (np.full((1, 4), 0.25), np.ones((1, 4)))
        shared = (np.array([0.9]), np.array([3.0]), np.array([4.0]))  # steps of u: swamped at u = 10⁶
        swamped = saturated(np.array([1e6]), 8.0, 1.5, shape, spread, shared=shared)[0]
        alone = saturated(np.array([1e6]), 8.0, 1.5, shape, spread)[0]
        assert swamped == pytest.approx(alone, rel=1e-3) and 7.9 < swamped < 8.0


def test_the_box_saturates_the_noise_term_and_the_fit_sees_through_it():
    from dpmarket.markets.forecast import quasi_nnls, saturated

    box, zero = 8.0, 1.5
    for shape in ("laplace", "gaussian"):
        assert saturated(np.array([1e-3]), box, zero, shape)[0] == pytest.approx(1e-3, rel=1e-12)
        far = box - saturated(np.array([1e6, 4e6]), box, zero, shape)
        assert np.all(far > 0) and far[0] / box < 5e-3  # towards the box, as 1/sqrt(noise):
        assert far[0] / far[1] == pytest.approx(2.0, rel=1e-2)  # four times the noise, half the gap
    assert np.array_equal(saturated(np.array([3.0, 50.0]), np.inf), [3.0, 50.0])
    noise = np.geomspace(1e-3, 100.0, 12)  # pilots from far below to far above the box
    columns = np.column_stack([np.full(12, 1e-4), noise])
    spread = (np.tile([0.25, 0.75], (12, 1)), np.tile([3.0, 1.0 / 3.0], (12, 1)))  # a noisy copy, two quiet
    psi = 2.0 * 1e-4 + saturated(0.7 * noise, box, zero, "laplace", spread)  # c0 = 2, c2 = 0.7, no noise
    fitted = quasi_nnls(columns, psi, box, zero=zero, shape="laplace", spread=spread)
    assert fitted == pytest.approx([2.0, 0.7], rel=1e-6)
    linear = quasi_nnls(columns, psi)  # a fit that ignores the box cannot find them
    assert abs(linear[1] - 0.7) > 0.1


def test_pilots_above_the_box_give_a_finite_fit_at_saturation():
    """Pilots whose ψ exceeds what the saturated noise term can reach (ψ_k > box) took c₂ to infinity
    (1e168 after ten steps, then NaN: a market's pilots ended in 'array must not contain infs or
    NaNs'); c₂ stops where every pilot's term is saturated to 10⁻⁶, the forecast the same."""
    free = np.array([0.00066039, 0.00066039, 0.0020261, 0.0020261])
    noise = np.array([2786.45, 27.8645, 2012.85, 20.1285])
    psi, box = np.array([2.248, 5.789, 6.746, 7.327]), 2.8693620305662866
    c0, c2 = quasi_nnls(np.column_stack([free, noise]), psi, box, np.array([1.0, 0.0]))
    assert np.isfinite(c0) and np.isfinite(c2)
    assert np.all(c2 * noise >= 1e12 * box * (1 - 1e-12))  # saturated everywhere
    mu = c0 * free + saturated(c2 * noise, box)
    assert np.allclose(mu, c0 * free + box, rtol=1e-5)


def synthetic_pilots(c0: float, c1: float, c2: float, noise: float, count: int = 80):
    gen = np.random.default_rng(4)
    eps = [np.full(int(gen.integers(2, 8)), float(e)) for e in np.exp(gen.uniform(-1, 3, count))]
    n = list(np.exp(gen.uniform(np.log(1e4), np.log(1e6), count)))
    truth = [Forecast(c1, c2, c0=c0).psi(e, m) for e, m in zip(eps, n, strict=True)]
    return eps, n, [t * np.exp(noise * gen.standard_normal()) for t in truth]


def test_calibration_recovers_a_floor_and_both_constants():
    """80 pilots, 5% log-normal noise: every constant within 5 SE·3 (SE ≈ noise/√points)."""
    c0, c1, c2 = 0.005, 2000.0, 4e8  # each term dominates somewhere in the pilots' range
    fit = calibrate(*synthetic_pilots(c0, c1, c2, 0.05), terms=("c0", "c1", "c2"))
    tol = 5 * 0.05 / np.sqrt(80) * 3
    assert fit.c0 == pytest.approx(c0, rel=tol) and fit.c1 == pytest.approx(c1, rel=tol)
    assert fit.c2 == pytest.approx(c2, rel=tol)
    without = calibrate(*synthetic_pilots(c0, c1, c2, 0.05))  # the papers' form misses the floor
    assert without.rms_relative_error > 3 * fit.rms_relative_error
