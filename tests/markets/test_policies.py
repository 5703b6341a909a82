"""Compensation policies: closed forms as oracles, budgets, individual rationality, truthfulness, Shapley."""

from __future__ import annotations

import itertools
from math import factorial

import numpy as np
import pytest

from dpmarket.markets import policies as pm
from dpmarket.markets.costs import KINDS, Cost
from dpmarket.markets.forecast import Forecast
from dpmarket.markets.sellers import Sellers
from dpmarket.scenario.schema import Market

COEF = np.array([0.5, 1.0, 2.0, 4.0, 1.5, 3.0])
RECORDS = np.array([1e4, 2e4, 3e4, 1e4, 5e3, 4e4])
F = Forecast(0.0, 5e7)


def sellers(kind: str = "quadratic", coef=COEF, records=RECORDS, lo=1e-3, hi=1e3, **kw) -> Sellers:
    return Sellers(Cost(kind, np.asarray(coef, dtype=float)), np.asarray(records, dtype=float), lo, hi, **kw)


def market(**kw) -> Market:
    base = {"price": 1.0, "price_per_record": 1e-4, "value": 100.0, "offer_epsilon": 2.0}
    return Market(**{**base, **kw})


def random_instances(count: int = 12):
    """Seeded random markets: every cost shape, sizes, coefficients, bounds and a budget."""
    gen = np.random.default_rng(7)
    for j in range(count):
        n = int(gen.integers(2, 9))
        kind = KINDS[j % 3]
        s = sellers(kind, np.exp(gen.normal(-1, 1, n)), gen.integers(2_000, 50_000, n), 0.5, 20.0)
        f = Forecast(c1=float(gen.uniform(0, 3e3)), c2=float(gen.uniform(1e6, 1e8)),
                     c0=float(gen.uniform(0, 0.05)))
        m = market(budget=float(gen.uniform(0.5, 30)), price=float(np.exp(gen.normal(0, 1))),
                   price_per_record=float(np.exp(gen.normal(-9, 1))), value=float(gen.uniform(10, 500)),
                   offer_epsilon=float(gen.uniform(0.5, 10)), winners=int(gen.integers(1, n + 1)),
                   model_value=float(gen.choice([0.0, 50.0])))
        own = gen.uniform(0.0, 0.5, n)
        yield Sellers(s.cost, s.records, s.eps_min, s.eps_max, own, m.model_value), f, m


def test_posted_price_with_quadratic_costs_gives_clipped_p_over_c():
    s, m = sellers(lo=0.3, hi=1.5), market(price=1.0)
    o = pm.posted_price(s, F, m)
    eps = np.clip(1.0 / COEF, 0.3, 1.5)
    utility = eps - COEF * eps**2 / 2
    assert np.allclose(o.epsilon[o.participates], eps[o.participates])
    assert np.array_equal(o.participates, utility >= 0)  # c = 4: at ε_min 0.3 pays 0.3, costs 0.18
    assert np.allclose(o.utility, np.where(utility >= 0, utility, 0.0))
    assert o.psi_forecast == pytest.approx(F.psi(eps[o.participates], RECORDS[o.participates].sum()))


def test_a_price_below_cost_at_the_minimum_epsilon_is_declined():
    o = pm.posted_price(sellers("linear", lo=1.0, hi=5.0), F, market(price=1.2))
    assert np.array_equal(o.participates, COEF < 1.2)  # linear: sell ε_max iff p > c, else decline
    assert np.all(o.epsilon[o.participates] == 5.0) and np.all(o.epsilon[~o.participates] == 0)


def test_record_price_is_a_posted_price_of_p_times_n_i():
    s, m = sellers(), market(price_per_record=3e-5)
    o = pm.record_price(s, F, m)
    assert np.allclose(o.epsilon, np.clip(3e-5 * RECORDS / COEF, s.eps_min, s.eps_max))
    assert np.allclose(o.payment, 3e-5 * RECORDS * o.epsilon)


def test_take_it_or_leave_it_is_accepted_exactly_when_it_covers_the_cost():
    o = pm.take_it_or_leave_it(sellers(), F, market(price=1.5, offer_epsilon=2.0))
    assert np.array_equal(o.participates, COEF * 4 / 2 <= 3.0)
    assert np.all(o.payment[o.participates] == 3.0)


