"""Calibrating the forecast from short pilot simulations, and caching the result.

Pilots train the scenario's own consortium (same data, same network, same T) with every
member at one budget ε, for a few budgets and a few owner subsets (so that both ε and n
vary), each on its own seed; :func:`dpmarket.market.forecast.calibrate` fits the constants
to the observed ψ. The fit is cached as JSON, keyed by a hash of everything the pilots
depend on, so that it is computed once per scenario and reused by ``run``, ``forecast`` and
``market``. Constants given in ``market.forecast`` skip all of this.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dpmarket import rng as streams
from dpmarket.market.forecast import Forecast, calibrate
from dpmarket.scenario import Scenario

CACHE_DIR = Path("outputs") / "forecasts"
SUBSET_STREAM = 2**31 - 2  # sub-index of the "market" stream for the pilots' owner order


@dataclass(frozen=True)
class Pilot:
    """One pilot run: the members, their common ε, and the run seed."""

    members: np.ndarray
    epsilon: float
    seed: int


def cache_key(scenario: Scenario) -> str:
    """A hash of the resolved scenario minus what pilots ignore (names, outputs, market terms)."""
    table = scenario.model_dump(mode="json")
    for key in ("name", "description", "output"):
        table.pop(key)
    market = table.pop("market") or {}
    table["pilots"] = market.get("pilots")
    table["data"]["seed"] = scenario.seed if scenario.data.seed is None else scenario.data.seed
    for spec in table["owners"]:
        spec.pop("epsilon", None)
        spec.pop("cost_coef", None)
    text = json.dumps(table, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def pilot_plan(scenario: Scenario, owners: int) -> list[Pilot]:
    """Budgets × subsets × replications, with seeds derived from the scenario's seed."""
    cfg = scenario.market.pilots
    levels = np.geomspace(cfg.epsilon_low, cfg.epsilon_high, cfg.levels)
    order = streams.stream(scenario.seed, "market", SUBSET_STREAM).permutation(owners)
    sizes = sorted({max(1, int(np.ceil(owners / 2**j))) for j in range(cfg.subsets)}, reverse=True)
    count = len(levels) * len(sizes) * cfg.replications
    seeds = iter(streams.replication_seeds(scenario.seed, count))
    return [Pilot(np.sort(order[:size]), float(eps), next(seeds))
            for size in sizes for eps in levels for _ in range(cfg.replications)]


def run_pilots(scenario: Scenario, consortium, objective) -> tuple[list, list, list]:
    """Train every pilot; returns (ε vectors, records, mean ψ) per budget and subset.

    Theorem 2 bounds the *expected* ψ, so the replications of a pilot are averaged before
    fitting (ψ of one run is skewed: its spread is as large as its mean at small ε).
    """
    from dpmarket.run import train  # deferred: the market layer is imported by run

    N = len(consortium.owners)
    groups: dict[tuple, list[float]] = {}
    for pilot in pilot_plan(scenario, N):
        eps = np.full(N, pilot.epsilon)
        run = train(scenario.model_copy(update={"seed": pilot.seed}), consortium, objective,
                    pilot.members, eps)
        groups.setdefault((tuple(pilot.members), pilot.epsilon), []).append(run.training.metrics.psi[-1])
    epsilons = [np.full(len(members), eps) for members, eps in groups]
    records = [float(consortium.sizes[list(members)].sum()) for members, _ in groups]
    return epsilons, records, [float(np.mean(v)) for v in groups.values()]


def calibrate_scenario(scenario: Scenario, consortium, objective) -> tuple[Forecast, dict]:
    """Run the pilots and fit the forecast; also returns the pilot table for the cache file."""
    epsilons, records, psi = run_pilots(scenario, consortium, objective)
    terms = ("c0", "c1", "c2") if scenario.market.pilots.floor else ("c1", "c2")
    fit = calibrate(epsilons, records, psi, terms)
    table = {"epsilon": [float(e[0]) for e in epsilons], "members": [len(e) for e in epsilons],
             "records": records, "psi": psi}
    return fit, table


def cache_file(scenario: Scenario, directory: Path = CACHE_DIR) -> Path:
    """Where the calibrated forecast of ``scenario`` is cached."""
    return Path(directory) / f"{scenario.name}-{cache_key(scenario)}.json"


def resolve(scenario: Scenario, consortium, objective, directory: Path = CACHE_DIR,
            recalibrate: bool = False) -> tuple[Forecast, str]:
    """The forecast and where it came from: ``explicit``, ``cache <file>`` or ``calibrated <file>``."""
    given = scenario.market.forecast
    if given is not None and not recalibrate:
        return Forecast(given.c1, given.c2, c0=given.c0), "explicit (market.forecast)"
    path = cache_file(scenario, directory)
    if path.is_file() and not recalibrate:
        stored = json.loads(path.read_text(encoding="utf-8"))
        return Forecast.from_dict(stored["forecast"]), f"cache {path}"
    fit, table = calibrate_scenario(scenario, consortium, objective)
    _write_atomically(path, {"key": cache_key(scenario), "scenario": scenario.name,
                             "forecast": fit.to_dict(), "pilots": table})
    return fit, f"calibrated, cached in {path}"


def _write_atomically(path: Path, content: dict) -> None:
    """Write JSON through a temporary file and a rename, so a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(content, fh, indent=2)
        fh.write("\n")
    os.replace(tmp, path)
