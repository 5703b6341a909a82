"""Which forecast a market negotiates with: explicit, the uncalibrated law, or one fitted to pilots.

``market.forecast = {c0, c1, c2}`` gives Theorem 2's constants; ``"law"`` the law of
dpmarket/markets/law.py with multipliers 1 and 1, no pilots. Without it, short **pilot runs** fit
the multipliers c₀, c₂ of the law (or, for learners the law does not describe, Theorem 2's
constants): every member at one budget ε, for a few budgets and owner subsets (so both ε and N
vary), each on its own seed, averaged per budget and subset.

Pilots train on ``market.pilots.data``: ``"proxy"`` (the default) is the public proxy of
dpmarket/data/proxy.py — a synthetic twin, or the hold-out split into owners of the owners' sizes —
with ψ measured on the proxy; the owners' records are never read, so the prices negotiated with
the forecast reveal nothing about them. ``"owners"`` trains on the owners' records, outside any
privacy accounting: an oracle for studies, labelled so in every output (the ``source`` string).

The fit is cached as JSON, keyed by a hash of everything the pilots and the law depend on, so it
is computed once per scenario and reused by ``run``, ``forecast`` and ``market``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from dpmarket import rng as streams
from dpmarket.errors import MarketError, RunDirectoryError, ScenarioError, warn
from dpmarket.markets.forecast import Forecast, calibrate, effective_budgets, fit_quality, quasi_nnls
from dpmarket.markets.law import LawForecast, build_inputs, law_unavailable
from dpmarket.markets.stage import MarketStage, sellers_of, settle_market
from dpmarket.privacy.guarantee import Guarantee
from dpmarket.runs.replications import batched, final_psis
from dpmarket.scenario.loading import file_digests
from dpmarket.scenario.schema import ForecastConstants, Scenario
from dpmarket.system import environment, files
from dpmarket.system.progress import SILENT, Progress

if TYPE_CHECKING:
    from dpmarket.data.problem import Prepared

CACHE_DIR = Path("outputs") / "forecasts"  # under the working directory, unless CACHE_ENV names another
CACHE_ENV = environment.FORECAST_CACHE
SUBSET_STREAM = 2**31 - 2  # sub-index of the "market" stream for the pilots' owner order
FORMS = "law-12"  # bump when the law or the pilots change meaning: old cache files are then ignored
ORACLE = "the owners' records (oracle)"


@dataclass(frozen=True)
class Pilot:
    """One pilot run: the members, their common ε, and the run seed."""

    members: np.ndarray
    epsilon: float
    seed: int


@dataclass(frozen=True)
class PilotRuns:
    """The pilots' outcomes, replications averaged: one entry per (subset, budget)."""

    masks: np.ndarray  # (K, N) members
    epsilon: np.ndarray  # (K,) the common ε
    psi: np.ndarray  # (K,) mean ψ on the data the pilots trained on
    records: np.ndarray  # (N,) sizes
    data: str  # what they trained on, for the source string
    psi_zero: float = float("inf")  # ψ of the untrained θ = 0 on that data
    norm_ratio: float | None = None  # Ξ/Ξ₂ of that data (None: from the declared bounds)

    def in_range(self) -> np.ndarray:
        """The pilots Theorem 2's form is fitted to: ψ below the untrained model's. Above it the box
        Θ clips the noise (Theorem 2 describes the unclipped regime) and the model is worth nothing
        to anyone; if fewer than two remain, all of them. (The law chooses on its own forecast
        instead: :func:`law_range`.)"""
        keep = self.psi < self.psi_zero
        return keep if keep.sum() >= 2 else np.ones(len(self.psi), bool)

    def subset(self, keep: np.ndarray) -> PilotRuns:
        """The pilots at ``keep``."""
        return replace(self, masks=self.masks[keep], epsilon=self.epsilon[keep], psi=self.psi[keep])