def test_procurement_matches_the_kkt_closed_form_for_quadratic_costs():
    """min Σε⁻² s.t. Σ c ε²/2 = B: ε_i = κ c_i^(-1/4), κ² = 2B/Σ√c."""
    s, budget = sellers(), 20.0
    eps, feasible = pm.budget_epsilons(s, np.ones((1, 6), bool), budget)
    kappa = np.sqrt(2 * budget / np.sum(np.sqrt(COEF)))
    assert feasible[0]
    assert np.allclose(eps[0], kappa * COEF**-0.25, rtol=1e-9)
    assert s.cost(eps[0]).sum() == pytest.approx(budget, rel=1e-9)


@pytest.mark.parametrize("kind", ["linear", "exponential"])
def test_procurement_without_closed_form_satisfies_kkt(kind):
    """Stationarity: C'(ε)ε³ is equal across owners whose ε is not at a bound; spend = B."""
    s = sellers(kind, lo=0.1, hi=10.0)
    eps = pm.budget_epsilons(s, np.ones((1, 6), bool), 8.0)[0][0]
    inner = (eps > 0.1 + 1e-9) & (eps < 10 - 1e-9)
    ratio = s.cost.marginal(eps) * eps**3
    assert inner.sum() >= 2 and np.ptp(ratio[inner]) <= 1e-8 * ratio[inner].mean()
    assert s.cost(eps).sum() == pytest.approx(8.0, rel=1e-9)
    # wrong input: an equal split of the budget's ε is feasible but does worse
    flat = sellers(kind, coef=np.ones(6), lo=0.1, hi=10.0)
    equal = pm.budget_epsilons(flat, np.ones((1, 6), bool), 8.0)[0][0]
    scaled = equal * _scale_to_budget(s, equal, 8.0)
    assert np.sum(eps**-2.0) < np.sum(scaled**-2.0)


def _scale_to_budget(s: Sellers, eps: np.ndarray, budget: float) -> float:
    lo, hi = 1e-3, 1e3
    for _ in range(200):
        mid = np.sqrt(lo * hi)
        lo, hi = (lo, mid) if s.cost(eps * mid).sum() > budget else (mid, hi)
    return lo


def test_procurement_finds_the_best_coalition_by_brute_force():
    """Against an independent grid search over every coalition and ε (N = 3, c₁ > 0)."""
    s = sellers(coef=[0.5, 2.0, 1.0], records=[1e4, 3e4, 2e4], lo=0.5, hi=6.0)
    f, budget = Forecast(300.0, 5e7), 6.0
    o = pm.procurement(s, f, market(budget=budget))
    grid = np.geomspace(0.5, 6.0, 60)
    eps = np.stack(np.meshgrid(grid, grid, grid), axis=-1).reshape(-1, 3)
    best = np.inf
    for mask in itertools.product([False, True], repeat=3):
        masks = np.tile(mask, (len(eps), 1))
        if any(mask):
            fits = np.where(masks, s.cost(eps), 0.0).sum(axis=1) <= budget
            inv = np.where(masks, eps**-2.0, 0.0).sum(axis=1)[fits]
            n = float(s.records[list(mask)].sum())
            best = min(best, np.min(f.c1 * np.sqrt(inv) / n + f.c2 * inv / n**2, initial=np.inf))
    assert o.spend <= budget * (1 + 1e-12)
    assert o.psi_forecast <= best * (1 + 1e-9)  # never worse than the grid...
    assert o.psi_forecast >= best * 0.9  # ...and the grid (step 4%) is close to the optimum
    assert np.allclose(o.payment, o.cost)  # first best: each owner paid its cost


def test_stackelberg_price_matches_the_closed_form():
    """Quadratic costs, c₁ = 0, slack bounds: p* = (value·A/Σ1/c)^(1/4), A = c₂Σc²/n²."""
    s, m = sellers(), market(value=100.0)
    o = pm.stackelberg(s, F, m)
    A = F.c2 * np.sum(COEF**2) / RECORDS.sum() ** 2
    closed = (m.value * A / np.sum(1 / COEF)) ** 0.25
    assert o.price == pytest.approx(closed, rel=1e-5)
    assert o.psi_forecast < 1 and o.participates.all()
    assert o.surplus >= max(pm.posted_price(s, F, m, price=p).surplus for p in np.geomspace(0.1, 10, 200))


