"""Cost functions (dpmarket/markets/costs.py): closed-form best responses match a numeric maximiser, and
bad definitions are refused."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import optimize

from dpmarket.markets.costs import Cost


@pytest.mark.parametrize("kind", ["linear", "quadratic", "exponential"])
@pytest.mark.parametrize("price", [0.3, 1.0, 2.5, 9.0])
def test_best_response_matches_a_numeric_maximiser(kind, price):
    cost = Cost(kind, 1.3)
    best = cost.best_response(price, 0.1, 5.0)
    numeric = optimize.minimize_scalar(lambda e: cost(e) - price * e, bounds=(0.1, 5.0),
                                       method="bounded", options={"xatol": 1e-10})
    utility = price * best - cost(best)
    assert utility >= price * numeric.x - cost(numeric.x) - 1e-7
    if kind == "quadratic":
        assert best == pytest.approx(np.clip(price / 1.3, 0.1, 5.0))  # ε = clip(p/c)


def test_costs_reject_bad_definitions():
    with pytest.raises(ValueError):
        Cost("cubic", 1.0)
    with pytest.raises(ValueError):
        Cost("linear", 0.0)
