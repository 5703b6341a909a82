"""Every number a run derives from the records and the model stays finite, by construction.

An owner's answer, f and ψ are sums over records of quantities bounded by the declared domain
(|x_j| ≤ X, |y| ≤ Y, θ in Θ = {‖θ‖∞ ≤ θmax}). A sum that overflows becomes ±inf, inf − inf is
NaN, and ``np.clip`` keeps NaN: one overflow anywhere and an answer, θ and ψ are NaN whatever the
noise. So the bounds are checked once, before any arithmetic, against ROOM (well below the
largest float, leaving room for the few sums and factors of 2 on top): with

    R = Y + θmax·‖z‖₁ + ‖z‖₁  ≥ |y|, |θᵀz|, ‖z‖₁ for every record and every θ in Θ,

every per-record quantity (a loss, a per-example gradient's L1 norm, an entry of ZᵀZ, Zᵀy,
yᵀy) is at most 2R², so n·R² ≤ ROOM keeps every sum over n records finite; λ enters through
the Hessian A + nλI, the regulariser λθᵀθ and Algorithm 1's denominator T²σ = 2λT², and it
must not be lost in rounding next to the data term (or A + nλI is singular in floating point).
Finally f(θ*) must be positive and large enough that ψ = f(θ)/f(θ*) − 1 is finite over all of Θ.
A bound that fails names the scenario key (or the data column) that made it so.
"""

from __future__ import annotations

import math

import numpy as np

from dpmarket.errors import DataError, ScenarioError
from dpmarket.learning.objective import OwnerData, make_loss

ROOM = 1e300  # largest magnitude a derived bound may reach (the largest float is 1.8e308)
CONDITION = 1e-14  # smallest 2λ / curvature of the data term: f's condition number stays ≤ 1e14


def reach(z_l1: float, y_max: float, theta_max: float) -> float:
    """R: a bound on |y|, |θᵀz| and ‖z‖₁ over the declared domain (‖z‖₁ ≤ z_l1, |y| ≤ y_max) and Θ."""
    return y_max + theta_max * z_l1 + z_l1


def check_bounds(scenario, records: int, z_l1: float, y_max: float, p: int) -> None:
    """Refuse declared bounds or a λ under which some sum over the ``records`` could overflow.

    Called before the records' statistics are computed, so no overflow ever happens (numpy
    would print a warning for it, breaking the one-line error).
    """
    m, n = scenario.model, float(records)
    r = reach(z_l1, y_max, m.theta_max)
    if not n * r * r <= ROOM:
        key, value = largest_bound(scenario)
        raise ScenarioError(scenario.source, key, value,
                            f"lets one record's loss or gradient reach {r * r:.3g}, and {n:.0f} records "
                            f"sum to more than {ROOM:.0e}: the answers, f and ψ would overflow")
    xi = make_loss(m.loss).l1_sensitivity(z_l1, y_max, m.theta_max)
    if not xi > 0:  # ‖z‖₁ so small that Ξ underflows: no Laplace scale could be derived from it
        raise ScenarioError(scenario.source, "data.feature_bound", scenario.data.feature_bound,
                            f"makes the sensitivity Ξ = {xi!r}: it underflows to zero")
    lam, T = m.regularization, scenario.learner.iterations
    worst = max(n * lam, lam * p * m.theta_max * m.theta_max, 2.0 * lam * T * T)
    if not worst <= ROOM:
        raise ScenarioError(scenario.source, "model.regularization", lam,
                            f"makes nλ, λ·p·θmax² or T²σ reach {worst:.3g}, beyond {ROOM:.0e}: "
                            "the Hessian, f and Algorithm 1's steps would overflow")


def check_objective(scenario, consortium, objective) -> None:
    """Refuse a λ lost in rounding next to an owner's data term, or an f(θ*) that leaves ψ not finite
    (:func:`check_curvature`, then :func:`check_optimum`, which solves θ* if not yet solved)."""
    check_curvature(scenario, consortium)
    check_optimum(scenario, consortium, objective)


def check_curvature(scenario, consortium) -> None:
    """Refuse a λ lost in rounding next to an owner's (or the hold-out's) data term: an oracle check
    (it reads the records, like θ* itself), run before θ* is solved for."""
    held = consortium.holdout  # table data: the public rows, which the proxy's optima solve on
    public = ([OwnerData.from_block(held, scenario.model.intercept, False)]
              if held is not None and held.shape[1] else [])
    _check_curvature(scenario, consortium.owners + public)


def check_optimum(scenario, consortium, objective) -> None:
    """Refuse an f(θ*) that leaves ψ = f/f* − 1 not finite over Θ (an oracle check, after θ*)."""
    f_star = objective.f_star
    if not math.isfinite(f_star):  # unreachable once check_bounds passed: a bug, not bad input
        raise FloatingPointError(f"f(θ*) = {f_star!r} over records in the declared domain")
    m = scenario.model
    r = reach(consortium.z_l1, consortium.y_max, m.theta_max)
    p = int(consortium.owners[0].stats.A.shape[0])
    f_max = 2.0 * r * r + m.regularization * p * m.theta_max * m.theta_max
    if f_star > 0 and f_max / f_star <= ROOM:  # f over Θ is at most f_max: ψ finite everywhere
        return
    reason = (f"f(θ*) = {f_star!r}: nothing is left to fit, and ψ = f(θ)/f(θ*) − 1 would not be "
              "finite")
    d = scenario.data
    if d.source == "table":
        raise DataError(d.path, d.table.target, f"the owners' labels, transformed with data.label_bound = "
                        f"{d.label_bound!r} and data.table.spread = {d.table.spread!r}, leave {reason}")
    key, value = (("data.label_bound", d.label_bound) if m.loss == "squared"
                  else ("model.regularization", m.regularization))
    raise ScenarioError(scenario.source, key, value, f"leaves {reason}")


def _check_curvature(scenario, owners) -> None:
    """2λ, the Hessian's floor, must not vanish in rounding next to any owner's data term (or the
    hold-out's), whose curvature is at most scale·trace(ZᵀZ)/n (squared and logistic losses; the
    hinge has none): else the ridge solve or its Cholesky factor fails ("Singular matrix") on
    collinear features."""
    scale = {"squared": 2.0, "logistic": 0.25}.get(scenario.model.loss)
    if scale is None:
        return
    lam = scenario.model.regularization
    curvature = max(scale * float(np.trace(o.stats.A)) / o.n for o in owners)
    if 2.0 * lam >= CONDITION * curvature:
        return
    raise ScenarioError(scenario.source, "model.regularization", lam,
                        f"is lost in rounding next to the data term (2λ below {CONDITION:.0e} × its "
                        f"curvature {curvature:.3g}): f is not strongly convex in floating point and "
                        "θ* cannot be solved for")


def largest_bound(scenario) -> tuple[str, float]:
    """The declared bound R grows with most: the largest of X, Y (regression only) and θmax."""
    d, m = scenario.data, scenario.model
    bounds = [("data.feature_bound", d.feature_bound), ("model.theta_max", m.theta_max)]
    if m.loss == "squared":
        bounds.append(("data.label_bound", d.label_bound))
    return max(bounds, key=lambda kv: kv[1])
