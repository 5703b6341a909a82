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
# engine's clock and link, the public twin's summary, held beside what it keeps of its data
# (tracemalloc's peak per owner of 20,000-owner runs: 2.7 kB for owners of 1 record and 1 feature,
# 2.8 kB for 50 records and 3 features, 3.8 kB in a market, 5.8 kB for lending_banks' 10 features;
# 29 kB for mobile_devices' phones, which also keep their records).
OWNER_BYTES = 2_000
CHANNEL_BYTES = 200  # a Channel object and its entries in the engine's per-channel lists
PILOT_BYTES = 150  # a pilot of the forecast's plan: its seed, budget and members (an array of them)
EXHAUSTIVE_UP_TO = 10  # dpmarket.markets.policies: coalitions (or Shapley players) enumerated up to this N
# dpmarket.privacy.mechanisms.binomial_quantile: an owner's answer cap sums Binomial(T, share)'s whole
# pmf up to EXACT_PMF trials, beyond that the pmf on mean ± WINDOW_SDS standard deviations, in at least
# three arrays of that length at once
EXACT_PMF, WINDOW_SDS, PMF_ARRAYS = 10_000_000, 40, 3
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
    if synthetic:  # the owners' state and what each keeps of its data (data.consortium.keeps_records)
        if scenario.model.loss != "squared" or scenario.privacy.sensitivity == "clip":
            n = smallest_owner(scenario)
            terms.append(("data.owners", owners, owners * (OWNER_BYTES + n * (p + 1) * FLOAT),
                          f"the state of {owners:,} owners keeping at least {n:,} records of {p} features "
                          "each"))
        else:
            key = ("data.features", d.features) if p * p * FLOAT > OWNER_BYTES else ("data.owners", owners)
            terms.append((*key, owners * (OWNER_BYTES + (p * p + p) * FLOAT),
                          f"the state of {owners:,} owners keeping a {p} x {p} matrix each (X'X)"))
        n = largest_owner(scenario)
        terms.append((*_largest_key(scenario, n), n * (p + 2) * FLOAT,
                      f"the largest owner's {n:,} records of {p} features, generated at once"))
        terms.append(("data.features", d.features, 2 * p * p * FLOAT,
                      f"{p} x {p} matrices (the Hessian and its eigenvectors)"))
    if net.mode != "ideal":
        terms.append(("network.channels", net.channels, net.channels * CHANNEL_BYTES,
                      f"{net.channels:,} channels"))
    terms += cap_terms(scenario, owners)
    terms += market_terms(scenario, owners, policies)
    return terms


def cap_terms(scenario, owners: int) -> list[Term]:
    """The answer caps' Binomial(T, share) pmf (privacy.split = "capped", an owner without a cap of its
    own): its whole length up to EXACT_PMF trials, its window of ±40 standard deviations beyond, for the
    owner whose share of the clocks spreads it most (2⁵³ exchanges: 86 GiB for 3 owners)."""
    privacy, iterations = scenario.privacy, scenario.learner.iterations
    own = [o.cap for o in scenario.owners[:owners]]
    every_owner_capped = privacy.cap is not None or (len(own) == owners and None not in own)
    if privacy.split != "capped" or every_owner_capped or scenario.data.source != "synthetic" or owners < 2:
        return []  # no pmf (or a table's owners, known once it is read; one owner's share is 1)
    if iterations <= EXACT_PMF:
        length = iterations + 1
    else:
        rates = [scenario.owner_value(i, "clock_rate") for i in range(owners)]
        spread = max(r / sum(rates) * (1 - r / sum(rates)) for r in rates)
        length = 2 * WINDOW_SDS * (iterations * spread) ** 0.5
    return [("learner.iterations", iterations, PMF_ARRAYS * FLOAT * length,
             f"an answer cap from Binomial({iterations:,}, share)'s pmf ({length:,.0f} terms)")]


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
    if m.forecast is None:  # calibrated by pilot runs: their plan is made at once
        terms.append(pilot_term(m.pilots, owners))
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


def pilot_term(pilots, owners: int) -> Term:
    """The forecast's pilot plan: levels x subsets x replications pilots, each with its seed and members;
    the subsets halve the owners, so beyond log2(N) + 1 of them they repeat the single owner."""
    subsets = min(pilots.subsets, max(1, owners - 1).bit_length() + 1)
    count = pilots.levels * subsets * pilots.replications
    key = max((("market.pilots.levels", pilots.levels), ("market.pilots.subsets", pilots.subsets),
               ("market.pilots.replications", pilots.replications)), key=lambda kv: kv[1])
    return (*key, count * PILOT_BYTES, f"a forecast calibrated by {count:,} pilot runs "
            f"({pilots.levels:,} budgets x {subsets:,} subsets x {pilots.replications:,} replications)")


def _own_records(scenario) -> tuple[list[int], bool]:
    """The records given to owners one by one ([[owners]] records), and whether any owner is left to
    the scenario-wide data.records."""
    owners = scenario.data.owners
    given = [o.records for o in scenario.owners[:owners] if o.records is not None]
    return given, len(given) < owners


def smallest_owner(scenario) -> int:
    """A lower bound of every owner's records: as given (also one by one), a list's smallest, a
    distribution's minimum."""
    given, rest = _own_records(scenario)
    records = scenario.data.records
    if not rest:
        return min(given)
    if isinstance(records, int):
        default = records
    else:
        default = min(records) if isinstance(records, list) else records.minimum
    return min([default, *given])


def largest_owner(scenario) -> int:
    """A lower bound of the largest owner's records: as given (also one by one), a list's largest, or
    a distribution's maximum (else its minimum; a lognormal's median once there are a few owners)."""
    given, rest = _own_records(scenario)
    return max([_largest_default(scenario) if rest else 0, *given])


def _largest_key(scenario, largest: int) -> tuple[str, Any]:
    """The key and value that give an owner ``largest`` records: an [[owners]] table's, else data.records."""
    for i, o in enumerate(scenario.owners[:scenario.data.owners]):
        if o.records == largest:
            return f"owners.{i}.records", largest
    return "data.records", _shown(scenario.data.records)


def _largest_default(scenario) -> int:
    """:func:`largest_owner` of the owners that keep data.records (a list's entries beyond the
    [[owners]] that give their own)."""
    records = scenario.data.records
    if isinstance(records, int):
        return records
    if isinstance(records, list):
        own = {i for i, o in enumerate(scenario.owners) if o.records is not None}
        return max(n for i, n in enumerate(records) if i not in own)
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
