"""Sizes a scenario asks for that cannot fit in memory, refused when it is validated.

``data.records = 10¹²``, ``data.features = 10⁶``, ``network.channels = 10⁹``, ``market.shapley_samples
= 10⁹``, 10⁷ owners, or procurement's N × N coalitions on 10⁵ owners used to end deep inside numpy in a
MemoryError traceback, or in hours of swapping. Each stage that allocates in proportion to a user's
size has a term here: a lower bound of the bytes it holds at once (an array it cannot do without,
or the owners' state at a per-owner cost below the measured one). If the largest term exceeds the
memory there is (:func:`dpmarket.system.memory.available`), the scenario is refused at once, naming
that term's key, its value and the size. The largest term, not their sum: each is a lower bound of
the run's peak, their sum need not be, and nothing that fits may be refused.

Table data's owners and rows are known only once the table is read, so only the terms that do not
depend on them count there.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from dpmarket.errors import ScenarioError
from dpmarket.scenario.schema import ForecastConstants
from dpmarket.system import memory

FLOAT = 8
# Per owner, whatever its data: its DataOwner, ledger and noise stream, the learner's copy, the
# engine's clock and link, the public twin's summary (tracemalloc: 2.5 kB for owners of 50 records
# and 3 features, 29 kB for mobile_devices' phones, which also keep their records).
OWNER_BYTES = 1_500
CHANNEL_BYTES = 200  # a Channel object and its entries in the engine's per-channel lists
EXHAUSTIVE_UP_TO = 10  # dpmarket.markets.policies: coalitions (or Shapley players) enumerated up to this N
Term = tuple[str, Any, float, str]  # (key, value, bytes, what needs them)


def refuse_impossible_sizes(scenario, source: str, policies: Iterable[str] | None = None) -> None:
    """Refuse ``scenario`` (one ScenarioError naming the key of the largest term) when the arrays it
    asks for cannot fit in memory; ``policies``: the market policies a run will settle (default its
    own ``market.policy``)."""
    key, value, needed, what = max(size_terms(scenario, policies), key=lambda term: term[2])
    reason = memory.shortfall(needed, what)
    if reason is not None:
        raise ScenarioError(source, key, value, reason)


def size_terms(scenario, policies: Iterable[str] | None = None) -> list[Term]:
    """Every stage's lower bound of the bytes it needs, with the key that sets it."""
    d, net = scenario.data, scenario.network
    synthetic = d.source == "synthetic"
    owners = d.owners if synthetic else max(1, len(scenario.owners))
    p = (d.features if synthetic else 1) + int(scenario.model.intercept)
    terms: list[Term] = [("data.owners", owners, owners * OWNER_BYTES, f"the state of {owners:,} owners")]
    if synthetic:  # what each owner keeps of its data (data.consortium.keeps_records)
        if scenario.model.loss != "squared" or scenario.privacy.sensitivity == "clip":
            n = smallest_owner(scenario)
            terms.append(("data.owners", owners, owners * n * (p + 1) * FLOAT,
                          f"{owners:,} owners keeping at least {n:,} records of {p} features each"))
        else:
            terms.append(("data.features", d.features, owners * p * p * FLOAT,
                          f"{owners:,} owners keeping a {p} x {p} matrix each (X'X)"))
        n = largest_owner(scenario)
        terms.append(("data.records", _shown(d.records), n * (p + 2) * FLOAT,
                      f"the largest owner's {n:,} records of {p} features, generated at once"))
        terms.append(("data.features", d.features, 2 * p * p * FLOAT,
                      f"{p} x {p} matrices (the Hessian and its eigenvectors)"))
    if net.mode != "ideal":
        terms.append(("network.channels", net.channels, net.channels * CHANNEL_BYTES,
                      f"{net.channels:,} channels"))
    terms += market_terms(scenario, owners, policies)
    return terms


def market_terms(scenario, owners: int, policies: Iterable[str] | None) -> list[Term]:
    """The market's arrays: the forecast's check of every owner alone ((N + 1) × N), procurement's N
    prefixes of N owners, the marginal policy's Shapley orders (samples × N, several arrays of it)."""
    m = scenario.market
    if m is None:
        return []
    terms: list[Term] = []
    if not isinstance(m.forecast, ForecastConstants):  # the law checks every owner alone at ε_min
        terms.append(("data.owners", owners, (owners + 1) * owners * (FLOAT + 1),
                      f"the forecast's check of {owners:,} owners alone and together ((N + 1) x N arrays)"))
    chosen = set(policies) if policies is not None else {m.policy}
    if owners > EXHAUSTIVE_UP_TO and "procurement" in chosen:
        terms.append(("data.owners", owners, owners * owners * (6 * FLOAT + 1),  # budget_epsilons' arrays
                      f"procurement on {owners:,} owners (N x N coalitions, budgets and weights)"))
    if owners > EXHAUSTIVE_UP_TO and "marginal" in chosen:
        if m.contribution == "shapley":
            terms.append(("market.shapley_samples", m.shapley_samples, 4 * m.shapley_samples * owners * FLOAT,
                          f"{m.shapley_samples:,} random orders of {owners:,} owners (Shapley sampling)"))
        else:
            terms.append(("data.owners", owners, 2 * owners * owners * FLOAT,
                          f"leave-one-out on {owners:,} owners (N x N coalitions)"))
    return terms


def smallest_owner(scenario) -> int:
    """A lower bound of every owner's records: as given, a list's smallest, a distribution's minimum."""
    records = scenario.data.records
    if isinstance(records, int):
        return records
    return min(records) if isinstance(records, list) else records.minimum


def largest_owner(scenario) -> int:
    """A lower bound of the largest owner's records: as given, a list's largest, or a distribution's
    maximum (else its minimum; a lognormal's median once there are a few owners)."""
    records = scenario.data.records
    if isinstance(records, int):
        return records
    if isinstance(records, list):
        return max(records)
    if records.maximum is not None and records.distribution == "uniform":
        return records.minimum
    median = getattr(records, "median", 0.0)
    floor = max(records.minimum, int(median)) if scenario.data.owners >= 10 else records.minimum
    return floor if records.maximum is None else min(records.maximum, floor)


def _shown(records) -> Any:
    """``data.records`` as a message shows it (a distribution by its name)."""
    if isinstance(records, int | list):
        return records if isinstance(records, int) or len(records) <= 4 else f"{len(records)} sizes"
    return records.distribution
