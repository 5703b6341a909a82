"""A run that checks itself: one line for each thing that makes its answer weak or misleading.

Each :class:`Diagnostic` names what is wrong with the figures behind it and the key to change. A
diagnostic never changes a result or an exit status (``--strict`` opts in to exit status 3 on a
warning). :func:`after_run` reads a finished run; :func:`before_run` needs no training (the
schedule's distribution, the network's load, the step's stability and the forecast law, all from
public information), and is what ``dpmarket validate`` prints.

``oracle`` says whether a diagnostic's figures were computed from the owners' private records
without noise (ψ, the noise-free floor's prediction, the share of clipped gradients, a simulated
surplus): such a figure is a measurement the simulator can make and no real learner could, and
the diagnostic says so. The thresholds are the constants below; docs/reference/diagnostics.md
lists them with their reasons.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from dpmarket.learning.stepsize import STABILITY_LIMIT
from dpmarket.system.reproducibility import difference, exceeds, reaches

if TYPE_CHECKING:
    from dpmarket.runs.run import RunResult
    from dpmarket.scenario.schema import Scenario

WARNING, NOTE = "warning", "note"

# ψ_final at or above this fraction of ψ(0) is not clearly better than the untrained model θ = 0:
# the owners' answers did not even halve the error the model starts with.
WEAK_RATIO = 0.5
# The noise-free floor "dominates" the final ψ when it is at least this fraction of it: more ε
# cannot help, more exchanges can.
FLOOR_SHARE = 0.5
# …and it is worth a note (for a model that is not weak) while ψ_final keeps at least this fraction of
# ψ(0): below, the floor is real but the model is good.
FLOOR_RELEVANT = 0.05
# An owner that spent less than this fraction of its budget wasted most of it; the run is warned
# when at least UNSPENT_OWNERS of the participants (asked at least once) did.
UNSPENT_FRACTION = 0.5
UNSPENT_OWNERS = 0.25
# A participant never asked took no part at all; expected before a run: warned from this many.
NEVER_ASKED_EXPECTED = 1.0
# Collided (or lost) transmissions above this share dominate the network's traffic.
LOST_SHARE = 0.5
# A step whose stability number is at least this fraction of the limit (2) is at or near it.
STABILITY_NEAR = 0.75
# Forecast and simulated ψ further apart than this factor (either way).
FORECAST_FACTOR = 2.0
# Per-example gradients clipped at the final model above this share bias the answers heavily
# (clip = "auto" at the default quantile 0.9 clips about 10 % of the proxy's at its optimum).
CLIPPED_SHARE = 0.3

THRESHOLDS = {"weak_ratio": WEAK_RATIO, "floor_share": FLOOR_SHARE, "floor_relevant": FLOOR_RELEVANT,
              "unspent_fraction": UNSPENT_FRACTION,
              "unspent_owners": UNSPENT_OWNERS, "never_asked_expected": NEVER_ASKED_EXPECTED,
              "lost_share": LOST_SHARE, "stability_near": STABILITY_NEAR,
              "forecast_factor": FORECAST_FACTOR, "clipped_share": CLIPPED_SHARE}


@dataclass(frozen=True)
class Diagnostic:
    """One finding: a stable ``code``, its ``severity`` ("warning" or "note"), one line saying what is
    wrong and what to change, the figures behind it, and whether they read the private records."""

    code: str
    severity: str
    message: str
    figures: dict[str, Any] = field(default_factory=dict)
    oracle: bool = False

    def to_dict(self) -> dict[str, Any]:
        """The entry of summary.json's ``diagnostics``."""
        return asdict(self)

    def line(self) -> str:
        """The message with its code, and the oracle label where its figures read the records."""
        return f"{self.message} [{self.code}{', oracle figure' if self.oracle else ''}]"


