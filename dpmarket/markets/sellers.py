"""The owners as sellers of ε: their cost functions, sizes, bounds and own-data baselines.

Cost coefficients come from ``[[owners]] cost_coef`` when given, else from
``market.costs`` (fixed, or one draw per owner from the "market" stream of the data seed, so
an owner's coefficient depends only on the seed and its index, like its records).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dpmarket import rng as streams
from dpmarket.data.magnitudes import ROOM
from dpmarket.errors import ScenarioError
from dpmarket.markets.costs import Cost
from dpmarket.scenario.schema import Scenario


@dataclass(frozen=True)
class Sellers:
    """Everything the policies know about the owners."""

    cost: Cost  # one kind, one coefficient per owner
    records: np.ndarray  # n_i
    eps_min: float
    eps_max: float
    own_psi: np.ndarray | None = None  # ψ(θ_i*) — only needed when owners value the model
    model_value: float = 0.0  # owners' worth of one unit of ψ improvement over their own model

    @property
    def count(self) -> int:
        """N."""
        return len(self.records)

    def gains(self, psi: float, members: np.ndarray) -> np.ndarray:
        """Each owner's value of a shared model of quality ψ̂, if it is a member (else 0)."""
        if self.model_value == 0 or self.own_psi is None or not np.isfinite(psi):
            return np.zeros(self.count)
        return np.where(members, self.model_value * np.maximum(0.0, self.own_psi - psi), 0.0)


def cost_coefficients(scenario: Scenario, owners: int) -> np.ndarray:
    """c_i per owner: the [[owners]] override, else the scenario's fixed or drawn coefficient."""
    costs = scenario.market.costs
    seed = scenario.seed if scenario.data.seed is None else scenario.data.seed
    coef = np.empty(owners)
    for i in range(owners):
        given = scenario.owner_value(i, "cost_coef")
        if given is not None:
            coef[i] = given
        elif costs.distribution == "fixed":
            coef[i] = costs.coef
        elif costs.distribution == "lognormal":
            coef[i] = costs.coef * np.exp(costs.sigma * streams.stream(seed, "market", i).standard_normal())
        else:
            coef[i] = streams.stream(seed, "market", i).uniform(costs.low, costs.high)
    return coef


def build_sellers(scenario: Scenario, records: np.ndarray, own_psi: np.ndarray | None) -> Sellers:
    """The sellers of ``scenario`` with sizes ``records`` (own ψ only used with a model value)."""
    m = scenario.market
    cost = Cost(m.costs.kind, cost_coefficients(scenario, len(records)))
    check_payments(scenario, cost)
    return Sellers(cost, np.asarray(records, dtype=float), m.epsilon_min, m.epsilon_max, own_psi,
                   m.model_value)


def check_payments(scenario: Scenario, cost: Cost) -> None:
    """Refuse an ε_max at which a cost or a payment could overflow: the largest amount a policy
    weighs is C(ε_max), or a price up to 4·C'(ε_max) (stackelberg's grid) times ε_max."""
    eps = scenario.market.epsilon_max
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow is reported below, naming the key
        top = float(np.max(np.maximum(cost(np.full(np.shape(cost.coef), eps)),
                                      4.0 * cost.marginal(np.full(np.shape(cost.coef), eps)) * eps)))
    if top <= ROOM:
        return
    raise ScenarioError(scenario.source, "market.epsilon_max", eps,
                        f"lets a cost or payment reach {top:.3g} (cost coefficients up to "
                        f"{float(np.max(cost.coef)):.3g}), beyond {ROOM:.0e}: the market would overflow")
