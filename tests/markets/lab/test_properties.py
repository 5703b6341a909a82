"""The property table against closed forms, and each check against a deliberately broken policy.

Closed forms: a posted price is truthful for price-takers (a best response beats every other
report); the threshold auction's misreport gain is zero; a take-it-or-leave-it offer pays each fake
owner p·ε̄, so splitting into k gains (k − 1)·p·ε̄. Each property is also measured on a policy broken
on purpose (paid below cost, pay-as-bid, over budget, wasteful, paid against contribution, paid per
identity), and the table must say so.
"""

from __future__ import annotations

import numpy as np
import pytest

from dpmarket.markets import policies as pm
from dpmarket.markets.costs import KINDS, Cost
from dpmarket.markets.forecast import Forecast
from dpmarket.markets.lab import deviations, properties
from dpmarket.markets.sellers import Sellers
from dpmarket.scenario.schema import Market

F = Forecast(0.0, 5e7)


def sellers(coef, records, kind: str = "quadratic") -> Sellers:
    return Sellers(Cost(kind, np.asarray(coef, dtype=float)), np.asarray(records, dtype=float), 0.5, 30.0)


def table(policy: str, s: Sellers, m: Market, psi=(0.01, 0.02, 0.015)) -> properties.Properties:
    """The properties of ``policy`` with three made-up simulated ψ (only the simulated columns use them)."""
    o = pm.settle(policy, s, F, m, 1)
    best, first_best = properties.references(s, F, m, [o])
    return properties.evaluate(o, np.asarray(psi), s, F, m, seed=1, best=best, first_best=first_best)


def random_sellers(count: int = 6):
    gen = np.random.default_rng(23)
    for j in range(count):
        n = int(gen.integers(3, 8))
        yield sellers(np.exp(gen.normal(-2, 0.8, n)), gen.integers(5_000, 60_000, n), KINDS[j % 3])


def test_a_posted_price_is_truthful_for_price_takers():
    """No budget, so no rationing: an owner's best response is its best option at the price."""
    m = Market(value=300.0, price=0.5)
    for s in random_sellers():
        p = table("posted_price", s, m)
        assert np.all(p.misreport_gain <= p.tolerance()) and p.misreport_share == 0.0


