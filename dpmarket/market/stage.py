"""The market stage of a run: sellers, forecast and policy → who takes part, at which ε.

Sits between data and simulation in the one-way flow. It reads the owners' sizes (and, only
when owners value the shared model, their own-data ψ), never the simulation.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dpmarket.errors import MarketError
from dpmarket.market import calibration
from dpmarket.market.forecast import Forecaster
from dpmarket.market.outcome import Outcome
from dpmarket.market.policies import settle
from dpmarket.market.sellers import Sellers, build_sellers
from dpmarket.progress import SILENT, Progress
from dpmarket.scenario import Scenario

if TYPE_CHECKING:
    from dpmarket.market.dynamic import DynamicMarket
    from dpmarket.problem import Prepared


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


def settle_market(scenario: Scenario, prepared: Prepared, policy: str | None = None,
                  cache: Path | None = None, progress: Progress = SILENT) -> MarketStage:
    """Run the market of ``scenario`` (or ``policy`` instead of its own); error if nobody joins.
    ``progress`` hears of the pilot runs, when the forecast has to be calibrated."""
    sellers = sellers_of(scenario, prepared)  # first: its checks are cheap, the calibration is not
    forecast, source = calibration.resolve(scenario, prepared.consortium, prepared.objective, cache,
                                           progress=progress)
    name = policy or scenario.market.policy
    outcome = settle(name, sellers, forecast, scenario.market, scenario.seed)
    if not outcome.participates.any():
        raise MarketError(f"{scenario.name}: market.policy = {name!r}: no owner takes part at these "
                          "terms (raise market.price, market.budget or market.value)")
    return MarketStage(outcome, forecast, source)