def warnings_in(diagnostics: list[dict] | list[Diagnostic]) -> int:
    """How many of ``diagnostics`` (objects or summary.json entries) are warnings (``--strict``)."""
    return sum(1 for d in diagnostics if (d["severity"] if isinstance(d, dict) else d.severity) == WARNING)


# --- after a run ------------------------------------------------------------------------------

def after_run(result: RunResult) -> list[Diagnostic]:
    """Everything that makes ``result``'s answer weak or misleading, in the order a reader needs it."""
    checks = (_weak_model, _floor, _unspent, _never_asked, _network, _surplus, _stability, _forecast,
              _clipping)
    return [d for check in checks if (d := check(result)) is not None]


def _weak_model(result: RunResult) -> Diagnostic | None:
    psi, zero = float(result.psi_final), float(result.psi_zero)
    if not (zero > 0 and psi >= WEAK_RATIO * zero):  # NaN: nothing to say
        return None
    floor = result.floor_predicted
    figures = {"psi_final": psi, "psi_zero": zero, "ratio": psi / zero, "psi_floor_predicted": floor}
    lever = weak_lever(result.scenario, floor is not None and floor >= FLOOR_SHARE * psi, floor)
    if psi >= zero:
        text = (f"the trained model is no better than the untrained θ = 0 (psi {psi:.4g} ≥ {zero:.4g}): "
                f"{lever}")
    else:
        text = (f"the trained model is not clearly better than the untrained θ = 0 (psi {psi:.4g} against "
                f"{zero:.4g}: less than halved): {lever}")
    return Diagnostic("weak_model", WARNING, text, figures, oracle=True)


def _floor(result: RunResult) -> Diagnostic | None:
    """A note when a model that is not weak is still mostly the noise-free floor of T exchanges:
    then more ε will not improve it, more exchanges will (a weak model says so in its own line)."""
    psi, zero, floor = float(result.psi_final), float(result.psi_zero), result.floor_predicted
    if floor is None or not psi > 0 or floor < FLOOR_SHARE * psi or psi >= WEAK_RATIO * zero \
            or psi < FLOOR_RELEVANT * zero:
        return None
    T = result.scenario.learner.iterations
    text = (f"most of the final psi ({psi:.3g}) is the noise-free floor of T = {T} exchanges (law: "
            f"{floor:.3g}): more ε will not lower it, more learner.iterations will")
    return Diagnostic("floor_dominates", NOTE, text, {"psi_final": psi, "psi_floor_predicted": float(floor),
                                                       "iterations": T}, oracle=True)


def weak_lever(scenario: Scenario, floor_dominates: bool, floor: float | None) -> str:
    """What to change when the model is weak: T when the noise-free floor dominates, else the privacy
    settings that waste budget, the budgets themselves (or the market's lever), or the step."""
    if floor_dominates:
        return (f"most of it is the noise-free floor of T = {scenario.learner.iterations} exchanges "
                f"(law: {floor:.3g}): raise learner.iterations; more ε will not help")
    p, levers = scenario.privacy, []
    if p.split == "horizon":
        levers.append("set privacy.split = 'capped' (every owner now budgets T answers)")
    if p.sensitivity == "bounds":
        levers.append("set privacy.sensitivity = 'clip' (Ξ now comes from the declared bounds)")
    if scenario.market is None:
        levers.append("raise privacy.epsilon")
    else:
        from dpmarket.scenario.checks import BUDGET_KEYS

        policy = scenario.market.policy
        levers.append(f"{BUDGET_KEYS[policy]} (market.policy = {policy!r} sets the budgets)")
    return ", ".join(levers) + " or revisit learner.rho"