@pytest.mark.parametrize("centre", [0.1, 0.37, 0.5 + 1e-7, 0.9])
def test_the_peak_of_a_unimodal_function_in_few_batched_calls(centre):
    """_peak: the maximum within its tolerance in about log(w/tol)/log(8) calls of 2 × 9 points; a
    maximum outside the bracket (a wrong bracket) ends at the nearest edge, not at the maximum."""
    calls = []

    def values(x):
        calls.append(len(x))
        return -np.abs(x - centre) ** 1.5

    x = pm._peak(values, 0.0, 1.0)
    assert len(calls) <= 13 and set(calls) == {2 * pm.BRACKET_POINTS}
    assert abs(x - centre) <= 1e-10
    assert pm._peak(values, centre + 0.05, 2.0) == centre + 0.05
    assert pm._peak(values, -1.0, centre - 0.05) == centre - 0.05


def _last_bit_peaks(search, draws: int = 40) -> np.ndarray:
    """Where ``search`` finds the peak of a smooth surplus-like curve when every value carries last-bit
    noise (each draw another CPU: ±2 units in the last place)."""
    gen = np.random.default_rng(11)
    found = []
    for _ in range(draws):
        def values(x):
            v = 250.0 - 40.0 * (x - 0.3) ** 2 + 3.0 * (x - 0.3) ** 3
            return v * (1.0 + 2.0 * np.finfo(float).eps * gen.uniform(-1.0, 1.0, np.shape(x)))

        found.append(search(values))
    return np.array(found)


def _by_values(values, a=0.0, b=1.0, tol=1e-10, points=17):
    """The search Stackelberg used before: keep the best value's neighbours (the wrong input)."""
    while b - a > tol:
        xs = np.linspace(a, b, points)
        k = int(np.argmax(values(xs)))
        a, b = xs[max(k - 1, 0)], xs[min(k + 1, points - 1)]
    return 0.5 * (a + b)


def test_the_peak_is_the_same_whatever_the_last_bits_of_the_values():
    """With values that differ in their last bits from machine to machine, the slope's sign puts the
    peak at the same point to 10⁻¹¹ (the contract's 10⁻⁹ with room); comparing values, as before,
    scatters it by 10⁻⁸ — beyond the contract."""
    spread = np.ptp(_last_bit_peaks(lambda v: pm._peak(v, 0.0, 1.0)))
    assert spread < 1e-11
    assert np.ptp(_last_bit_peaks(_by_values)) > 1e-9


def test_stackelberg_beats_every_price_on_a_grid_when_there_is_no_closed_form():
    for s, f, m in itertools.islice(random_instances(), 4):
        best = max(pm.posted_price(s, f, m, price=p).surplus for p in np.geomspace(1e-3, 1e3, 400))
        assert pm.stackelberg(s, f, m).surplus >= best - 1e-9 * abs(best)


def takers_one_price_at_a_time(s, f, m, prices):
    """The Stackelberg learner's takers as posted_price finds them, one price after another."""
    return np.array([pm.posted_price(s, f, m, price=float(p)).participates for p in prices])


def test_the_learners_batched_prices_find_the_takers_of_each_price_alone():
    """stackelberg asks for all its prices' offers and takers at once (each row rationed greedily within
    the budget, model values joined row by row): the same owners, bit for bit, as one price at a time."""
    prices = np.geomspace(1e-2, 1e2, 60)
    for s, f, m in random_instances():
        eps, pay = pm._posted_offers(s, prices)
        assert np.array_equal(eps[7], pm._posted_offers(s, float(prices[7]))[0])
        members = pm._takers(s, f, m, eps, pay)
        assert np.array_equal(members, takers_one_price_at_a_time(s, f, m, prices))


def test_a_greedy_pass_that_ignores_the_budget_fails_the_batched_check(monkeypatch):
    """The paired wrong input: a rationing step that takes every willing owner whatever is left."""
    s, f, m = next(itertools.islice(random_instances(), 2, None))
    prices = np.geomspace(1e-2, 1e2, 60)
    alone = takers_one_price_at_a_time(s, f, m, prices)
    monkeypatch.setattr(pm, "_ration", lambda s, pay, willing, budget: np.array(willing, dtype=bool))
    assert not np.array_equal(pm._takers(s, f, m, *pm._posted_offers(s, prices)), alone)


