"""Welfare, and the best welfare any choice of coalition and budgets reaches under the forecast.

Welfare is what the deal creates, payments aside (they move money between learner and owners and
cancel): W(S, ε) = value·max(0, 1 − ψ̂(S, ε)) − Σ_{i∈S} C_i(ε_i) + Σ_{i∈S} g_i(ψ̂), g_i an owner's
value of the shared model (0 unless ``market.model_value``). The efficiency of a policy is its W
over the best W* reachable under the same forecast — the first best (any coalition, any ε in
[ε_min, ε_max]), and, when the market has a budget, the best within it (Σ C_i(ε_i) ≤ B: an
individually rational policy pays at least the costs, so none that keeps its budget can do better).

For one coalition S the forecast's noise term grows with Σ_i a_iε_i⁻² (a_i its noise weights,
``forecast.noise_weights``), so the ε maximising W solve C_i'(ε_i)ε_i³ = t·a_i for one t ≥ 0 (the
first-order condition; each owner's problem is convex) — the family ``budget_epsilons`` walks
along for procurement. W along the family is maximised by a grid on log t followed by a
golden-section refinement, for all coalitions at once; with a budget t stops where the spend
reaches B. Coalitions: all 2^N − 1 for N ≤ 12; beyond, a stated search (:func:`best_welfare`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from dpmarket.markets.forecast import Forecaster
from dpmarket.markets.outcome import Outcome
from dpmarket.markets.sellers import Sellers
from dpmarket.scenario.schema import Market

EXHAUSTIVE_UP_TO = 12  # owners: every coalition (4,095 at 12); beyond, local search
GRID = 24  # points on log t before the golden-section refinement
GOLDEN = 30  # refinement steps: the bracket shrinks by 0.618^30 ≈ 5e-7 of a grid step


@dataclass(frozen=True)
class Best:
    """The best welfare found, where, and how it was found."""

    welfare: float
    members: np.ndarray  # bool (N,)
    epsilon: np.ndarray  # (N,), 0 outside
    psi: float
    method: str


def realised(outcome: Outcome, s: Sellers, value: float, psi: float | np.ndarray) -> np.ndarray:
    """W of ``outcome`` with the learner's value and the owners' model gains at each ψ given (the
    forecast's, or each replication's simulated ψ): payments cancel, costs do not depend on ψ."""
    psi = np.atleast_1d(np.asarray(psi, dtype=float))
    learner = value * np.maximum(0.0, 1.0 - psi)
    gains = np.zeros(len(psi))
    if s.model_value > 0 and s.own_psi is not None:
        own = s.own_psi[outcome.participates]
        gains = s.model_value * np.maximum(0.0, own[None, :] - psi[:, None]).sum(axis=1)
    return learner - float(np.sum(outcome.cost)) + gains


def welfare_at(s: Sellers, f: Forecaster, m: Market, eps: np.ndarray, masks: np.ndarray) -> np.ndarray:
    """W of each coalition (rows of ``masks``) at its own ε (rows of ``eps``)."""
    eps = np.where(masks, eps, 0.0)
    psi = f.coalitions(eps, s.records, masks)
    cost = np.where(masks, s.cost(np.where(masks, eps, 1.0)), 0.0).sum(axis=1)
    learner = m.value * np.maximum(0.0, 1.0 - psi)
    gains = 0.0
    if s.model_value > 0 and s.own_psi is not None:
        own = np.maximum(0.0, s.own_psi[None, :] - psi[:, None])
        gains = np.where(masks, s.model_value * own, 0.0).sum(axis=1)
    return np.where(masks.any(axis=1), learner - cost + gains, 0.0)


def _family(s: Sellers, weights: np.ndarray, log_t: np.ndarray) -> np.ndarray:
    """ε on the family C_i'(ε)ε³ = t·a_i for each coalition's t (rows of ``weights`` are its a_i)."""
    return s.cost.inverse_marginal_times_cube(np.exp(log_t)[:, None] * weights, s.eps_min, s.eps_max)


def _brackets(s: Sellers, weights: np.ndarray, masks: np.ndarray, budget: float | None):
    """(lower, upper) log t per coalition: where every member is at ε_min resp. ε_max, widened by 1;
    with a budget the upper end is where the spend reaches B (bisection, as budget_epsilons), and a
    coalition that cannot afford ε_min for all members gets no interval (NaN)."""
    low_cube = s.cost.marginal(np.full(s.count, s.eps_min)) * s.eps_min**3 / weights
    high_cube = s.cost.marginal(np.full(s.count, s.eps_max)) * s.eps_max**3 / weights
    lo = np.log(np.where(masks, low_cube, np.inf).min(axis=1)) - 1.0
    hi = np.log(np.where(masks, high_cube, 0.0).max(axis=1)) + 1.0
    if budget is None:
        return lo, hi
    floor_spend = np.where(masks, s.cost(np.full(s.count, s.eps_min)), 0.0).sum(axis=1)
    a, b = lo.copy(), hi.copy()
    for _ in range(60):
        mid = 0.5 * (a + b)
        over = np.where(masks, s.cost(_family(s, weights, mid)), 0.0).sum(axis=1) > budget
        b, a = np.where(over, mid, b), np.where(over, a, mid)
    return np.where(floor_spend <= budget, lo, np.nan), np.where(floor_spend <= budget, a, np.nan)


def best_budgets(s: Sellers, f: Forecaster, m: Market, masks: np.ndarray,
                 budget: float | None) -> tuple[np.ndarray, np.ndarray]:
    """(best W, its ε) per coalition (rows of ``masks``), within ``budget`` on costs if given."""
    masks = np.atleast_2d(masks)
    weights = f.noise_weights(s.records, masks)
    weights = np.where(masks & (weights > 0), weights, 1.0)
    lo, hi = _brackets(s, weights, masks, budget)
    ok = np.isfinite(lo) & np.isfinite(hi)
    lo, hi = np.where(ok, lo, 0.0), np.where(ok, np.maximum(hi, lo), 0.0)
    grid = lo[:, None] + (hi - lo)[:, None] * np.linspace(0.0, 1.0, GRID)[None, :]

    def value(log_t: np.ndarray) -> np.ndarray:
        return welfare_at(s, f, m, _family(s, weights, log_t), masks)

    values = np.column_stack([value(grid[:, g]) for g in range(GRID)])
    k = np.argmax(values, axis=1)
    rows = np.arange(len(masks))
    a, b = grid[rows, np.maximum(k - 1, 0)], grid[rows, np.minimum(k + 1, GRID - 1)]
    ratio = (np.sqrt(5.0) - 1.0) / 2.0
    c, d = b - ratio * (b - a), a + ratio * (b - a)
    fc, fd = value(c), value(d)
    for _ in range(GOLDEN):  # golden-section search for the maximum, every coalition at once
        left = fc >= fd  # the maximum lies in [a, d]: drop (d, b]; else in [c, b]: drop [a, c)
        a, b = np.where(left, a, c), np.where(left, d, b)
        c, d = np.where(left, b - ratio * (b - a), d), np.where(left, c, a + ratio * (b - a))
        fresh = value(np.where(left, c, d))
        fc, fd = np.where(left, fresh, fd), np.where(left, fc, fresh)
    refined = np.where(fc >= fd, c, d)
    found = np.maximum(fc, fd)
    best_grid = values[rows, k]
    log_t = np.where(found >= best_grid, refined, grid[rows, k])
    welfare = np.maximum(found, best_grid)
    return np.where(ok, welfare, -np.inf), np.where(masks, _family(s, weights, log_t), 0.0)


def best_welfare(s: Sellers, f: Forecaster, m: Market, budget: float | None = None,
                 starts: list[np.ndarray] | None = None) -> Best:
    """The best W over coalitions and budgets (``budget``: on the members' costs).

    N ≤ 12: every non-empty coalition (exact up to the refinement's tolerance). Beyond: a local search
    — from the best of the N prefixes of the owners ordered by cost per record at ε_min and of the
    ``starts`` (the policies' own coalitions), flip the one owner whose joining or leaving raises W
    most, until none does (a lower bound on the best: a policy's efficiency can then exceed 1,
    which says the search missed its coalition, not that the policy beat the optimum).
    """
    if s.count <= EXHAUSTIVE_UP_TO:
        masks = np.array(list(itertools.product([False, True], repeat=s.count)))[1:]
        welfare, eps = best_budgets(s, f, m, masks, budget)
        k = int(np.argmax(welfare))
        method = f"exhaustive: all {len(masks):,} coalitions, budgets optimised on each"
        return _best(s, f, m, welfare[k], masks[k], eps=eps[k], method=method)
    order = np.argsort(s.cost(np.full(s.count, s.eps_min)) / s.records, kind="stable")
    prefixes = np.zeros((s.count, s.count), bool)
    for k in range(s.count):
        prefixes[k, order[: k + 1]] = True
    candidates = np.vstack([prefixes, *(np.atleast_2d(x) for x in (starts or []) if np.any(x))])
    welfare, eps = best_budgets(s, f, m, candidates, budget)
    k = int(np.argmax(welfare))
    current, value, current_eps = candidates[k].copy(), float(welfare[k]), eps[k]
    moves = 0
    while moves < 4 * s.count:
        moves += 1
        flips = np.tile(current, (s.count, 1))
        flips[np.arange(s.count), np.arange(s.count)] ^= True
        keep = flips.any(axis=1)
        w, e = best_budgets(s, f, m, flips[keep], budget)
        j = int(np.argmax(w))
        if not w[j] > value * (1 + 1e-12) + 1e-12:
            break
        current, value, current_eps = flips[keep][j], float(w[j]), e[j]
    method = (f"local search: best of {s.count} cost-per-record prefixes and {len(candidates) - s.count} "
              f"policy coalitions, then {moves} single-owner flip rounds; a lower bound")
    return _best(s, f, m, value, current, eps=current_eps, method=method)


def _best(s: Sellers, f: Forecaster, m: Market, welfare: float, members: np.ndarray, *, eps: np.ndarray,
          method: str) -> Best:
    """The :class:`Best` of a coalition; nobody at all (W = 0) when no coalition has positive W."""
    if not welfare > 0:
        return Best(0.0, np.zeros(s.count, bool), np.zeros(s.count), float("inf"), method)
    psi = float(f.coalitions(eps, s.records, members)[0])
    return Best(float(welfare), members.astype(bool), np.where(members, eps, 0.0), psi, method)
