"""Sellers (dpmarket/markets/sellers.py): cost coefficients are drawn per owner, and an owner's own
overrides the draw without changing the others'."""

from __future__ import annotations

import numpy as np
from helpers import market_scenario


def test_cost_coefficients_are_drawn_per_owner_and_overridable():
    from dpmarket.markets.sellers import cost_coefficients

    s = market_scenario(owners=[{"cost_coef": 7.0}], costs={"coef": 0.5, "distribution": "lognormal",
                                                             "sigma": 1.0})
    coef = cost_coefficients(s, 3)
    assert coef[0] == 7.0 and len(set(coef)) == 3
    assert np.array_equal(coef[1:], cost_coefficients(market_scenario(owners=[{"cost_coef": 1.0}], costs={
        "coef": 0.5, "distribution": "lognormal", "sigma": 1.0}), 3)[1:])  # others unchanged