@pytest.mark.parametrize("policy", ["posted_price", "record_price", "take_it_or_leave_it", "procurement",
                                    "stackelberg", "auction", "marginal"])
def test_budget_is_never_exceeded_and_nobody_loses(policy):
    """On seeded random markets (all cost shapes, with and without a model value)."""
    for s, f, m in random_instances():
        o = pm.settle(policy, s, f, m, seed=1)
        assert o.spend <= m.budget * (1 + 1e-12)
        assert np.all(o.utility[o.participates] >= -1e-12)  # individually rational
        assert np.all(o.payment[~o.participates] == 0) and np.all(o.epsilon[~o.participates] == 0)
        assert np.all((o.epsilon[o.participates] >= s.eps_min) & (o.epsilon[o.participates] <= s.eps_max))


def rationality_violations(o) -> int:
    return int(np.sum(o.utility[o.participates] < -1e-12))


def test_the_rationality_check_catches_a_forced_offer():
    """The paired wrong input: forcing everyone to accept a take-it-or-leave-it offer."""
    s, m = sellers(), market(price=1.0, offer_epsilon=2.0)
    o = pm.take_it_or_leave_it(s, F, m)
    forced = pm._finish("forced", s, F, m, np.full(6, 2.0), pay=np.full(6, 2.0), members=np.ones(6, bool))
    assert rationality_violations(o) == 0 and rationality_violations(forced) > 0


def auction_utilities(s, m, bids_for, mechanism=pm.auction):
    return np.array([mechanism(s, F, m, bids=bids_for(i)).utility[i] for i in range(s.count)])


def pay_as_bid(s, f, m, bids):
    """A deliberately non-truthful auction: the same winners, each paid its own bid's cost."""
    o = pm.auction(s, f, m, bids=bids)
    pay = np.where(o.participates, Cost(s.cost.kind, bids)(np.full(s.count, m.offer_epsilon)), 0.0)
    return pm._finish("pay_as_bid", s, f, m, o.epsilon, pay=pay, members=o.participates)


@pytest.mark.parametrize("mechanism", [pm.auction, pay_as_bid])
def test_auction_is_truthful_on_a_grid_of_misreports(mechanism):
    """No owner gains by bidding anything on a grid (0.1c … 10c) instead of its true c."""
    s = sellers(coef=[0.5, 1.0, 2.0, 4.0, 1.5, 3.0, 0.8], records=np.full(7, 1e4))
    m = market(price=5.0, offer_epsilon=2.0, winners=3)
    truthful = auction_utilities(s, m, lambda i: s.cost.coef, mechanism)
    gain = 0.0
    for factor in np.geomspace(0.1, 10, 41):
        def misreport(i, factor=factor):
            bids = s.cost.coef.copy()
            bids[i] *= factor
            return bids
        gain = max(gain, np.max(auction_utilities(s, m, misreport, mechanism) - truthful))
    if mechanism is pm.auction:
        assert gain <= 1e-12 and np.all(truthful >= 0)
    else:
        assert gain > 0.01  # pay-as-bid rewards overbidding: the test can tell


def test_auction_pays_the_next_bid_within_budget():
    s, m = sellers(), market(price=5.0, offer_epsilon=2.0, winners=3, budget=25.0)
    o = pm.auction(s, F, m)
    costs = COEF * 4 / 2
    assert o.participates.sum() == 2  # ⌊25 / (5·2)⌋ = 2 winners
    assert np.array_equal(np.flatnonzero(o.participates), np.argsort(costs)[:2])
    assert np.all(o.payment[o.participates] == np.sort(costs)[2]) and o.spend <= 25


def test_exact_shapley_is_efficient_and_symmetric():
    s, m = sellers(records=[1e4, 1e4, 2e4, 3e4, 1e4, 5e3]), market(value=100.0)
    eps = np.array([2.0, 2.0, 2.0, 1.0, 3.0, 2.0])
    phi = pm.shapley(s, F, m, eps, np.ones(6, bool), seed=0)
    full = pm.coalition_values(s, F, m, eps, np.ones((1, 6), bool))[0]
    assert phi.sum() == pytest.approx(full, rel=1e-12)  # efficiency: Σφ = V(N) − V(∅)
    assert phi[0] == pytest.approx(phi[1], rel=1e-12)  # owners 0 and 1 are identical


