"""Exact solves by projected Newton (dpmarket/learning/newton.py) against the solver they replace.

On many random logistic problems — a few to 30 coefficients, weak and strong regularisation, boxes that
bind — θ* must reach the f of scipy's L-BFGS-B run as the package ran it before (tolerances 10⁻¹⁵ in f,
10⁻¹² in the gradient) within 10⁻¹⁰ relative and never be worse beyond the rounding of f, with the
optimality conditions of the box holding; a Newton solve stopped after one iteration (a deliberately
wrong solver) fails the same comparison. The hinge's θ* is exact: its duality gap is zero to the
rounding of f, where the previous solver (L-BFGS-B through Huber smoothings) stopped 10⁻¹⁰–10⁻⁷ above
it, which the same certificate shows.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import optimize

from dpmarket.learning import newton
from dpmarket.learning.objective import HINGE_WIDTHS, Objective, OwnerData, hinge_duality_gap, make_loss

RELATIVE = 1e-10
LBFGS = {"maxiter": 10_000, "ftol": 1e-15, "gtol": 1e-12}


def problem(seed: int, loss: str, records: int = 800) -> Objective:
    """A random problem: 1–3 owners of up to ``records`` records, 2–30 coefficients, features on different
    scales, labels from a noisy linear rule, λ over four decades and a box that binds about half the time."""
    gen = np.random.default_rng(seed)
    p, owners = int(gen.integers(2, 31)), int(gen.integers(1, 4))
    truth = gen.standard_normal(p) * gen.uniform(0.5, 4.0)
    datas = []
    for _ in range(owners):
        n = int(gen.integers(100, records))
        X = gen.standard_normal((n, p - 1)) * 10 ** gen.uniform(-0.5, 0.5, p - 1)
        Z = np.hstack([X, np.ones((n, 1))])
        y = np.where(Z @ truth + gen.standard_normal(n) > 0, 1.0, -1.0)
        datas.append(OwnerData.from_block(np.vstack([X.T, np.ones(n), y]), intercept=True, keep_records=True))
    lam = 10 ** gen.uniform(-5, -1)
    theta_max = float(gen.choice([0.3, 1.0, 10.0]))
    return Objective(make_loss(loss), datas, lam, theta_max)


def lbfgsb(obj: Objective, fun=None, start=None) -> np.ndarray:
    """The solver the package used before: L-BFGS-B on f and ∇f, tight tolerances."""
    def f(theta):
        return obj.value(theta), obj.gradient(theta)

    bounds = [(-obj.theta_max, obj.theta_max)] * obj.p
    x0 = np.zeros(obj.p) if start is None else start
    return optimize.minimize(fun or f, x0, jac=True, method="L-BFGS-B", bounds=bounds, options=LBFGS).x


def old_hinge(obj: Objective) -> np.ndarray:
    """The hinge as solved before: L-BFGS-B on each Huber smoothing of HINGE_WIDTHS, warm-started, on the
    records as owners held them then (record-major)."""
    Z = np.vstack([np.ascontiguousarray(o.records()[0]) for o in obj.owners])
    YZ = np.concatenate([o.records()[1] for o in obj.owners])[:, None] * Z
    n, theta = len(YZ), np.zeros(obj.p)
    for h in HINGE_WIDTHS:
        def fun(t, h=h):
            m = 1.0 - YZ @ t
            d = np.clip(m / h, 0.0, 1.0)
            value = np.where(m > h, m - h / 2, 0.5 * m * d)
            return obj.lam * t @ t + value.sum() / n, 2 * obj.lam * t - (d @ YZ) / n
        theta = lbfgsb(obj, fun, theta)
    return theta


def box_conditions_hold(obj: Objective, theta: np.ndarray) -> bool:
    """KKT on the box: free coordinates have no gradient, those at a face a gradient pushing outwards."""
    g = obj.gradient(theta)
    at_face = np.abs(theta) >= obj.theta_max * (1 - 1e-12)
    scale = np.max(np.abs(g)) + 1.0
    return bool(np.all(np.abs(g[~at_face]) <= 1e-7 * scale) and np.all(g[at_face] * theta[at_face] <= 0))


@pytest.mark.parametrize("seed", range(24))
def test_logistic_optimum_matches_the_previous_solver(seed):
    obj = problem(seed, "logistic")
    ours, theirs = obj.minimize(), lbfgsb(obj)
    f_ours, f_theirs = obj.value(ours), obj.value(theirs)
    assert abs(f_ours - f_theirs) <= RELATIVE * f_theirs
    assert f_ours <= f_theirs * (1 + 1e-14)
    assert box_conditions_hold(obj, ours)


def test_random_problems_include_binding_boxes():
    """Half the problems above have coefficients held at a face of the box (else the test proves less)."""
    held = [np.any(np.abs(problem(s, "logistic").minimize()) >= problem(s, "logistic").theta_max)
            for s in range(24)]
    assert 6 <= sum(held) <= 18


@pytest.mark.parametrize("seed", [1, 3, 5])
def test_hinge_optimum_is_exact_and_below_the_previous_solvers(seed):
    obj = problem(100 + seed, "hinge", records=300)  # small: the previous solver takes seconds
    ours, theirs = obj.minimize(), old_hinge(obj)
    f_ours, f_theirs = obj.value(ours), obj.value(theirs)
    assert f_ours <= f_theirs * (1 + 1e-14)
    assert abs(hinge_duality_gap(obj, ours)) <= 1e-13 * f_ours  # exact, to the rounding of f
    assert hinge_duality_gap(obj, theirs) >= f_theirs - f_ours - 1e-13 * f_ours  # the certificate holds
    assert hinge_duality_gap(obj, theirs) > 1e-12 * f_ours  # and tells the previous solver's point apart


def test_own_data_models_solve_each_owners_problem():
    obj = problem(7, "logistic")
    for i, theta in enumerate(obj.own_data_models()):
        def f(t, i=i):
            return obj.value(t, [i]), obj.gradient(t, [i])
        ref = lbfgsb(obj, f)
        assert abs(obj.value(theta, [i]) - obj.value(ref, [i])) <= RELATIVE * obj.value(ref, [i])


def test_the_comparison_fails_on_a_solver_stopped_early(monkeypatch):
    """One Newton iteration (a deliberately wrong solver) is far from the optimum the test asks for."""
    obj = problem(3, "logistic")
    monkeypatch.setattr(newton, "MAX_ITERATIONS", 1)
    early = obj.minimize()
    assert abs(obj.value(early) - obj.value(lbfgsb(obj))) > RELATIVE * obj.value(early)