def test_the_threshold_auction_gains_nothing_from_misreports():
    for s in random_sellers():
        m = Market(value=300.0, price=0.5, offer_epsilon=3.0, winners=max(1, s.count // 2), budget=20.0)
        p = table("auction", s, m)
        assert np.max(p.misreport_gain) <= p.tolerance()
        assert np.all(p.truthful_utility >= -1e-12)  # individually rational


def pay_as_bid(s: Sellers, f, m: Market):
    """The auction's winners paid their own bid cost: rewards overbidding."""
    o = pm.auction(s, f, m)
    pay = np.where(o.participates, s.cost(np.full(s.count, m.offer_epsilon)), 0.0)
    return pm._finish("pay_as_bid", s, f, m, o.epsilon, pay=pay, members=o.participates)


def test_truthfulness_check_catches_a_pay_as_bid_auction(monkeypatch):
    monkeypatch.setitem(pm.POLICIES, "pay_as_bid", pay_as_bid)
    s = sellers([0.05, 0.08, 0.1, 0.2, 0.3], [2e4, 3e4, 1e4, 4e4, 2e4])
    m = Market(value=300.0, price=2.0, offer_epsilon=3.0, winners=3)
    assert np.max(table("auction", s, m).misreport_gain) <= 1e-9
    broken = table("pay_as_bid", s, m)
    assert broken.misreport_share > 0 and np.max(broken.misreport_gain) > 0.01


def below_cost(s: Sellers, f, m: Market):
    """Everyone sells ε̄ and is paid half its cost: not individually rational."""
    eps = np.full(s.count, m.offer_epsilon)
    return pm._finish("below_cost", s, f, m, eps, pay=0.5 * s.cost(eps), members=np.ones(s.count, bool))


def test_rationality_check_catches_payments_below_cost(monkeypatch):
    monkeypatch.setitem(pm.POLICIES, "below_cost", below_cost)
    s, m = sellers([0.05, 0.08, 0.1], [2e4, 3e4, 1e4]), Market(value=300.0, price=1.0, offer_epsilon=3.0)
    good = table("take_it_or_leave_it", s, m)
    assert good.ir_share == 0.0 and good.ir_worst >= 0
    broken = table("below_cost", s, m)
    assert broken.ir_share == 1.0 and broken.ir_worst < 0 and broken.ir_share_se == 0.0


def over_budget(s: Sellers, f, m: Market):
    """A posted price that ignores the budget: every taker is paid."""
    return pm.posted_price(s, f, m.model_copy(update={"budget": None}))


def test_budget_check_catches_an_overspending_policy(monkeypatch):
    monkeypatch.setitem(pm.POLICIES, "over_budget", over_budget)
    s, m = sellers([0.05, 0.08, 0.1, 0.2], [2e4, 3e4, 1e4, 4e4]), Market(value=300.0, price=1.0, budget=30.0)
    row = properties.policy_row(table("posted_price", s, m), pm.posted_price(s, F, m))
    assert row["within_budget"] is True and row["payment"] <= 30.0
    broken = properties.policy_row(table("over_budget", s, m), over_budget(s, F, m))
    assert broken["within_budget"] is False and broken["payment"] > 30.0


def wasteful(s: Sellers, f, m: Market):
    """Everyone at ε_max, paid its cost: far more privacy bought than the model is worth."""
    eps = np.full(s.count, s.eps_max)
    return pm._finish("wasteful", s, f, m, eps, pay=s.cost(eps), members=np.ones(s.count, bool))


def test_efficiency_check_catches_a_wasteful_policy(monkeypatch):
    monkeypatch.setitem(pm.POLICIES, "wasteful", wasteful)
    s = sellers([0.05, 0.08, 0.1, 0.2], [2e4, 3e4, 1e4, 4e4])
    m = Market(value=300.0, price=1.0, offer_epsilon=3.0)
    good, broken = table("take_it_or_leave_it", s, m), table("wasteful", s, m)
    assert 0.9 < good.efficiency() <= 1.0 + 1e-9
    assert broken.efficiency() < 0.5


def against_contribution(s: Sellers, f, m: Market):
    """Everyone sells ε̄ and is paid more the fewer records it holds: against its contribution."""
    eps = np.full(s.count, m.offer_epsilon)
    pay = s.cost(eps) + 1e5 / s.records
    return pm._finish("against_contribution", s, f, m, eps, pay=pay, members=np.ones(s.count, bool))


def test_fairness_check_catches_payments_against_contribution(monkeypatch):
    """The marginal policy pays Shapley values (correlation 1, share distance 0); a policy that pays
    small owners most correlates negatively."""
    monkeypatch.setitem(pm.POLICIES, "against_contribution", against_contribution)
    s = sellers([0.01, 0.01, 0.01, 0.01, 0.01], [1e4, 2e4, 3e4, 4e4, 5e4])
    m = Market(value=300.0, offer_epsilon=3.0)
    good = properties.policy_row(table("marginal", s, m), pm.marginal(s, F, m))
    assert good["payment_shapley_correlation"] == pytest.approx(1.0)
    assert good["payment_shapley_share_distance"] == pytest.approx(0.0, abs=1e-12)
    broken = properties.policy_row(table("against_contribution", s, m), against_contribution(s, F, m))
    assert broken["payment_shapley_correlation"] < -0.5


def test_splitting_into_k_fakes_gains_k_minus_one_offers_in_a_take_it_or_leave_it():
    """No budget: each fake accepts p·ε̄ for ε̄ at the owner's cost per record-weighted ε̄, so the owner
    collects k·p·ε̄ for one C(ε̄): gain (k − 1)·p·ε̄ for every owner that accepts."""
    s = sellers([0.05, 0.08, 0.1, 5.0], [2e4, 3e4, 1e4, 4e4])
    m = Market(value=300.0, price=1.0, offer_epsilon=3.0)
    p = table("take_it_or_leave_it", s, m)
    accepts = s.cost(np.full(4, 3.0)) <= 3.0
    for j, k in enumerate(p.parts):
        assert np.allclose(p.sybil_gain[accepts, j], (k - 1) * 1.0 * 3.0)
        assert np.allclose(p.sybil_gain[~accepts, j], 0.0)


def per_record_offer(s: Sellers, f, m: Market):
    """ε̄ for p·n_i·ε̄/n̄ (n̄ = 20,000): a price per record, which splitting cannot multiply."""
    eps = np.full(s.count, m.offer_epsilon)
    pay = m.price * eps * s.records / 2e4
    return pm._finish("per_record_offer", s, f, m, eps, pay=pay, members=pay >= s.cost(eps))


def test_replication_check_tells_per_identity_from_per_record_payments(monkeypatch):
    monkeypatch.setitem(pm.POLICIES, "per_record_offer", per_record_offer)
    s, m = sellers([0.05, 0.08, 0.1], [2e4, 3e4, 1e4]), Market(value=300.0, price=1.0, offer_epsilon=3.0)
    assert np.max(table("per_record_offer", s, m).sybil_gain) <= 1e-9  # splitting gains nothing here
    assert np.max(table("take_it_or_leave_it", s, m).sybil_gain) > 1.0


def test_a_split_owners_forecast_is_the_law_of_its_fakes():
    """The split forecast keeps every other owner's inputs and gives each fake the owner's."""
    from dpmarket.markets.forecast import EffectiveBudgets

    noise = EffectiveBudgets("gaussian", "rdp", np.array([1e-6, 2e-6, 3e-6]), np.array([1.0, 2.0, 3.0]),
                             np.array([np.nan, 5.0, np.nan]), "capped", 100, 0.999)
    split = deviations.split_forecast(Forecast(0.0, 5e7, noise=noise), 1, 3)
    assert np.array_equal(split.noise.rates, [1.0, 3.0, 2.0, 2.0, 2.0])
    assert np.array_equal(split.noise.deltas, [1e-6, 3e-6, 2e-6, 2e-6, 2e-6])
    s = deviations.split_sellers(sellers([0.1, 0.2, 0.3], [1e4, 3e4, 2e4]), 1, 3)
    assert np.array_equal(s.records, [1e4, 2e4, 1e4, 1e4, 1e4])
    assert np.array_equal(s.cost.coef, [0.1, 0.3, 0.2, 0.2, 0.2])


def test_rows_have_one_line_per_policy_and_owner():
    s, m = sellers([0.05, 0.08, 0.1], [2e4, 3e4, 1e4]), Market(value=300.0, price=1.0, offer_epsilon=3.0)
    o = pm.posted_price(s, F, m)
    p = table("posted_price", s, m)
    row = properties.policy_row(p, o)
    assert row["policy"] == "posted_price" and row["replications"] == 3 and row["shapley_exact"] is True
    assert row["surplus_simulated"] == pytest.approx(300.0 * (1 - 0.015) - o.spend)
    owners = properties.owner_rows(p, o, ["a", "b", "c"])
    assert [r["name"] for r in owners] == ["a", "b", "c"] and {"sybil2_gain", "sybil4_gain"} <= set(owners[0])
    plain = (bool, int, float, str)  # numpy scalars would be written as np.float64(...) in the CSV
    assert all(type(v) in plain for v in row.values()) and all(type(v) in plain for v in owners[0].values())


def test_beyond_twenty_participants_the_lab_samples_its_own_values_more_finely():
    """22 owners: the lab's Shapley values come from 4,000 orders (the policy's 500 are too coarse to
    judge it by), their errors about √8 times smaller; and they agree with the policy's within 5 SE."""
    gen = np.random.default_rng(2)
    s = sellers(np.full(22, 0.01), gen.integers(5_000, 50_000, 22))
    m = Market(value=300.0, offer_epsilon=3.0, shapley_samples=500)
    o = pm.take_it_or_leave_it(s, F, m.model_copy(update={"price": 1.0}))
    phi, se = properties.fairness_values(o, s, F, m, 1)
    coarse, coarse_se = pm.shapley_with_error(s, F, m, o.epsilon, o.participates, seed=1)
    assert o.participates.sum() == 22
    assert np.median(coarse_se / se) == pytest.approx(np.sqrt(8), rel=0.2)
    assert np.all(np.abs(phi - coarse) <= 5 * np.hypot(se, coarse_se))
