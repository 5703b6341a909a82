"""What the forecast says before any training (the ``forecast`` command's work).

The predicted ψ̂ of the owners that would take part — under the scenario's market, or with
everyone at the scenario's budgets when it has none — and, per owner, whether that model is
forecast to beat the model it could train on its own data (ψ(θ_i*), exact and cheap: no
training run; an oracle measurement, read from the owners' records, which the market never uses).
Calibrates the forecast (and caches it) if it has to.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dpmarket.data.problem import prepare
from dpmarket.markets.policies import settle
from dpmarket.markets.stage import sellers_of
from dpmarket.runs import pilots as calibration
from dpmarket.scenario.schema import Market, Scenario
from dpmarket.system.progress import Progress
from dpmarket.system.progress import of as progress_of


def report(scenario: Scenario, recalibrate: bool = False, cache: Path | None = None,
           progress: bool | Progress = False) -> str:
    """The forecast of ``scenario`` as terminal text (``progress``: the long phases on a terminal)."""

    has_market = scenario.market is not None
    if not has_market:  # defaults for the pilots; no policy is run
        scenario = scenario.model_copy(update={"market": Market.model_construct(**_defaults())})
    progress = progress_of(progress)
    prepared = prepare(scenario, progress)
    consortium, objective = prepared.consortium, prepared.objective
    forecast, source = calibration.resolve(scenario, consortium, objective, cache, recalibrate,
                                           progress=progress)
    N = len(consortium.owners)
    if has_market:
        outcome = settle(scenario.market.policy, sellers_of(scenario, prepared),
                         forecast, scenario.market, scenario.seed)
        eps, members, terms = outcome.epsilon, outcome.participates, f"market.policy = {outcome.policy}"
    else:
        eps = np.array([scenario.owner_value(i, "epsilon") for i in range(N)], dtype=float)
        members, terms = np.ones(N, bool), "every owner at its scenario budget (no [market])"
    psi = float(forecast.coalitions(eps, consortium.sizes, members)[0])
    own = prepared.own_psi
    lines = [f"scenario      {scenario.name} (seed {scenario.seed}): {N} owners, "
             f"{int(consortium.sizes.sum()):,} records",
             f"forecast      {forecast.describe()}",
             f"source        {source}",
             *fit_lines(forecast),
             f"terms         {terms}: {int(members.sum())} of {N} owners take part",
             f"predicted psi {psi:.4g}{_law_terms(forecast, eps, consortium.sizes, members)}",
             f"benefit       {int(np.sum(members & (psi < own)))} of {int(members.sum())} "
             "participants are forecast to beat their own-data model (oracle: own psi is measured on "
             "the owners' records)",
             "",
             f"{'owner':>5}  {'name':<28} {'records':>9} {'epsilon':>9} {'own psi':>10}  forecast beats own"]
    for i in range(N):
        verdict = ("yes" if psi < own[i] else "no") if members[i] else "(declines)"
        lines.append(f"{i:>5}  {consortium.names[i][:28]:<28} {int(consortium.sizes[i]):>9,} "
                     f"{eps[i]:>9.4g} {own[i]:>10.4g}  {verdict}")
    return "\n".join(lines)


def _law_terms(forecast, eps: np.ndarray, sizes: np.ndarray, members: np.ndarray) -> str:
    """For the law: its two terms at the predicted coalition, so one sees what dominates."""
    if forecast.form != "law" or not members.any():
        return ""
    free, noise = forecast.terms(eps, sizes, members)
    noise_text = f"{forecast.c2:.3g} x {noise[0]:.4g} (noise)"
    if np.isfinite(forecast.inputs.box):  # sat(c2·V) towards ψ_box (dpmarket/markets/forecast.py)
        noise_text = f"sat({noise_text}; box psi {forecast.inputs.box:.4g})"
    return f" = {forecast.c0:.3g} x {free[0]:.4g} (noise-free: floor, bias, selection) + {noise_text}"


def fit_lines(forecast) -> list[str]:
    """The fit's quality, overall and per pilot coalition size (nothing when nothing was fitted)."""
    if not forecast.points:
        return ["fit           none: no pilots (the multipliers are given)"]
    lines = [f"fit           R2(log psi) {forecast.r2:.3f}, RMS relative error "
             f"{forecast.rms_relative_error:.3f}, {forecast.points} pilot points (budget x subset, "
             "replications averaged)"]
    if forecast.excluded:
        lines.append(f"              {forecast.excluded} more pilot points left out: psi forecast (law) or "
                     "simulated (Theorem 2) above the untrained model's (the box clips the noise there)")
    for row in forecast.by_size:
        lines.append(f"  {row['members']:>4} owners: RMS relative error {row['rms_relative_error']:.3f} "
                     f"over {row['points']} points")
    return lines


def _defaults() -> dict:
    """Every default of a [market] table (pydantic's), without requiring a policy's keys."""
    return {name: field.get_default(call_default_factory=True)
            for name, field in Market.model_fields.items()}