def _unspent(result: RunResult) -> Diagnostic | None:
    """Participants asked at least once that spent less than half their budget."""
    asked = [o for o in result.owners if o.ledger.answers > 0 and o.epsilon > 0]
    if not asked:
        return None
    fractions = np.array([o.epsilon_spent / o.epsilon for o in asked])
    low = int(np.sum(fractions < UNSPENT_FRACTION))
    if low < UNSPENT_OWNERS * len(asked):
        return None
    figures = {"owners": low, "asked": len(asked), "median_spent_fraction": float(np.median(fractions))}
    text = (f"{low} of {len(asked)} owners spent less than half of their budget (median "
            f"{np.median(fractions):.0%}): {unspent_lever(result.scenario)}")
    return Diagnostic("budget_unspent", WARNING, text, figures)


def unspent_lever(scenario: Scenario) -> str:
    """Why budgets go unspent and the key that would spend them."""
    p = scenario.privacy
    if p.split == "horizon":
        return ("each budgets T answers and is asked about T/N times: set privacy.split = 'capped'"
                + (" (privacy.preset = 'paper' sets 'horizon')" if p.preset == "paper" else ""))
    if p.cap is not None or any(o.cap is not None for o in scenario.owners):
        return "their answer caps exceed their queries: lower privacy.cap (or the [[owners]] caps)"
    return (f"their answer caps (the {p.cap_quantile:g} quantile of their queries) exceed what they "
            f"were asked: lower privacy.cap_quantile, or raise learner.iterations")


def _never_asked(result: RunResult) -> Diagnostic | None:
    counts = result.training.log.counts_by_owner
    never = [o.name for o in result.owners if counts[("query", o.index)] == 0]
    if not never:
        return None
    N, T = len(result.owners), result.scenario.learner.iterations
    shown = ", ".join(never[:3]) + (", …" if len(never) > 3 else "")
    text = (f"{len(never)} of {N} owners were never asked ({shown}; T/N = {T / N:.3g} exchanges "
            f"per owner): raise learner.iterations")
    return Diagnostic("owners_never_asked", WARNING, text, {"owners": len(never), "participants": N,
                                                            "exchanges_per_owner": T / N})


def _network(result: RunResult) -> Diagnostic | None:
    if result.network is None:
        return None
    transmissions = sum(ch.transmissions for ch in result.network.channels)
    collided = sum(ch.collided for ch in result.network.channels)
    counts = result.training.log.counts
    losses, exchanges = counts["loss"], result.training.k
    collided_share = collided / transmissions if transmissions else 0.0
    loss_share = losses / (losses + exchanges) if losses + exchanges else 0.0
    if max(collided_share, loss_share) < LOST_SHARE:
        return None
    figures = {"transmissions": transmissions, "collided": collided, "collided_share": collided_share,
               "losses": losses, "loss_share": loss_share}
    what = (f"{collided_share:.0%} of transmissions collided" if collided_share >= loss_share else
            f"{loss_share:.0%} of exchanges were lost")
    text = (f"{what}, each costing its owner ε: {network_lever(result.scenario)}")
    return Diagnostic("network_losses", WARNING, text, figures)


def network_lever(scenario: Scenario) -> str:
    net = scenario.network
    levers = ["add network.channels", "lower network.clock_rate"]
    if net.mode == "request" and not net.carrier_sense:
        levers.append("set network.carrier_sense = true")
    if net.transmission_time > 0:
        levers.append("shorten network.transmission_time")
    if net.loss_probability > 0:
        levers.append(f"check network.loss_probability ({net.loss_probability:g})")
    return ", ".join(levers[:-1]) + " or " + levers[-1]


def _surplus(result: RunResult) -> Diagnostic | None:
    if result.market is None:
        return None
    from dpmarket.markets.outcome import learner_value

    o, m = result.market.outcome, result.scenario.market
    simulated = difference(learner_value(m.value, result.psi_final), o.spend)
    if o.surplus >= 0 and simulated >= 0:
        return None
    oracle = o.surplus >= 0  # only the simulated ψ says so
    figures = {"learner_surplus": float(o.surplus), "learner_surplus_simulated": float(simulated),
               "total_payment": float(o.spend), "value": float(m.value)}
    shown = simulated if oracle else o.surplus
    text = (f"the learner's surplus is negative ({shown:.4g}{' with the simulated ψ' if oracle else ''}: it "
            f"pays {o.spend:.4g} for a model worth less): lower the price or market.budget, or raise "
            f"market.value (now {m.value:g})")
    return Diagnostic("learner_surplus_negative", WARNING, text, figures, oracle=oracle)