def exact_shapley(s: Sellers, m: Market, eps: np.ndarray) -> np.ndarray:
    """An independent reference: φ_i = Σ_S |S|!(k−|S|−1)!/k! (V(S∪i) − V(S)) over all 2^k sets."""
    k = s.count
    phi = np.zeros(k)
    for mask in itertools.product([False, True], repeat=k):
        mask = np.array(mask)
        v = pm.coalition_values(s, F, m, eps, mask[None])[0]
        for i in np.flatnonzero(~mask):
            plus = mask.copy()
            plus[i] = True
            z = int(mask.sum())
            weight = factorial(z) * factorial(k - z - 1) / factorial(k)
            phi[i] += weight * (pm.coalition_values(s, F, m, eps, plus[None])[0] - v)
    return phi


def test_exact_shapley_matches_the_textbook_formula():
    s, m = sellers(), market(value=100.0)
    eps = np.array([2.0, 1.5, 2.0, 1.0, 3.0, 2.0])
    assert np.allclose(pm.shapley(s, F, m, eps, np.ones(6, bool), seed=0), exact_shapley(s, m, eps))


def test_sampled_shapley_agrees_with_the_exact_values_within_5_se():
    """12 owners: permutation sampling vs exact enumeration of 2^12 sets; its own standard errors
    agree with those of an independent sample of the same size."""
    k, samples = 12, 4000
    s = sellers(coef=np.ones(k), records=np.linspace(5e3, 4e4, k))
    m = market(value=100.0, shapley_samples=samples)
    eps = np.linspace(1.0, 4.0, k)
    sampled, own_se = pm.sampled_shapley(s, F, m, eps, np.arange(k), gen=np.random.default_rng(0))
    exact = exact_shapley(s, m, eps)
    assert np.allclose(pm.shapley(s, F, m, eps, np.ones(k, bool), seed=0), exact)  # 12 ≤ 20: exact
    # SE of the estimator from an independent sample of marginal contributions of the same size
    orders = np.random.default_rng(1).permuted(np.tile(np.arange(k), (samples, 1)), axis=1)
    inv, n = np.cumsum(eps[orders] ** -2.0, axis=1), np.cumsum(s.records[orders], axis=1)
    v = m.value * np.maximum(0, 1 - F.c2 * inv / n**2)
    marg = np.diff(np.concatenate([np.zeros((samples, 1)), v], axis=1), axis=1)
    per_owner = np.zeros((samples, k))
    np.put_along_axis(per_owner, orders, marg, axis=1)
    se = per_owner.std(axis=0, ddof=1) / np.sqrt(samples)
    assert np.all(np.abs(sampled - exact) <= 5 * se)
    assert not np.all(np.abs(sampled - exact[::-1]) <= 5 * se)  # a wrong reference is rejected
    assert own_se == pytest.approx(se, rel=0.15)  # both estimate one SE from 4,000 orders


def test_exact_shapley_of_many_owners_is_efficient_symmetric_and_unequal_where_they_differ():
    """14 owners (the enumeration over code blocks, 16,384 coalitions): the values add up to the
    grand coalition's worth, two identical owners get the same value, and a larger owner more."""
    k = 14
    records = np.full(k, 1e4)
    records[5] = 4e4
    s, m = sellers(coef=np.ones(k), records=records), market(value=100.0)
    eps = np.full(k, 2.0)
    phi, se = pm.shapley_with_error(s, F, m, eps, np.ones(k, bool), seed=0)
    full = pm.coalition_values(s, F, m, eps, np.ones((1, k), bool))[0]
    assert phi.sum() == pytest.approx(full, rel=1e-10) and not se.any()
    assert np.allclose(phi[[0, 1, 2, 3, 4, 6]], phi[0], rtol=1e-10) and phi[5] > phi[0] * 1.2
    masks = np.array(list(itertools.product([False, True], repeat=k)))  # the plain mask route agrees
    reference = pm.exact_shapley(lambda c: pm.coalition_values(s, F, m, eps, masks), np.arange(k), k)
    assert np.allclose(phi, reference, rtol=1e-10)


