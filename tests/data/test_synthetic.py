"""The synthetic generator's declared distribution (dpmarket/data/synthetic.py): the population's
coefficients have the second moments ``coefficient_moments`` states, which the forecast's expected
floor weights are built on (dpmarket/data/proxy.py ``population_weights``)."""

from __future__ import annotations

import numpy as np
from helpers import mean_within

from dpmarket.data.synthetic import PROFILES, coefficient_moments, population


def draws(count: int, features: int) -> np.ndarray:
    """(count, features) population coefficients of the interest-rate profile, one seed each."""
    profile = PROFILES["interest_rate"]
    return np.array([population(profile, features, np.random.default_rng([29, k])).coef
                     for k in range(count)])


def test_coefficient_moments_are_the_populations_second_moments():
    """E coef_k² = signal²·E U²·0.85^{2k}: 4,000 draws agree within 5 standard errors per feature, and
    with mean 0 (the random sign); a moment without the decay 0.85^{2k} is refused."""
    features = 6
    coef = draws(4000, features)
    moments = coefficient_moments(PROFILES["interest_rate"], features)
    second = (1 - 0.3**3) / (3 * 0.7)  # E U² of U(0.3, 1)
    assert np.isclose(moments[0], PROFILES["interest_rate"].signal ** 2 * second, rtol=1e-12)
    assert all(mean_within(coef[:, k] ** 2, moments[k]) for k in range(features))
    assert all(mean_within(coef[:, k], 0.0) for k in range(features))
    wrong = np.full(features, moments[0])  # the decay forgotten
    assert not all(mean_within(coef[:, k] ** 2, wrong[k]) for k in range(features))
