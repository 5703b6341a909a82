"""Compensation policies: how the learner buys ε from the owners.

Every policy maps (sellers, forecast, market settings) to an :class:`Outcome`. The learner's
value of a model is ``value·max(0, 1 − ψ̂)`` with ψ̂ the forecast of §4 over the owners that
take part; owners that decline answer nothing. Every ψ̂ a policy considers comes from
``forecast.coalitions`` (Theorem 2's form or the law, whichever the market was given), so the
law's dependence on N, T, ρ and the answer caps reaches every coalition a policy weighs. Closed
forms of Theorem 2's form (used as test oracles):

- posted price p, quadratic costs: ε_i = clip(p/c_i), utility p ε_i − c_i ε_i²/2 ≥ 0;
- procurement, quadratic costs, c₁ = 0, bounds slack: ε_i = κ c_i^(−1/4) with
  κ² = 2B / Σ_j √c_j (KKT of min Σε⁻² s.t. Σ c_i ε_i²/2 = B);
- Stackelberg, quadratic costs, c₁ = 0, bounds slack, ψ̂ < 1: with ψ̂ = A/p²
  (A = c₂ Σc_i²/n²) and spend p² Σ 1/c_i, the price maximising value·(1 − A/p²) − p² Σ1/c_i
  is p* = (value·A / Σ 1/c_i)^(1/4).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import replace
from math import factorial

import numpy as np

from dpmarket import rng as streams
from dpmarket.markets.costs import Cost
from dpmarket.markets.forecast import Forecaster
from dpmarket.markets.members import Prefixes, Subsets
from dpmarket.markets.outcome import Outcome, learner_value
from dpmarket.markets.sellers import Sellers
from dpmarket.scenario.schema import Market

EXHAUSTIVE_UP_TO = 10  # owners: exact subset search (procurement)
SHAPLEY_EXACT_UP_TO = 20  # players: exact Shapley values by enumerating all 2^k coalitions (~1 M at 20)
SHAPLEY_STREAM = 2**31 - 1  # sub-index of the "market" stream for permutation sampling
BRACKET_POINTS = 9  # prices per round of the Stackelberg refinement, two surpluses each: 8-fold a round
# Half the spacing of the two log prices whose surpluses give a slope's sign (±0.1 % of the price). Why so
# wide: the surpluses carry their last bits of rounding (10⁻¹⁶ of the surplus, another on each CPU), so a
# slope read from them is noise within ε·S/(2h·S″) of the peak — about 10⁻¹³ in log price at this h — and
# the peak found is the same on every machine to that; the central difference moves the peak by about
# h²·S‴/S″ (10⁻⁷ in log price, the same everywhere), which costs 10⁻¹⁴ of the surplus.
SLOPE_STEP = 1e-3


def _finish(name: str, s: Sellers, f: Forecaster, m: Market, eps: np.ndarray, *, pay: np.ndarray,
            members: np.ndarray, price: float | None = None) -> Outcome:
    """The outcome of ``members`` taking part at ``eps`` for ``pay`` (others: zeros)."""
    eps, pay = np.where(members, eps, 0.0), np.where(members, pay, 0.0)
    cost = np.where(members, s.cost(np.where(members, eps, 1.0)), 0.0)
    psi = float(f.coalitions(eps, s.records, members)[0])
    return Outcome(name, eps, pay, cost, s.gains(psi, members), members.astype(bool), psi,
                   learner_value(m.value, psi), price, np.asarray(s.cost.coef, dtype=float))


def _ration(s: Sellers, pay: np.ndarray, willing: np.ndarray, budget: float | None) -> np.ndarray:
    """Accept willing owners, most records per unit of payment first, while the budget lasts; one
    offer per row of ``pay`` and ``willing`` ((N,) or (P, N): a Stackelberg learner's prices)."""
    if budget is None:
        return np.array(willing, dtype=bool)
    pays, offers = np.atleast_2d(pay), np.atleast_2d(willing)
    order = np.argsort(-s.records / np.maximum(pays, 1e-300), axis=1, kind="stable")
    rows, taken, left = np.arange(len(pays)), np.zeros(pays.shape, bool), np.full(len(pays), float(budget))
    for k in range(pays.shape[1]):  # the greedy pass, every row's k-th owner in its order at once
        i = order[:, k]
        cost = pays[rows, i]
        taken[rows, i] = offers[rows, i] & (cost <= left)
        left = np.where(taken[rows, i], left - cost, left)
    return taken.reshape(np.shape(willing))


def _individual_offers(name: str, s: Sellers, f: Forecaster, m: Market, eps: np.ndarray,
                       *, pay: np.ndarray, price: float | None) -> Outcome:
    """Owners take an individual offer (ε_i, pay_i) when it leaves them no worse off.

    First on money alone (within the budget, see :func:`_ration`); then, if owners value the
    shared model, a declining owner joins when its offer plus the model's value is
    non-negative *after* it joins and every earlier joiner stays so too — a joiner with a
    small ε can raise ψ̂ under the forecast and so lower everyone's gain.
    """
    return _finish(name, s, f, m, eps, pay=pay, members=_takers(s, f, m, eps, pay), price=price)


def _takers(s: Sellers, f: Forecaster, m: Market, eps: np.ndarray, pay: np.ndarray) -> np.ndarray:
    """Who takes individual offers (ε_i, pay_i): see :func:`_individual_offers`; one set of offers
    per row of ``eps`` and ``pay`` ((N,) or (P, N))."""
    money = pay - s.cost(eps)
    members = _ration(s, pay, money >= 0, m.budget)
    if s.model_value > 0:
        rows = (np.atleast_2d(x) for x in (eps, pay, money, members))
        joined = [_join_for_model(s, f, m, e, p, money=mo, members=mem)
                  for e, p, mo, mem in zip(*rows, strict=True)]
        members = np.reshape(joined, members.shape)
    return members


def _join_for_model(s: Sellers, f: Forecaster, m: Market, eps: np.ndarray, pay: np.ndarray,
                    *, money: np.ndarray, members: np.ndarray) -> np.ndarray:
    """Add owners that the model's value makes willing, one at a time, keeping everyone rational."""
    left = np.inf if m.budget is None else m.budget - float(pay[members].sum())
    for i in np.argsort(-s.records / np.maximum(pay, 1e-300), kind="stable"):
        if members[i] or pay[i] > left:
            continue
        trial = members.copy()
        trial[i] = True
        psi = float(f.coalitions(eps, s.records, trial)[0])
        if np.all((money + s.gains(psi, trial))[trial] >= 0):
            members, left = trial, left - pay[i]
    return members


def posted_price(s: Sellers, f: Forecaster, m: Market, price: float | None = None) -> Outcome:
    """A price p per unit ε: each owner picks its best response ε_i and is paid p ε_i.

    Owners best-respond on [ε_min, ε_max] (quadratic: ε_i = clip(p/c_i)) and decline when even
    their best ε costs more than it pays. With a budget the learner accepts takers, most
    records per unit of payment first, while the budget lasts.
    """
    p = m.price if price is None else price
    eps, pay = _posted_offers(s, p)
    return _individual_offers("posted_price", s, f, m, eps, pay=pay, price=p)


def _posted_offers(s: Sellers, price: float | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every owner's best-response ε at ``price`` per unit ε, and what it would be paid: (N,) each,
    or (P, N) for an array of P prices."""
    p = np.asarray(price, dtype=float)[..., None]
    eps = np.asarray(s.cost.best_response(p, s.eps_min, s.eps_max), dtype=float)
    eps = np.array(np.broadcast_to(eps, p.shape[:-1] + (s.count,)))  # one cost coefficient: one ε for all
    return eps, p * eps


def record_price(s: Sellers, f: Forecaster, m: Market) -> Outcome:
    """A price p (``price_per_record``) per record·ε: owner i faces the unit price p n_i, so
    larger owners sell more ε.

    Paying for records and ε together follows the forecast, where an owner's weight grows
    with its records: ε_i = best response to p n_i, payment p n_i ε_i.
    """
    unit = m.price_per_record * s.records
    eps = np.asarray(s.cost.best_response(unit, s.eps_min, s.eps_max), dtype=float)
    return _individual_offers("record_price", s, f, m, eps, pay=unit * eps, price=m.price_per_record)


def take_it_or_leave_it(s: Sellers, f: Forecaster, m: Market) -> Outcome:
    """Every owner is offered p·ε̄ for ε = ε̄ (``offer_epsilon``); it accepts iff C_i(ε̄) ≤ p ε̄."""
    eps = np.full(s.count, m.offer_epsilon)
    return _individual_offers("take_it_or_leave_it", s, f, m, eps, pay=m.price * eps, price=m.price)


def budget_epsilons(s: Sellers, masks: np.ndarray, budget: float,
                    weights: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per coalition (rows of ``masks``): the ε minimising Σ a_iε_i⁻² with Σ C_i(ε_i) ≤ B, and feasibility.

    ``weights`` a_i (rows like ``masks``; default 1) are the forecast's weights of each member's
    ε_i⁻² (equal under Theorem 2's form; under the law they follow π_i m_i², equal unless clock
    rates or caps differ). Convex problem; KKT gives 2a_iε_i⁻³ = μ C_i'(ε_i), i.e.
    C_i'(ε_i) ε_i³ = t a_i (t = 2/μ) clipped to the bounds, and the spend increases with t: t is
    found by bisection (on log t) so that the spend is B, or ε = ε_max everywhere when that is
    affordable. A coalition is feasible when its spend at ε_min fits the budget.
    """
    masks = np.atleast_2d(masks)
    a = np.ones(masks.shape) if weights is None else np.where(masks, weights, 1.0)
    a = np.where(a > 0, a, 1.0)  # a member whose ε does not matter: any positive weight

    def spend(t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        eps = s.cost.inverse_marginal_times_cube(t[:, None] * a, s.eps_min, s.eps_max)
        return eps, np.where(masks, s.cost(eps), 0.0).sum(axis=1)

    cube_lo = s.cost.marginal(np.full(s.count, s.eps_min)) * s.eps_min**3 / a
    cube_hi = s.cost.marginal(np.full(s.count, s.eps_max)) * s.eps_max**3 / a
    lo = np.log(cube_lo.min(axis=1)) - 1
    hi = np.log(cube_hi.max(axis=1)) + 1
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        over = spend(np.exp(mid))[1] > budget
        higher, lower = np.where(over, mid, hi), np.where(over, lo, mid)
        # lo and hi a float apart in every row: the next steps change nothing (the state is a fixed
        # point), so stopping here gives the bits 100 steps would — in about 60
        if np.array_equal(lower, lo) and np.array_equal(higher, hi):
            break
        hi, lo = higher, lower
    eps, _ = spend(np.exp(lo))  # lo: the largest t found whose spend is within the budget
    feasible = np.where(masks, s.cost(np.full(s.count, s.eps_min)), 0.0).sum(axis=1) <= budget
    return eps, feasible


def _coalitions(s: Sellers) -> np.ndarray:
    """Candidate coalitions: all non-empty subsets for small N, else the N prefixes of the
    owners ordered by cost per record at ε_min (a heuristic for large N, stated in the README)."""
    if s.count <= EXHAUSTIVE_UP_TO:
        bits = np.array(list(itertools.product([False, True], repeat=s.count)))
        return bits[bits.any(axis=1)]
    order = np.argsort(s.cost(np.full(s.count, s.eps_min)) / s.records, kind="stable")
    masks = np.zeros((s.count, s.count), bool)
    for k in range(s.count):
        masks[k, order[: k + 1]] = True
    return masks


def procurement(s: Sellers, f: Forecaster, m: Market) -> Outcome:
    """First-best procurement: the coalition and ε minimising ψ̂ with Σ C_i(ε_i) ≤ B, each paid its cost.

    For a fixed coalition ψ̂ falls as Σ a_iε_i⁻² falls (a_i the forecast's noise weights), so within
    a coalition this is :func:`budget_epsilons`; coalitions are searched exhaustively for N ≤ 10,
    over cost-ordered prefixes beyond. Owners get exactly their cost (utility 0, plus any model value).
    """
    masks = _coalitions(s)
    eps, feasible = budget_epsilons(s, masks, m.budget, f.noise_weights(s.records, masks))
    psi = np.where(feasible, f.coalitions(eps, s.records, masks), np.inf)
    if not np.isfinite(psi).any():
        return _finish("procurement", s, f, m, np.zeros(s.count), pay=np.zeros(s.count),
                       members=np.zeros(s.count, bool))
    best = int(np.argmin(psi))
    members = masks[best]
    pay = np.where(members, s.cost(np.where(members, eps[best], 1.0)), 0.0)
    return _finish("procurement", s, f, m, eps[best], pay=pay, members=members)


def stackelberg(s: Sellers, f: Forecaster, m: Market) -> Outcome:
    """The posted price that maximises the learner's surplus, anticipating best responses.

    The learner leads: for each price p the owners' best responses (and decisions to take
    part) give ψ̂(p) and spend(p); the learner picks p maximising value·max(0, 1 − ψ̂) − spend
    (within the budget if there is one). Numeric: a log grid over the prices that can matter,
    plus the kinks where owners switch, then the peak beside the best grid point where the surplus's
    slope turns from rising to falling (:func:`_peak`): a maximum located by comparing values is
    decided by their last bits within √ε of it (10⁻⁸ of the price, another on each CPU), a slope's sign
    only within 10⁻¹³.
    """
    def surpluses(prices: np.ndarray) -> np.ndarray:
        """posted_price(s, f, m, price=p).surplus for each p, without building whole outcomes; the
        forecast is asked once for all the prices' coalitions."""
        eps, pay = _posted_offers(s, prices)
        members = _takers(s, f, m, eps, pay)  # rationed within any budget
        psi = f.coalitions(eps, s.records, members)
        spend = np.where(members, pay, 0.0).sum(axis=1)
        return m.value * np.maximum(0.0, 1.0 - psi) - spend

    lo = float(np.min(s.cost.marginal(np.full(s.count, s.eps_min)))) / 4
    hi = float(np.max(s.cost.marginal(np.full(s.count, s.eps_max)))) * 4
    grid = np.unique(np.concatenate([np.geomspace(lo, hi, 241), np.atleast_1d(s.cost.coef) * (1 + 1e-9)]))
    values = surpluses(grid)
    k = int(np.argmax(values))
    a, b = np.log(grid[max(k - 1, 0)]), np.log(grid[min(k + 1, len(grid) - 1)])
    x = _peak(lambda x: surpluses(np.exp(x)), a, b)
    p = float(np.exp(x)) if surpluses(np.exp(np.array([x])))[0] > values[k] else float(grid[k])
    return replace(posted_price(s, f, m, price=p), policy="stackelberg")


def _peak(values: Callable[[np.ndarray], np.ndarray], a: float, b: float, *, step: float = SLOPE_STEP,
          tol: float = 1e-11, points: int = BRACKET_POINTS) -> float:
    """The point of [a, b] where the slope of ``values`` turns from rising to falling, found by
    bisection on the slope's sign: each round reads ``points`` equally spaced points' slopes from
    values(x ± step) in one call (the forecast prices a batch of coalitions for about the cost of one)
    and keeps the interval where the first falling slope follows a rising one, until the bracket is
    narrower than ``tol``; a slope falling from ``a`` on gives ``a``, one rising to ``b`` gives ``b``.

    Robust to last-bit noise, as a comparison of values near a smooth maximum is not (see
    :data:`SLOPE_STEP`): a wrong sign can only be read where the slope is within the noise of zero, so
    every machine ends within that distance of the same peak. A jump in ``values`` (an owner joining
    at a price) gives a slope far from zero, read alike everywhere. About log(w/tol)/log(points − 1)
    rounds of 2·``points`` values (11 rounds of 18 for Stackelberg's bracket)."""
    while b - a > tol:
        xs = np.linspace(a, b, points)
        both = values(np.concatenate([xs - step, xs + step]))
        falling = both[points:] <= both[:points]
        if falling[0]:
            return float(a)
        if not falling.any():
            return float(b)
        j = int(np.argmax(falling))
        a, b = xs[j - 1], xs[j]
    return float(0.5 * (a + b))


def auction(s: Sellers, f: Forecaster, m: Market, bids: np.ndarray | None = None) -> Outcome:
    """Truthful threshold reverse auction for ε̄ (``offer_epsilon``), reserve price p per unit ε.

    Owners bid cost coefficients b_i (truthfully b_i = c_i). Let R = p ε̄ (the reserve) and
    k = ``winners`` (default N), reduced to ⌊B/R⌋ with a budget. Owners whose bid cost
    B_i(ε̄) exceeds R are out; the k lowest remaining bids win (ties by index) and every
    winner is paid the threshold P = min(R, cost of the (k+1)-th lowest eligible bid).

    Truthfulness: owner i wins iff b_i ranks among the k lowest and B_i(ε̄) ≤ R, i.e. iff its
    bid cost is below the critical value min(R, k-th lowest bid cost among the others) —
    which does not depend on b_i — and a winner is paid exactly that critical value. So the
    outcome is a threshold price independent of the own bid: bidding truly wins exactly when
    the threshold covers the true cost (utility P − C_i(ε̄) ≥ 0), and a misreport either
    changes nothing or switches to winning at a loss or losing a gain. Individually rational
    (P ≥ true cost for truthful winners) and within budget (k·P ≤ ⌊B/R⌋·R ≤ B).
    """
    bids = s.cost.coef if bids is None else np.asarray(bids, dtype=float)
    eps_bar, reserve = m.offer_epsilon, m.price * m.offer_epsilon
    k = m.winners or s.count
    if m.budget is not None:
        k = min(k, int(np.floor(m.budget / reserve)))
    bid_cost = Cost(s.cost.kind, bids)(np.full(s.count, eps_bar))
    eligible = np.flatnonzero(bid_cost <= reserve)
    ranked = eligible[np.argsort(bid_cost[eligible], kind="stable")]
    winners = ranked[:k]
    threshold = min(reserve, float(bid_cost[ranked[k]])) if len(ranked) > k else reserve
    members = np.zeros(s.count, bool)
    members[winners] = True
    return _finish("auction", s, f, m, np.full(s.count, eps_bar), pay=np.full(s.count, threshold),
                   members=members, price=m.price)


def coalition_values(s: Sellers, f: Forecaster, m: Market, eps: np.ndarray, masks) -> np.ndarray:
    """V(S) = value·max(0, 1 − ψ̂(S)) for each coalition in ``masks`` (or prefixes); V(∅) = 0."""
    psi = f.coalitions(eps, s.records, masks)
    return m.value * np.maximum(0.0, 1.0 - psi)


def shapley(s: Sellers, f: Forecaster, m: Market, eps: np.ndarray, players: np.ndarray,
            *, seed: int) -> np.ndarray:
    """Shapley values of the ``players`` in the game V (others absent); exact for ≤ 20 players.

    Exact: φ_i = Σ_{S ∌ i} |S|!(k−|S|−1)!/k! (V(S ∪ i) − V(S)) over all subsets, their worths from one
    batched ``f.coalitions`` call (:func:`exact_shapley`). Beyond 20 players: the mean marginal
    contribution over ``market.shapley_samples`` random orders drawn from the "market" stream
    (unbiased; its standard error falls as 1/√samples, :func:`shapley_with_error`).
    """
    return shapley_with_error(s, f, m, eps, players, seed=seed)[0]


def shapley_with_error(s: Sellers, f: Forecaster, m: Market, eps: np.ndarray, players: np.ndarray,
                       *, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(φ, its standard error per owner): the error is 0 where φ is exact (≤ 20 players)."""
    idx = np.flatnonzero(players)
    if len(idx) == 0:
        return np.zeros(s.count), np.zeros(s.count)
    if len(idx) <= SHAPLEY_EXACT_UP_TO:
        return exact_shapley(lambda c: coalition_values(s, f, m, eps, c), idx, s.count), np.zeros(s.count)
    return sampled_shapley(s, f, m, eps, idx, gen=streams.stream(seed, "market", SHAPLEY_STREAM))


def exact_shapley(worth: Callable, idx: np.ndarray, owners: int) -> np.ndarray:
    """Exact Shapley values of the players ``idx`` in the game ``worth`` (V of coalitions given as a
    (K, owners) mask or as members.Subsets; V(∅) = 0), by enumeration: the 2^k worths in one call,
    then per player a weighted sum over the 2^(k−1) subsets without it (vectorised). Up to 10 players
    the coalitions go as masks in itertools' order (the values are those of the loop this replaced,
    to the bit); beyond, as :class:`Subsets` (~1 M for 20 players, no (K, N) mask)."""
    k = len(idx)
    codes = np.arange(1 << k, dtype=np.int64)
    if k <= EXHAUSTIVE_UP_TO:
        masks = np.zeros((len(codes), owners), bool)
        masks[:, idx] = ((codes[:, None] >> np.arange(k - 1, -1, -1)) & 1).astype(bool)
        v = np.asarray(worth(masks), dtype=float)
    else:
        v = np.asarray(worth(Subsets(np.asarray(idx), owners)), dtype=float)
    v[0] = 0.0  # V(∅) = 0 whatever the game says of nobody
    size = _popcount(codes)
    by_size = np.array([factorial(z) * factorial(k - z - 1) / factorial(k) if z < k else 0.0
                        for z in range(k + 1)])
    weight = by_size[size]
    phi = np.zeros(owners)
    for j, i in enumerate(idx):
        bit = np.int64(1) << (k - 1 - j)
        without = (codes & bit) == 0
        phi[i] = np.sum(weight[without] * (v[codes[without] | bit] - v[without]))
    return phi


def _popcount(codes: np.ndarray) -> np.ndarray:
    """Set bits per code (numpy ≥ 2 has it built in)."""
    if hasattr(np, "bitwise_count"):
        return np.bitwise_count(codes).astype(np.int64)
    count, rest = np.zeros_like(codes), codes.copy()
    while rest.any():
        count += rest & 1
        rest >>= 1
    return count


def sampled_shapley(s: Sellers, f: Forecaster, m: Market, eps: np.ndarray, idx: np.ndarray,
                    *, gen: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Monte-Carlo Shapley values and their standard errors: marginal contributions along random
    orders of ``idx`` (each order gives every player one contribution; φ is their mean, the error
    their standard deviation over √samples).

    Every prefix of every order is a coalition whose value comes from ``f.coalitions``, like any
    other; given as :class:`Prefixes`, the forecast sums along the orders instead of over masks.
    """
    orders = gen.permuted(np.tile(idx, (m.shapley_samples, 1)), axis=1)
    v = coalition_values(s, f, m, eps, Prefixes(orders)).reshape(orders.shape)
    marginal = np.diff(np.concatenate([np.zeros((len(v), 1)), v], axis=1), axis=1)
    phi = np.zeros(s.count)
    np.add.at(phi, orders.ravel(), marginal.ravel())
    phi /= m.shapley_samples
    per_order = np.zeros((len(orders), s.count))
    per_order[np.arange(len(orders))[:, None], orders] = marginal
    se = np.zeros(s.count)
    if m.shapley_samples > 1:
        se[idx] = per_order[:, idx].std(axis=0, ddof=1) / np.sqrt(m.shapley_samples)
    return phi, se


def leave_one_out(s: Sellers, f: Forecaster, m: Market, eps: np.ndarray, players: np.ndarray) -> np.ndarray:
    """φ_i = V(S) − V(S ∖ {i}) for the players S (0 for others)."""
    masks = np.tile(players, (s.count, 1))
    masks[np.arange(s.count), np.arange(s.count)] = False
    full = coalition_values(s, f, m, eps, players[None, :])[0]
    return np.where(players, full - coalition_values(s, f, m, eps, masks), 0.0)


def marginal(s: Sellers, f: Forecaster, m: Market, seed: int = 0) -> Outcome:
    """Payment by marginal contribution on the forecast, every owner at ε̄ (``offer_epsilon``).

    Owner i is paid its Shapley value (or leave-one-out contribution, ``contribution``) in the
    game V(S) = value·max(0, 1 − ψ̂(S)), scaled down pro rata if the total exceeds the budget.
    Owners whose payment does not cover C_i(ε̄) leave, and payments are recomputed among
    those who stay, until everyone left is individually rational. Full Shapley pays out
    V(S) (efficiency), so the learner's surplus is then 0: the learner shares all its value.
    """
    eps = np.full(s.count, m.offer_epsilon)
    members = np.ones(s.count, bool)
    own_cost = s.cost(eps)
    for _ in range(s.count + 1):
        if m.contribution == "shapley":
            pay = shapley(s, f, m, eps, members, seed=seed)
        else:
            pay = leave_one_out(s, f, m, eps, members)
        if m.budget is not None and pay.sum() > m.budget:
            pay = pay * (m.budget / pay.sum())
        losing = members & (pay < own_cost)
        if not losing.any():
            break
        members &= ~losing
    return _finish("marginal", s, f, m, eps, pay=pay, members=members)


POLICIES: dict[str, Callable[..., Outcome]] = {
    "posted_price": posted_price, "record_price": record_price,
    "take_it_or_leave_it": take_it_or_leave_it, "procurement": procurement,
    "stackelberg": stackelberg, "auction": auction, "marginal": marginal,
}


def settle(policy: str, s: Sellers, f: Forecaster, m: Market, seed: int = 0) -> Outcome:
    """Run ``policy`` (``seed`` drives the only random policy step, sampled Shapley values)."""
    if policy == "marginal":
        return marginal(s, f, m, seed)
    return POLICIES[policy](s, f, m)
