"""Owners who deviate: one misreports its privacy cost, or splits its records into fake owners.

**Misreport** (truthfulness). Owner i reports b·c_i instead of its cost coefficient c_i, for each
factor b of a grid, the others truthful; its report replaces c_i in everything the policy computes
(a posted price's best response is the response of an owner of cost b·c_i; procurement and the
Stackelberg learner plan with it; the auction ranks it). Its gain is its true utility under the
best misreport, payment − C_i(ε_i) + its model gain, minus its truthful utility: ≥ 0, since the
truth is among its options. A policy is truthful when no owner gains.

**Replication** (Sybil robustness). Owner i splits its n_i records into k fake owners of n_i/k
records each, every one with i's cost function and clock (k identities ask to be queried k times as
often). Under parallel composition each record is protected by the ε of the fake that holds it, so
the owner's privacy cost is the records-weighted mean of C_i(ε_j) over its fakes (C_i(ε) when they
sell the same ε); it collects every fake's payment, and values the shared model once. Its gain is
that utility minus its utility as one owner. The forecast of the split market is the same law with
i's public inputs given to each fake (clock rate, cap, δ) and its heterogeneity scaled to n_i/k
records: the part that comes from sampling its records grows k-fold, the declared shift does not.

Both re-settle the policy on the forecast; nothing here trains.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from dpmarket.markets.costs import Cost
from dpmarket.markets.forecast import Forecast, Forecaster
from dpmarket.markets.law import LawForecast
from dpmarket.markets.outcome import Outcome
from dpmarket.markets.policies import settle
from dpmarket.markets.sellers import Sellers
from dpmarket.scenario.schema import Market

FACTORS = tuple(float(x) for x in 2.0 ** np.linspace(-2.0, 2.0, 9) if not np.isclose(x, 1.0))  # ¼ … 4
PARTS = (2, 4)


def utility(outcome: Outcome, s: Sellers, owner: int) -> float:
    """Owner ``owner``'s true utility in ``outcome`` (settled on possibly misreported costs): its
    payment minus its true cost of the ε it sells, plus its value of the shared model."""
    if not outcome.participates[owner]:
        return float(outcome.payment[owner] + outcome.gain[owner])
    true_cost = float(Cost(s.cost.kind, np.asarray(s.cost.coef, dtype=float)[owner])(outcome.epsilon[owner]))
    return float(outcome.payment[owner] - true_cost + outcome.gain[owner])


def reported(s: Sellers, owner: int, factor: float) -> Sellers:
    """The sellers as the policy sees them when ``owner`` reports ``factor`` times its coefficient."""
    coef = np.array(np.broadcast_to(np.asarray(s.cost.coef, dtype=float), (s.count,)))
    coef[owner] *= factor
    return replace(s, cost=Cost(s.cost.kind, coef))


def misreport_utilities(policy: str, s: Sellers, f: Forecaster, m: Market, seed: int,
                        *, factors: tuple[float, ...] = FACTORS) -> np.ndarray:
    """(N, G): each owner's true utility when it alone reports each factor of ``factors``."""
    out = np.empty((s.count, len(factors)))
    for i in range(s.count):
        for g, factor in enumerate(factors):
            out[i, g] = utility(settle(policy, reported(s, i, factor), f, m, seed), s, i)
    return out


def split_sellers(s: Sellers, owner: int, parts: int) -> Sellers:
    """The sellers with ``owner`` replaced by ``parts`` fakes of equal size, appended last."""
    keep = np.arange(s.count) != owner
    coef = np.broadcast_to(np.asarray(s.cost.coef, dtype=float), (s.count,))
    own = None if s.own_psi is None else np.concatenate([s.own_psi[keep], np.repeat(s.own_psi[owner], parts)])
    return replace(s, cost=Cost(s.cost.kind, np.concatenate([coef[keep], np.repeat(coef[owner], parts)])),
                   records=np.concatenate([s.records[keep], np.full(parts, s.records[owner] / parts)]),
                   own_psi=own)


def _split(values: np.ndarray, owner: int, parts: int, scale: np.ndarray | float = 1.0) -> np.ndarray:
    """Per-owner ``values`` (rows) with ``owner``'s row moved last and repeated ``parts`` times (× scale)."""
    values = np.asarray(values)
    keep = np.arange(len(values)) != owner
    fake = np.repeat(values[owner:owner + 1], parts, axis=0) * scale
    return np.concatenate([values[keep], fake], axis=0)


def split_forecast(f: Forecaster, owner: int, parts: int) -> Forecaster:
    """The forecast of the market where ``owner`` is ``parts`` fakes (appended last, as
    :func:`split_sellers`): per-owner public inputs repeated, heterogeneity scaled (module docstring)."""
    if isinstance(f, LawForecast):
        inputs = f.inputs
        share = 1.0 if inputs.sampling is None else float(inputs.sampling[owner])
        grow = (1.0 - share) + share * parts  # the sampling part of a fake of n_i/k records is k-fold
        noise = inputs.noise if inputs.noise is None else replace(
            inputs.noise, deltas=_split(inputs.noise.deltas, owner, parts))
        split = replace(inputs, clock_rates=_split(inputs.clock_rates, owner, parts),
                        caps=_split(inputs.caps, owner, parts),
                        heterogeneity=_split(inputs.heterogeneity, owner, parts, grow),
                        selection=_split(inputs.selection, owner, parts, grow), noise=noise,
                        sampling=None if inputs.sampling is None else _split(inputs.sampling, owner, parts))
        return replace(f, inputs=split)
    if isinstance(f, Forecast) and f.noise is not None:
        n = f.noise
        rates = None if n.rates is None else _split(n.rates, owner, parts)
        return replace(f, noise=replace(n, deltas=_split(n.deltas, owner, parts), rates=rates,
                                        caps=_split(n.caps, owner, parts)))
    return f


def split_utility(policy: str, s: Sellers, f: Forecaster, m: Market, seed: int, *, owner: int,
                  parts: int) -> float:
    """``owner``'s utility when it enters the market as ``parts`` fakes (module docstring)."""
    sellers = split_sellers(s, owner, parts)
    outcome = settle(policy, sellers, split_forecast(f, owner, parts), m, seed)
    fakes = np.arange(s.count - 1, s.count - 1 + parts)
    cost = Cost(s.cost.kind, np.asarray(sellers.cost.coef, dtype=float)[fakes])(outcome.epsilon[fakes])
    cost = np.where(outcome.participates[fakes], cost, 0.0)
    gain = 0.0
    if outcome.participates[fakes].any() and s.model_value > 0 and s.own_psi is not None:
        gain = s.model_value * max(0.0, float(s.own_psi[owner]) - outcome.psi_forecast)
    return float(np.sum(outcome.payment[fakes]) - np.mean(cost) + gain)


def split_utilities(policy: str, s: Sellers, f: Forecaster, m: Market, seed: int,
                    *, parts: tuple[int, ...] = PARTS) -> np.ndarray:
    """(N, len(parts)): each owner's utility when it alone splits into each number of fakes."""
    return np.array([[split_utility(policy, s, f, m, seed, owner=i, parts=k) for k in parts]
                     for i in range(s.count)])
