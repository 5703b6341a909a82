"""The best welfare under the forecast: a closed form for identical owners, and an upper bound on
every policy's welfare (within the budget for those that keep it)."""

from __future__ import annotations

import numpy as np
import pytest

from dpmarket.markets import policies as pm
from dpmarket.markets.costs import Cost
from dpmarket.markets.forecast import Forecast
from dpmarket.markets.lab import welfare
from dpmarket.markets.sellers import Sellers
from dpmarket.scenario.schema import Market


def identical(count: int, coef: float = 0.05, records: float = 2e4) -> Sellers:
    return Sellers(Cost("quadratic", np.full(count, coef)), np.full(count, records), 0.01, 1e3)


def test_the_best_welfare_of_identical_owners_matches_its_closed_form():
    """ψ̂ = c₂Σε⁻²/n², quadratic costs: k owners of n₁ records at ε each give W(k, ε) = V − V c₂/(k n₁² ε²)
    − k c ε²/2, maximised at ε⁴ = 2Vc₂/(c k² n₁²), so W(k) = V − 2√(Vc₂c/2)/n₁ for every k — any
    coalition reaches it, at the ε of its size."""
    V, c2, c, n1 = 300.0, 5e7, 0.05, 2e4
    best = welfare.best_welfare(identical(6, c, n1), Forecast(0.0, c2), Market(value=V))
    closed = V - 2 * np.sqrt(V * c2 * c / 2) / n1
    assert best.welfare == pytest.approx(closed, rel=1e-9)
    k = int(best.members.sum())
    eps = (2 * V * c2 / (c * k**2 * n1**2)) ** 0.25
    assert np.allclose(best.epsilon[best.members], eps, rtol=1e-5)
    assert best.method.startswith("exhaustive: all 63 coalitions")


def test_a_budget_binds_the_best_welfare_where_it_should():
    """With B below the unconstrained spend the best within the budget spends B exactly and is lower."""
    s, f = identical(4), Forecast(0.0, 5e7)
    free = welfare.best_welfare(s, f, Market(value=300.0))
    spend = float(np.sum(s.cost(free.epsilon)[free.members]))
    capped = welfare.best_welfare(s, f, Market(value=300.0, budget=spend / 2), budget=spend / 2)
    assert capped.welfare < free.welfare
    assert float(np.sum(s.cost(capped.epsilon)[capped.members])) == pytest.approx(spend / 2, rel=1e-6)


def random_markets(count: int = 10):
    gen = np.random.default_rng(17)
    for j in range(count):
        n = int(gen.integers(3, 9))
        kind = ("linear", "quadratic", "exponential")[j % 3]
        s = Sellers(Cost(kind, np.exp(gen.normal(-2, 0.8, n))), gen.integers(5_000, 60_000, n).astype(float),
                    0.5, 30.0)
        f = Forecast(c1=float(gen.uniform(0, 2e3)), c2=float(gen.uniform(1e7, 3e8)),
                     c0=float(gen.uniform(0, 0.02)))
        m = Market(value=float(gen.uniform(50, 500)), budget=float(gen.uniform(2, 40)),
                   price=float(np.exp(gen.normal(-1, 1))), price_per_record=float(np.exp(gen.normal(-10, 1))),
                   offer_epsilon=float(gen.uniform(1, 10)), winners=int(gen.integers(1, n + 1)))
        yield s, f, m


@pytest.mark.parametrize("policy", pm.POLICIES)
def test_no_policy_beats_the_best_welfare(policy):
    """W* bounds every policy's forecast welfare; a policy that keeps its budget and pays at least
    the costs is bounded by the best within the budget too."""
    for s, f, m in random_markets():
        o = pm.settle(policy, s, f, m, seed=1)
        w = float(welfare.realised(o, s, m.value, o.psi_forecast)[0]) if o.participates.any() else 0.0
        first = welfare.best_welfare(s, f, m)
        assert w <= first.welfare + 1e-7 * m.value
        if o.spend <= m.budget * (1 + 1e-12) and np.all(o.payment >= o.cost - 1e-12):
            assert w <= welfare.best_welfare(s, f, m, m.budget).welfare + 1e-7 * m.value


def test_the_best_coalition_and_budgets_reach_the_welfare_reported():
    """The coalition and ε the search returns, evaluated afresh, give exactly its welfare."""
    s, f, m = next(random_markets(1))
    best = welfare.best_welfare(s, f, m)
    w = welfare.welfare_at(s, f, m, best.epsilon[None, :], best.members[None, :])[0]
    assert w == pytest.approx(best.welfare, rel=1e-12)


def test_the_local_search_beyond_twelve_owners_finds_the_identical_owners_optimum():
    """15 identical owners: the search (not exhaustive) still reaches the closed form."""
    V, c2, c, n1 = 300.0, 5e7, 0.05, 2e4
    best = welfare.best_welfare(identical(15, c, n1), Forecast(0.0, c2), Market(value=V))
    assert best.method.startswith("local search")
    assert best.welfare == pytest.approx(V - 2 * np.sqrt(V * c2 * c / 2) / n1, rel=1e-9)