def _stability(result: RunResult) -> Diagnostic | None:
    """The step's stability number: the public one (ρ = "auto"), else each owner's own curvature's."""
    public = result.step.stability if result.step is not None else None
    number, oracle = (public, False) if public is not None else (result.step_curvature, True)
    if number is None or not reaches(number, STABILITY_NEAR * STABILITY_LIMIT):
        return None
    rho = result.step.rho if result.step is not None else result.scenario.learner.rho
    return stability_diagnostic(number, rho, result.scenario, oracle)


def stability_diagnostic(number: float, rho: float, scenario: Scenario, oracle: bool) -> Diagnostic:
    over = exceeds(number, STABILITY_LIMIT)
    text = (f"the step is {'beyond' if over else 'near'} the stability limit (stability number "
            f"{number:.3g}, limit {STABILITY_LIMIT:g}): the largest owners' copies "
            f"{'oscillate' if over else 'barely settle'}; lower learner.rho (now {rho:.4g})"
            + ("" if scenario.learner.rho != "auto" else
               f" or learner.auto_stability (now {scenario.learner.auto_stability:g})"))
    return Diagnostic("step_near_stability_limit", WARNING, text,
                      {"stability_number": float(number), "limit": STABILITY_LIMIT, "rho": float(rho)},
                      oracle=oracle)


def _forecast(result: RunResult) -> Diagnostic | None:
    if result.market is None:
        return None
    forecast, simulated = float(result.market.outcome.psi_forecast), float(result.psi_final)
    if not (forecast > 0 and simulated > 0):
        return None
    factor = max(forecast / simulated, simulated / forecast)
    if factor < FORECAST_FACTOR:
        return None
    calibrated = "calibrated" in result.market.source  # by pilot runs (else explicit or the law alone)
    text = (f"the forecast the market settled on is {factor:.3g}× off this run (psi {forecast:.4g} "
            f"forecast, {simulated:.4g} simulated), and the deal rests on it: "
            + ("widen market.pilots (levels, replications) around the budgets traded" if calibrated
               else "calibrate it by pilot runs (leave market.forecast unset)")
            + "; one run is one draw of the noise, `dpmarket market --replications 10` compares the "
              "forecast with a mean")
    figures = {"psi_forecast": forecast, "psi_simulated": simulated, "factor": factor}
    return Diagnostic("forecast_far", WARNING, text, figures, oracle=True)


def _clipping(result: RunResult) -> Diagnostic | None:
    share = result.clipped_share
    if share is None or share < CLIPPED_SHARE:
        return None
    p = result.scenario.privacy
    lever = (f"raise privacy.clip_quantile (now {p.clip_quantile:g})" if p.clip == "auto"
             else f"raise privacy.clip (now {p.clip:g})")
    text = (f"{share:.0%} of the per-example gradients are clipped at the final model: the answers are "
            f"biased towards smaller steps; {lever}")
    return Diagnostic("clipping_heavy", WARNING, text, {"clipped_share": float(share),
                                                        "clip_bound": float(result.owners[0].clip)},
                      oracle=True)


# --- before any run (dpmarket validate) -------------------------------------------------------

