"""The consortium: every owner's private records (as a learner never sees them) and the bounds.

This is the "data" stage of the one-way flow scenario → data → market → simulation → results.
Owner i's records come from its own random stream, so changing one owner's size or shift
leaves every other owner's records unchanged.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from dpmarket import rng as streams
from dpmarket.data import magnitudes, synthetic
from dpmarket.errors import ScenarioError
from dpmarket.learning.objective import OwnerData
from dpmarket.scenario.schema import Scenario

PARALLEL_FROM_MEAN_SIZE = 5_000


@dataclass(frozen=True)
class Consortium:
    """Owners' names and data, and the declared data bounds the sensitivity is derived from."""

    names: list[str]
    owners: list[OwnerData]
    z_l1: float  # sup ‖z‖₁ over the declared domain (features, plus the intercept's 1)
    y_max: float  # sup |y| over the declared domain
    report: dict | None = None  # table data: what was read, held out, dropped, clipped (summary)
    holdout: np.ndarray | None = None  # table data: the public rows as one record block

    @property
    def sizes(self) -> np.ndarray:
        """n_i per owner."""
        return np.array([o.n for o in self.owners], dtype=np.int64)


def keeps_records(scenario: Scenario) -> bool:
    """Whether owners keep their records: other losses than squared, and per-example clipping
    (squared loss with bounds-derived sensitivity lives on sufficient statistics alone)."""
    return scenario.model.loss != "squared" or scenario.privacy.sensitivity == "clip"


def build_consortium(scenario: Scenario, keep_records: bool | None = None) -> Consortium:
    """Every owner's records for ``scenario``: read from a table, or generated (deterministic).

    ``keep_records`` overrides :func:`keeps_records` (the public proxy needs its records).
    """
    keep = keeps_records(scenario) if keep_records is None else keep_records
    if scenario.data.source == "table":
        return _from_table(scenario, keep)
    return _generated(scenario, keep)


def check_names(scenario: Scenario, names: list[str]) -> None:
    """Owner names are distinct: an availability trace, a per-owner override or ``timeline
    --owners`` finds an owner by name, and with two of a name it would silently take one."""
    first: dict[str, int] = {}
    for i, name in enumerate(names):
        if name not in first:
            first[name] = i
            continue
        j = first[name]
        named = [k for k in (i, j) if scenario.owner_value(k, "name") is not None]
        key = f"owners.{named[0]}.name" if named else "data"
        raise ScenarioError(scenario.source, key, name, f"owners {j} and {i} are both called {name!r}: "
                            "owner names must be distinct (a trace or an override names one owner)")


def _generated(scenario: Scenario, keep: bool) -> Consortium:
    """Owners drawn by the synthetic generator, each from its own stream."""
    seed = scenario.seed if scenario.data.seed is None else scenario.data.seed
    d, m = scenario.data, scenario.model
    profile = synthetic.PROFILES[d.kind]
    pop = synthetic.population(profile, d.features, streams.stream(seed, "data"), d.generator)
    noise = profile.label_noise if d.label_noise is None else d.label_noise
    sizes = synthetic.owner_sizes(scenario, seed)
    y_max = 1.0 if profile.task == "classification" else d.label_bound
    z_l1 = d.features * d.feature_bound + (1.0 if m.intercept else 0.0)
    magnitudes.check_bounds(scenario, int(sizes.sum()), z_l1, y_max, d.features + int(m.intercept))
    names = [scenario.owner_value(i, "name") or synthetic.default_name(profile, i, len(sizes))
             for i in range(len(sizes))]
    check_names(scenario, names)

    def make(i: int) -> OwnerData:
        block = synthetic.generate_owner(profile, pop, int(sizes[i]),
                                         scenario.owner_value(i, "shift"), d.feature_bound,
                                         y_bound=d.label_bound, noise=noise,
                                         gen=streams.stream(seed, "data", i), generator=d.generator)
        return OwnerData.from_block(block, m.intercept, keep)

    # Each owner has its own stream, so threads change the speed, never the records. numpy
    # releases the GIL while filling large arrays, which makes two threads worth it on 2 cores
    # for hospitals and banks; thousands of tiny owners are Python-bound, so one thread there.
    if sizes.mean() < PARALLEL_FROM_MEAN_SIZE:
        owners = [make(i) for i in range(len(sizes))]
    else:
        with ThreadPoolExecutor(max_workers=2) as pool:
            owners = list(pool.map(make, range(len(sizes))))
    return Consortium(names, owners, z_l1, y_max)


def _from_table(scenario: Scenario, keep: bool) -> Consortium:
    """Owners read from ``data.path``; the bounds are the declared ones, enforced by clipping."""
    from dpmarket.data.table import load_owners  # deferred: synthetic runs never need it

    d, m = scenario.data, scenario.model
    loaded = load_owners(scenario)
    check_names(scenario, loaded.names)
    y_max = 1.0 if d.table.label == "sign" else d.label_bound
    z_l1 = loaded.transform.p * d.feature_bound + (1.0 if m.intercept else 0.0)
    rows = sum(b.shape[1] for b in loaded.blocks) + (0 if loaded.holdout is None else loaded.holdout.shape[1])
    magnitudes.check_bounds(scenario, rows, z_l1, y_max, loaded.transform.p + int(m.intercept))
    owners = [OwnerData.from_block(b, m.intercept, keep) for b in loaded.blocks]
    return Consortium(loaded.names, owners, z_l1, y_max, loaded.report, loaded.holdout)