def cache_key(scenario: Scenario) -> str:
    """A hash of the resolved scenario minus what pilots ignore (names, outputs, market terms), and of
    the content of the files it reads (:func:`dpmarket.scenario.loading.file_digests`)."""
    table = scenario.model_dump(mode="json")
    for key in ("name", "description", "output"):
        table.pop(key)
    privacy = table["privacy"]
    privacy.pop("preset")  # its effect is in the keys it filled in
    # Keys a set-up does not use, at the values releases before the defaults of issue 25 wrote: the
    # same scenarios keep finding their calibrations.
    if privacy["sensitivity"] == "bounds":
        privacy["clip"], privacy["clip_quantile"] = None, 0.999
    if privacy["split"] == "horizon":
        privacy["cap_quantile"] = 0.999
    market = table.pop("market") or {}
    table["pilots"] = market.get("pilots")
    table["forms"] = FORMS
    if not Guarantee.of(scenario.privacy).pure:
        table["budgets"] = "effective"  # Theorem 2 fitted on ε̃, not ε (pure ε-DP keys stay as they were)
    table["data"]["seed"] = scenario.seed if scenario.data.seed is None else scenario.data.seed
    for spec in table["owners"]:
        spec.pop("epsilon", None)
        spec.pop("cost_coef", None)
        spec.pop("own_psi", None)  # a market term (declared own-data ψ), which pilots never read
    digests = file_digests(scenario)
    if digests:  # the table's and the trace's content: a file rewritten at the same path is recalibrated
        table["files"] = digests
    text = json.dumps(table, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def pilot_plan(scenario: Scenario, owners: int) -> list[Pilot]:
    """Budgets × subsets × replications, with seeds derived from the scenario's seed."""
    cfg = scenario.market.pilots
    levels = np.geomspace(cfg.epsilon_low, cfg.epsilon_high, cfg.levels)
    order = streams.stream(scenario.seed, "market", SUBSET_STREAM).permutation(owners)
    halvings = min(cfg.subsets, max(1, owners - 1).bit_length() + 1)  # beyond, the single owner again
    sizes = sorted({max(1, int(np.ceil(owners / 2**j))) for j in range(halvings)}, reverse=True)
    count = len(levels) * len(sizes) * cfg.replications
    seeds = iter(streams.replication_seeds(scenario.seed, count))
    return [Pilot(np.sort(order[:size]), float(eps), next(seeds))
            for size in sizes for eps in levels for _ in range(cfg.replications)]


def pilot_data(scenario: Scenario, consortium, objective) -> tuple:
    """(consortium, objective, label) the pilots train on: the public proxy, or the owners (oracle)."""
    if scenario.market.pilots.data == "owners":
        return consortium, objective, ORACLE
    from dpmarket.data.proxy import proxy_consortium, public_info  # deferred: builds the proxy
    from dpmarket.learning.objective import Objective, make_loss

    proxy = proxy_consortium(scenario, consortium)
    m = scenario.model
    proxy_objective = Objective(make_loss(m.loss), proxy.owners, m.regularization, m.theta_max)
    source = public_info(scenario, consortium).source
    return proxy, proxy_objective, f"the public proxy ({source})"


def run_pilots(scenario: Scenario, consortium, objective, progress: Progress = SILENT) -> PilotRuns:
    """Train every pilot on ``market.pilots.data``; ψ averaged over replications per budget and subset.

    Theorem 2 and the law describe the *expected* ψ, so replications are averaged before fitting.
    The data seed is pinned: a pilot's seed changes its clocks and noise, never the proxy or ρ.
    """
    from dpmarket.runs.inline import train

    with progress.phase("forecast: the pilots' data"):
        data, target, label = pilot_data(scenario, consortium, objective)
    N = len(consortium.owners)
    pinned = scenario.model_copy(update={"data": scenario.data.model_copy(
        update={"seed": scenario.seed if scenario.data.seed is None else scenario.data.seed})})
    groups: dict[tuple, list[float]] = {}
    plan = pilot_plan(scenario, N)
    with progress.phase("forecast: pilot runs", total=len(plan), unit="run") as step:
        if batched(pinned, scenario.market.pilots.replications):  # each budget and subset's together
            for (members, epsilon), seeds in _by_group(plan).items():
                groups[members, epsilon] = final_psis(pinned, seeds, data, target, np.array(members),
                                                      epsilons=np.full(N, epsilon))
                step.update(len(seeds))
        else:
            for pilot in plan:
                run = train(pinned.model_copy(update={"seed": pilot.seed}), data, target, pilot.members,
                            np.full(N, pilot.epsilon))
                groups.setdefault((tuple(pilot.members), pilot.epsilon), []).append(
                    run.training.metrics.psi[-1])
                step.update()
    masks = np.zeros((len(groups), N), bool)
    for k, (members, _) in enumerate(groups):
        masks[k, list(members)] = True
    psi = np.array([np.mean(v) for v in groups.values()])
    ratio = norm_ratio(scenario, data) if scenario.privacy.mechanism == "gaussian" else None
    return PilotRuns(masks, np.array([eps for _, eps in groups]), psi, consortium.sizes.astype(float), label,
                     target.psi(np.zeros(target.p)), ratio)


def _by_group(plan: list[Pilot]) -> dict[tuple, list[int]]:
    """The pilots' seeds per (members, ε), in the plan's order: each group is one cell of replications."""
    groups: dict[tuple, list[int]] = {}
    for pilot in plan:
        groups.setdefault((tuple(int(i) for i in pilot.members), pilot.epsilon), []).append(pilot.seed)
    return groups


def norm_ratio(scenario: Scenario, consortium) -> float:
    """Ξ/Ξ₂ of the owners' domain (Theorem 2's effective budgets of Gaussian answers): the L1 bound
    of the declared domain over the L2 one, 1 with clipping (dpmarket/privacy/cohort.py)."""
    if scenario.privacy.sensitivity == "clip":
        return 1.0
    from dpmarket.privacy.cohort import z_l2

    return float(consortium.z_l1 / z_l2(scenario, consortium))


# Pseudo-observations (c₀ − 1)², (c₂ − 1)²: the law weighs about as much as the 15 pilot cells (5 budgets ×
# 3 subsets) together — see fit_law.
PRIOR = np.array([16.0, 16.0])


def law_range(law: LawForecast, pilots: PilotRuns) -> np.ndarray:
    """The pilots the law is fitted to: those the uncalibrated law (multipliers 1, box included)
    forecasts below the untrained model's ψ; if fewer than two, all of them.

    Beyond ψ(θ = 0) the box clips the noise and the model is worth nothing to anyone. The choice is
    made on the law's forecast, which the pilots' outcomes do not enter: choosing on the observed ψ
    (as before) kept the pilots whose noisy mean came out low and dropped those that came out high,
    one more pull of the fit downwards.
    """
    plain = LawForecast(law.inputs.on_twin()).coalitions(pilots.epsilon[:, None], pilots.records,
                                                         pilots.masks)
    keep = plain < pilots.psi_zero
    return keep if keep.sum() >= 2 else np.ones(len(pilots.psi), bool)


def fit_law(law: LawForecast, pilots: PilotRuns) -> LawForecast:
    """c₀, c₂ ≥ 0 of the law fitted to the pilots in range, with the fit's quality.

    The fit solves the quasi-likelihood equations of a constant relative error
    (:func:`~dpmarket.markets.forecast.quasi_nnls`: weights from the fitted ψ, not the observed one,
    whose chance lows pulled the multipliers down by 15–30 %), through the box's saturation of the
    noise term. Each multiplier carries 16 pseudo-observations at the law's own value 1, about as
    many as the pilots' 15 cells: the pilots train on one twin, one draw of the population the owners
    are another draw of, and a multiplier fitted to them alone absorbs that draw (on the development
    designs the uncalibrated law beat the fit within ×1.25), or whatever the pilots cannot see — an
    unheld c₀ where every pilot is noise-dominated (fits of 9 and 284 were seen), an unheld c₂ where
    none is (0 and 17 on logistic markets). A discrepancy every pilot shows still moves them: 15
    cells that all see twice the law (half of it) move the multiplier of the term they see to 1.34
    (0.66).

    The pilots train on one twin, so they are fitted with the law on that twin's draw of the
    population (``inputs.on_twin()``): the multipliers correct the law's form, and the forecast
    returned applies them to the inputs ``law`` holds (the floor weights' expectation over the
    populations, dpmarket/data/proxy.py ``population_weights``).
    """
    keep = law_range(law, pilots)
    used = pilots.subset(keep)
    twin = LawForecast(law.inputs.on_twin())
    free, noise = twin.terms(used.epsilon[:, None], used.records, used.masks)
    columns = np.column_stack([free, noise])
    spread, shared = twin.box_inputs(used.epsilon[:, None], used.records, used.masks)
    c0, c2 = quasi_nnls(columns, used.psi, twin.inputs.box, PRIOR, zero=twin.inputs.box_zero,
                        shape=twin.inputs.noise_shape, spread=spread, shared=shared)
    fitted = LawForecast(twin.inputs, float(c0), float(c2))
    predicted = fitted.coalitions(used.epsilon[:, None], used.records, used.masks)
    quality = fit_quality(predicted, used.psi, used.masks.sum(axis=1))
    return replace(fitted, inputs=law.inputs, **quality, excluded=int(np.sum(~keep)))


def fit_theorem2(scenario: Scenario, pilots: PilotRuns) -> Forecast:
    """Theorem 2's constants fitted to the pilots in range (for learners the law does not describe)."""
    keep = pilots.in_range()
    used = pilots.subset(keep)
    noise = effective_budgets(scenario, used.masks.shape[1], pilots.norm_ratio)
    epsilons = [np.full(int(mask.sum()), eps) if noise is None  # else ε̃: the calibrated noise's budgets
                else noise.of_members(np.full(len(mask), eps), mask)
                for mask, eps in zip(used.masks, used.epsilon, strict=True)]
    records = [float(used.records[mask].sum()) for mask in used.masks]
    terms = ("c0", "c1", "c2") if scenario.market.pilots.floor else ("c1", "c2")
    fitted = calibrate(epsilons, records, list(used.psi), terms, weights="fitted")
    return replace(fitted, excluded=int(np.sum(~keep)), noise=noise)


def pilot_table(forecast, pilots: PilotRuns) -> dict:
    """The pilots for the cache file: per point its ε, members (count and indices), records, ψ and
    the fitted ψ̂ (the law on the pilots' own twin) — enough to refit another law to the same pilots
    (:func:`pilots_from_table`)."""
    fitted = pilot_forecast(forecast).coalitions(pilots.epsilon[:, None], pilots.records, pilots.masks)
    return {"epsilon": pilots.epsilon.tolist(), "members": pilots.masks.sum(axis=1).tolist(),
            "owners": [np.flatnonzero(mask).tolist() for mask in pilots.masks], "psi_zero": pilots.psi_zero,
            "in_fit": (law_range(forecast, pilots) if forecast.form == "law" else pilots.in_range()).tolist(),
            "records": (pilots.masks @ pilots.records).tolist(), "psi": pilots.psi.tolist(),
            "psi_fitted": fitted.tolist()}


def pilot_forecast(forecast):
    """The forecast as the pilots see it: a law on the twin they trained on (LawInputs.on_twin),
    with the same multipliers; Theorem 2's constants as they are."""
    return replace(forecast, inputs=forecast.inputs.on_twin()) if forecast.form == "law" else forecast


def pilots_from_table(stored: dict, records: np.ndarray) -> PilotRuns:
    """The pilots of a cache file's content (``stored``), for owners of sizes ``records``."""
    table = stored["pilots"]
    masks = np.zeros((len(table["psi"]), len(records)), bool)
    for k, owners in enumerate(table["owners"]):
        masks[k, owners] = True
    return PilotRuns(masks, np.array(table["epsilon"]), np.array(table["psi"]),
                     np.asarray(records, dtype=float), stored["calibrated_on"], table["psi_zero"])


def cache_dir() -> Path:
    """The default cache directory: $DPMARKET_FORECAST_CACHE when set (read at each call, so a test
    suite or a shared server can move it), else outputs/forecasts/ under the working directory."""
    return environment.read(CACHE_ENV) or Path(CACHE_DIR)


def cache_file(scenario: Scenario, directory: Path | None = None) -> Path:
    """Where the calibrated forecast of ``scenario`` is cached (``directory``, else :func:`cache_dir`)."""
    folder = cache_dir() if directory is None else Path(directory)
    return folder / f"{scenario.name}-{cache_key(scenario)}.json"


def resolve(scenario: Scenario, consortium, objective, directory: Path | None = None,
            recalibrate: bool = False, *, progress: Progress = SILENT):
    """The forecast and where it came from (its ``source``, which names an oracle calibration).

    Explicit constants; the uncalibrated law; a fit, cached or made now by running the pilots
    (``calibrated on …, cached in FILE`` either way: a warm cache gives the same bytes as a cold
    one; ``… not cached`` when the cache cannot be written). ``recalibrate`` runs the pilots
    whatever ``market.forecast`` says. ``progress`` hears of the pilot runs.
    """
    given = scenario.market.forecast
    if isinstance(given, ForecastConstants) and not recalibrate:
        noise = effective_budgets(scenario, len(consortium.owners), norm_ratio(scenario, consortium))
        return Forecast(given.c1, given.c2, c0=given.c0, noise=noise), "explicit (market.forecast)"
    why = law_unavailable(scenario)
    if given == "law" and why:
        raise ScenarioError(scenario.name, "market.forecast", "law", why)
    if given == "law" and not recalibrate:
        law = LawForecast(build_inputs(scenario, consortium))
        return law, f"law (market.forecast = 'law'), uncalibrated; public inputs from the {law.inputs.source}"
    path = cache_file(scenario, directory)
    cached = None if recalibrate else read_cache(scenario, consortium, path, why)
    if cached is not None:
        return cached
    forecast, pilots = calibrate_scenario(scenario, consortium, objective, progress)
    written = write_cache(path, {"key": cache_key(scenario), "scenario": scenario.name, "form": forecast.form,
                                 "calibrated_on": pilots.data, "forecast": forecast.to_dict(),
                                 "pilots": pilot_table(forecast, pilots)})
    return forecast, f"calibrated on {pilots.data}, " + (f"cached in {path}" if written else "not cached")


def read_cache(scenario: Scenario, consortium, path: Path, why: str | None) -> tuple | None:
    """(forecast, source) from the cache file at ``path``; None when there is none, or when it is
    damaged (unreadable, not JSON, another key or form, multipliers that are not finite numbers ≥ 0, or
    that do not give back the fitted ψ̂ it stores for its pilots — c₂ = 1e308, a fit of another version
    of the law), with one warning line: the pilots are then run again and the file rewritten."""
    if not path.is_file():
        return None
    try:
        stored = json.loads(path.read_text(encoding="utf-8"))
        table = stored["forecast"]
        if stored["key"] != cache_key(scenario) or (table["form"] == "law") != (why is None):
            raise ValueError("it was written for another scenario or forecast form")
        if not all(_multiplier(table[k]) for k in ("c0", "c1", "c2") if k in table):
            raise ValueError("its multipliers are not finite numbers >= 0")
        noise = effective_budgets(scenario, len(consortium.owners), norm_ratio(scenario, consortium))
        forecast = (replace(Forecast.from_dict(table), noise=noise) if why else
                    LawForecast.from_dict(table, build_inputs(scenario, consortium)))
        reproduced(forecast, stored, scenario, consortium, why)
        return forecast, f"calibrated on {str(stored['calibrated_on'])}, cached in {path}"
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as exc:
        if isinstance(exc, ScenarioError):  # build_inputs refused the scenario itself: not the file's fault
            raise
        warn(f"{path}: damaged ({type(exc).__name__}: {exc}); recalibrating the forecast")
        return None


def reproduced(forecast, stored: dict, scenario: Scenario, consortium, why: str | None) -> None:
    """A ValueError unless ``forecast``'s multipliers are the fit of the pilots the file stores (the
    fit re-made from them, to 1e-9 relative), and give back the fitted ψ̂ it stores: multipliers that
    are finite but absurd (c₂ = 1e308, which the box's saturation can hide from ψ̂ alone), or a fit
    made by another version of the law, are not trusted. Refitting costs no pilot run."""
    pilots = pilots_from_table(stored, consortium.sizes)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        refit = (fit_theorem2(scenario, pilots) if why else
                 fit_law(LawForecast(forecast.inputs), pilots))
        fitted = pilot_forecast(forecast).coalitions(pilots.epsilon[:, None], pilots.records, pilots.masks)
    names = [k for k in ("c0", "c1", "c2") if hasattr(refit, k)]
    mine, theirs = (np.array([float(getattr(f, k)) for k in names]) for f in (forecast, refit))
    expected = np.asarray(stored["pilots"]["psi_fitted"], dtype=float)
    if (not np.allclose(mine, theirs, rtol=1e-9, atol=0.0) or fitted.shape != expected.shape
            or not np.all(np.isfinite(fitted)) or not np.allclose(fitted, expected, rtol=1e-9, atol=0.0)):
        raise ValueError("its multipliers are not the fit of its own pilots (edited, or written by "
                         "another version)")


def _multiplier(value) -> bool:
    """A multiplier as the cache must hold it: a finite number ≥ 0 (not a string, bool or NaN)."""
    number = isinstance(value, int | float) and not isinstance(value, bool)
    return number and bool(np.isfinite(value)) and value >= 0


def write_cache(path: Path, content: dict) -> bool:
    """Cache ``content`` at ``path``; an unwritable cache (read-only, full, a file in the way) is one
    warning line naming the path, and the command goes on uncached (False): the cache only saves
    the pilots' time, and the run's own results are written elsewhere."""
    try:
        with files.writing(path):
            _write_atomically(path, content)
    except RunDirectoryError as exc:
        warn(f"{exc}; the forecast is not cached and will be calibrated again next time")
        return False
    return True


def calibrate_scenario(scenario: Scenario, consortium, objective, progress: Progress = SILENT) -> tuple:
    """Run the pilots and fit the law's multipliers (Theorem 2's constants where the law does not apply)."""
    law = None if law_unavailable(scenario) else LawForecast(build_inputs(scenario, consortium))  # bad
    pilots = run_pilots(scenario, consortium, objective, progress)  # input fails before any pilot runs
    try:
        return (fit_theorem2(scenario, pilots) if law is None else fit_law(law, pilots)), pilots
    except ValueError as exc:  # a pilot with ψ = 0 cannot be weighed by its relative error
        raise MarketError(f"{scenario.name}: market.pilots: {exc}") from None


def _write_atomically(path: Path, content: dict) -> None:
    """Write JSON through a temporary file and a rename, so a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    files.write_atomic(path, lambda temp: temp.write_text(json.dumps(content, indent=2) + "\n",
                                                          encoding="utf-8"))


def market_stage(scenario: Scenario, prepared: Prepared, policy: str | None = None, cache: Path | None = None,
                 progress: Progress = SILENT) -> MarketStage:
    """The market stage of a run: the scenario's sellers, the forecast resolved (calibrated by pilot
    runs if it must be; ``progress`` hears of them), then the policy settled with it."""
    sellers = sellers_of(scenario, prepared)  # first: its checks are cheap, the calibration is not
    forecast, source = resolve(scenario, prepared.consortium, prepared.objective, cache, progress=progress)
    return settle_market(scenario, sellers, forecast, source, policy)
