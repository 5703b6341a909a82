"""The market stage of a run: sellers, forecast and policy → who takes part, at which ε.

Sits between data and simulation in the one-way flow. It reads the owners' sizes (and, only
when owners value the shared model, their own-data ψ), never the simulation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

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


def sellers_of(scenario: Scenario, prepared: Prepared) -> Sellers:
    """The sellers of ``scenario`` (own-data ψ passed on only if owners value the model)."""
    own = prepared.own_psi if scenario.market.model_value > 0 else None
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
    return MarketStage(outcome, forecast, source)