def before_run(scenario: Scenario) -> list[Diagnostic]:
    """What can be said before training, from public information only: the owners' sizes and the
    public proxy (the owners' records are drawn, or read, only for their sizes and bounds).

    Expected wasted budgets and owners never asked (the schedule's Binomial counts), the network's
    collisions (pure or slotted ALOHA), the step's stability (the proxy's curvature) and the
    forecast law's ψ̂ against the proxy's ψ(0).
    """
    from dpmarket.data.consortium import build_consortium

    consortium = build_consortium(scenario)
    sizes = np.asarray(consortium.sizes, dtype=float)
    found = [_expected_unspent(scenario, sizes), _expected_never_asked(scenario, sizes),
             _expected_collisions(scenario, len(sizes)), *_public_step_and_forecast(scenario, consortium)]
    return [d for d in found if d is not None]


def _shares(scenario: Scenario, owners: int) -> np.ndarray:
    rates = np.array([scenario.owner_value(i, "clock_rate") for i in range(owners)], dtype=float)
    return rates / rates.sum()


def _expected_unspent(scenario: Scenario, sizes: np.ndarray) -> Diagnostic | None:
    """E[min(X_i, m_i)]/m_i with X_i ~ Binomial(T, π_i): each owner's expected share of its budget."""
    if scenario.market is not None or scenario.learner.algorithm != "async":
        return None  # a market decides who takes part; a synchronous round asks everyone
    from dpmarket.privacy.mechanisms import answer_cap

    p, T = scenario.privacy, scenario.learner.iterations
    shares = _shares(scenario, len(sizes))
    spent = {}
    for i, share in enumerate(shares):
        cap = answer_cap(p.split, T, float(share), scenario.owner_value(i, "cap"), p.cap_quantile)
        key = (float(share), cap)
        if key not in spent:
            spent[key] = _expected_min(T, float(share), cap) / cap
    fractions = np.array([spent[(float(s), answer_cap(p.split, T, float(s), scenario.owner_value(i, "cap"),
                                                      p.cap_quantile))] for i, s in enumerate(shares)])
    low = int(np.sum(fractions < UNSPENT_FRACTION))
    if low < UNSPENT_OWNERS * len(fractions):
        return None
    text = (f"expected before any run: {low} of {len(fractions)} owners will spend less than half of "
            f"their budget (median {np.median(fractions):.0%}): {unspent_lever(scenario)}")
    return Diagnostic("budget_unspent", WARNING, text, {"owners": low, "participants": len(fractions),
                                                        "median_spent_fraction": float(np.median(fractions))})


def _expected_min(n: int, p: float, m: int) -> float:
    """E[min(X, m)] for X ~ Binomial(n, p), from the pmf on its mean ± 40 standard deviations."""
    if p >= 1.0:
        return float(min(n, m))
    mean, sd = n * p, math.sqrt(n * p * (1.0 - p))
    low, high = max(0, math.floor(mean - 40 * sd - 10)), min(n, math.ceil(mean + 40 * sd + 10))
    k = np.arange(low, high + 1, dtype=float)
    log_pmf = np.array([math.lgamma(n + 1) - math.lgamma(j + 1) - math.lgamma(n - j + 1) for j in k]) \
        + k * math.log(p) + (n - k) * math.log1p(-p)
    pmf = np.exp(log_pmf - log_pmf.max())
    return float(np.sum(np.minimum(k, m) * pmf) / pmf.sum())


def _expected_never_asked(scenario: Scenario, sizes: np.ndarray) -> Diagnostic | None:
    if scenario.market is not None or scenario.learner.algorithm != "async":
        return None
    T = scenario.learner.iterations
    expected = float(np.sum((1.0 - _shares(scenario, len(sizes))) ** T))
    if expected < NEVER_ASKED_EXPECTED:
        return None
    N = len(sizes)
    text = (f"expected before any run: about {expected:.3g} of {N} owners will never be asked "
            f"(T/N = {T / N:.3g} exchanges per owner): raise learner.iterations")
    return Diagnostic("owners_never_asked", WARNING, text, {"expected": expected, "participants": N,
                                                            "exchanges_per_owner": T / N})


