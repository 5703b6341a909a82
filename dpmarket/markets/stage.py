"""The market stage of a run: sellers, forecast and policy → who takes part, at which ε.

Sits between data and simulation in the one-way flow. It reads public information only: the owners'
sizes and costs (and, only when owners value the shared model, their own-data ψ as declared or as the
public proxy estimates it), never the records or the simulation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from dpmarket.errors import MarketError
from dpmarket.markets.forecast import Forecaster
from dpmarket.markets.outcome import Outcome
from dpmarket.markets.policies import settle
from dpmarket.markets.sellers import Sellers, build_sellers
from dpmarket.scenario.schema import Scenario

if TYPE_CHECKING:
    from dpmarket.data.problem import Prepared
    from dpmarket.markets.dynamic import DynamicMarket


@dataclass(frozen=True)
class MarketStage:
    """The outcome of the scenario's policy and the forecast it was negotiated with."""

    outcome: Outcome
    forecast: Forecaster
    source: str  # where the forecast came from (names an oracle calibration on the owners' records)
    dynamic: DynamicMarket | None = None  # the market in time, after the run (market.mode = "dynamic")
    own_psi: np.ndarray | None = None  # the own-data ψ the owners decided with (public; model_value > 0)


def sellers_of(scenario: Scenario, prepared: Prepared) -> Sellers:
    """The sellers of ``scenario``: public sizes and costs, and, only if owners value the model, their
    own-data ψ as public information shows it (declared, or the proxy's estimate; never ψ(θ_i*) on their
    records, which would publish a function of them through the market's outcome)."""
    own = None
    if scenario.market.model_value > 0:
        from dpmarket.data.proxy import public_own_psi  # deferred: builds the proxy when needed

        own = public_own_psi(scenario, prepared.consortium)
    return build_sellers(scenario, prepared.consortium.sizes, own)


def settle_market(scenario: Scenario, sellers: Sellers, forecast: Forecaster, source: str,
                  policy: str | None = None) -> MarketStage:
    """The market of ``scenario`` (or ``policy`` instead of its own) negotiated with ``forecast``
    (which ``source`` describes); an error if nobody joins. The forecast is an input: how it was
    calibrated is :func:`dpmarket.runs.pilots.market_stage`'s business."""
    name = policy or scenario.market.policy
    outcome = settle(name, sellers, forecast, scenario.market, scenario.seed)
    if not outcome.participates.any():
        raise MarketError(f"{scenario.name}: market.policy = {name!r}: no owner takes part at these "
                          "terms (raise market.price, market.budget or market.value)")
    return MarketStage(outcome, forecast, source, own_psi=sellers.own_psi)