def test_a_wrong_shapley_weighting_breaks_efficiency(monkeypatch):
    """The efficiency check can tell: equal weights over subsets (Banzhaf) do not add up to V(N)."""
    k = 6
    s, m = sellers(coef=np.ones(k), records=np.linspace(1e4, 3e4, k)), market(value=100.0)
    eps = np.full(k, 2.0)
    full = pm.coalition_values(s, F, m, eps, np.ones((1, k), bool))[0]
    monkeypatch.setattr(pm, "factorial", lambda z: 1.0)  # every subset weighs 1: Banzhaf, not Shapley
    wrong = pm.shapley(s, F, m, eps, np.ones(k, bool), seed=0)
    assert abs(wrong.sum() - full) > 0.1 * full


def test_leave_one_out_matches_its_closed_form_for_identical_owners():
    """k identical owners at ε: V(k) − V(k−1) with ψ̂(k) = c₂ k ε⁻² / (k n₁)²."""
    s, m = sellers(coef=np.ones(4), records=np.full(4, 1e4)), market(value=100.0)
    eps = np.full(4, 2.0)
    loo = pm.leave_one_out(s, F, m, eps, np.ones(4, bool))
    v = [m.value * max(0, 1 - F.c2 * k / 4 / (k * 1e4) ** 2) for k in (3, 4)]
    assert np.allclose(loo, v[1] - v[0])


def test_marginal_keeps_only_owners_whose_payment_covers_their_cost():
    s, m = sellers(coef=[0.5, 1.0, 50.0, 1.0]), market(value=100.0, offer_epsilon=2.0)
    s = Sellers(s.cost, np.array([1e4, 1e4, 1e4, 1e4]), s.eps_min, s.eps_max)
    o = pm.marginal(s, F, m)
    assert not o.participates[2]  # c = 50: cost 100 at ε̄ = 2, more than any contribution
    assert np.all(o.payment[o.participates] >= s.cost(np.full(4, 2.0))[o.participates])
    assert o.surplus == pytest.approx(0.0, abs=1e-9)  # full Shapley pays out V(S)


def test_shapley_payments_leave_the_learner_a_surplus_of_exactly_zero_on_every_machine():
    """Full Shapley pays out V(S): value − Σ payments is 0 in exact arithmetic and ±10⁻¹⁴ in floats, of
    either sign by CPU (banks_market, marginal: −5.7e-14 on one kernel, +5.7e-14 on another), and its sign
    decided a warning. The surplus is 0.0, whatever the last bits; the plain difference (the wrong input)
    is not, on these markets."""
    gen, raw = np.random.default_rng(5), []
    for _ in range(20):
        s = sellers(coef=gen.uniform(0.1, 0.5, 7), records=gen.integers(5_000, 50_000, 7).astype(float))
        o = pm.marginal(s, Forecast(0.0, 5e7, c0=0.01), market(value=gen.uniform(50, 300)))
        assert o.participates.all() and o.surplus == 0.0
        raw.append(o.value - o.spend)
    assert any(r != 0.0 for r in raw)


def test_large_markets_use_prefixes_and_sampling_within_budget():
    """25 owners: procurement searches cost-ordered prefixes, Shapley is sampled; both stay in budget."""
    gen = np.random.default_rng(11)
    coef, records = np.exp(gen.normal(-1, 0.7, 25)), gen.integers(5_000, 50_000, 25)
    s = sellers(coef=coef, records=records, lo=0.5, hi=30.0)
    m = market(budget=40.0, value=200.0, offer_epsilon=3.0, shapley_samples=300)
    f = Forecast(100.0, 5e7, c0=0.001)
    proc = pm.procurement(s, f, m)
    assert proc.spend <= 40.0 * (1 + 1e-12) and np.allclose(proc.payment, proc.cost)
    best_single = min(pm.procurement(Sellers(Cost("quadratic", s.cost.coef[[i]]), s.records[[i]], 0.5, 30.0),
                                     f, m).psi_forecast for i in range(25))
    assert proc.psi_forecast <= best_single  # the prefix heuristic beats every owner alone (not a theorem)
    marg = pm.marginal(s, f, m, seed=3)
    assert marg.spend <= 40.0 * (1 + 1e-12)
    assert np.all(marg.utility[marg.participates] >= 0)
    assert np.array_equal(marg.payment, pm.marginal(s, f, m, seed=3).payment)  # seeded: reproducible