def _expected_collisions(scenario: Scenario, owners: int) -> Diagnostic | None:
    """The collided share of transmissions ALOHA predicts: pure (request mode: a request overlaps
    another started within a transmission time either side, 1 − e^{−2G}, G the requests per
    transmission time on a channel) or slotted (broadcast: an answer collides unless it is alone in
    its slot, 1 − e^{−μ}, μ the owners ready per slot on a channel). Carrier sensing, retries and
    latency are left out, so it is an estimate."""
    net = scenario.network
    if net.mode == "ideal" or not net.collisions:
        return None
    online = 1.0
    if net.dropout.mean_online is not None:
        online = net.dropout.mean_online / (net.dropout.mean_online + net.dropout.mean_offline)
    rates = np.array([scenario.owner_value(i, "clock_rate") for i in range(owners)], dtype=float) * online
    channel = np.array([scenario.owner_value(i, "channel") for i in range(owners)])
    load = np.bincount(channel, weights=rates, minlength=net.channels)
    if net.mode == "request":
        share = 1.0 - np.exp(-2.0 * load * net.transmission_time)
    else:
        share = 1.0 - np.exp(-load * net.broadcast_interval)
    worst = float(np.max(share))
    if worst < LOST_SHARE or (net.mode == "request" and net.carrier_sense):
        return None
    text = (f"expected before any run: about {worst:.0%} of transmissions will collide "
            f"({'pure' if net.mode == 'request' else 'slotted'} ALOHA), each costing its owner ε: "
            f"{network_lever(scenario)}")
    return Diagnostic("network_losses", WARNING, text, {"collided_share": worst, "channels": net.channels})


def _public_step_and_forecast(scenario: Scenario, consortium) -> list[Diagnostic]:
    """The step's public stability number and the forecast law's ψ̂ against the proxy's ψ(0)."""
    from dpmarket.data.proxy import public_info, resolve_step, step_scenario
    from dpmarket.learning.stepsize import stability_number

    sizes = np.asarray(consortium.sizes, dtype=float)
    found = []
    if scenario.learner.algorithm == "async":
        step = resolve_step(scenario, consortium, sizes)
        number = step.stability
        if number is None:
            info = public_info(step_scenario(scenario), consortium)
            number = stability_number(step.rho, len(sizes), scenario.learner.iterations,
                                      scenario.model.regularization, float(sizes.max() / sizes.sum()),
                                      curvature=info.owner_curvature)
        if reaches(number, STABILITY_NEAR * STABILITY_LIMIT):
            found.append(stability_diagnostic(number, step.rho, scenario, oracle=False))
    forecast = _forecast_before(scenario, consortium)
    return found + ([forecast] if forecast is not None else [])


def _forecast_before(scenario: Scenario, consortium) -> Diagnostic | None:
    """The uncalibrated law's ψ̂ at the scenario's budgets against ψ(0) on the public proxy."""
    from dpmarket.markets.law import LawForecast, build_inputs, law_unavailable

    if scenario.market is not None or law_unavailable(scenario) is not None:
        return None
    inputs = build_inputs(scenario, consortium)
    law = LawForecast(inputs)
    N = len(consortium.sizes)
    eps = np.array([scenario.owner_value(i, "epsilon") for i in range(N)], dtype=float)
    members = np.ones((1, N), bool)
    free, noise = law.terms(eps, consortium.sizes, members)
    psi, zero = float(free[0] + noise[0]), float(np.sum(inputs.floor_weights))
    if not (zero > 0 and psi >= WEAK_RATIO * zero):
        return None
    floor = float(free[0])
    lever = weak_lever(scenario, floor >= FLOOR_SHARE * psi, floor)
    text = (f"forecast before any run: psi {psi:.4g} against {zero:.4g} for the untrained θ = 0 on the "
            f"public proxy (law, uncalibrated): {lever}")
    return Diagnostic("weak_model", WARNING, text, {"psi_forecast": psi, "psi_zero_proxy": zero,
                                                    "noise_free": floor, "noise": float(noise[0])})
