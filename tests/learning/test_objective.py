"""Models: gradients, the sufficient-statistics path, θ* against independent solvers, ψ."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import tiny
from scipy import optimize

from dpmarket.data import build_consortium
from dpmarket.learning.objective import Objective, OwnerData, SquaredStats, hinge_duality_gap, make_loss


def records(n=400, p=3, classify=False, seed=0):
    gen = np.random.default_rng(seed)
    Z = np.hstack([gen.uniform(-1, 1, (n, p)), np.ones((n, 1))])
    if classify:
        y = np.where(Z[:, 0] + 0.3 * gen.standard_normal(n) > 0.2, 1.0, -1.0)
    else:
        y = Z @ np.array([0.5, -0.3, 0.2, 0.1]) + 0.2 * gen.standard_normal(n)
    return Z, y


def owner(Z, y, keep=True):
    block = np.vstack([Z[:, :-1].T, np.ones(len(y)), y])
    return OwnerData.from_block(block, intercept=True, keep_records=keep)


@pytest.mark.parametrize("loss", ["squared", "logistic", "hinge"])
def test_mean_gradient_matches_per_example_and_finite_differences(loss):
    Z, y = records(classify=loss != "squared")
    fn, data = make_loss(loss), owner(Z, y)
    theta = np.array([0.31, -0.27, 0.13, 0.05])
    assert np.allclose(fn.mean_grad(theta, data), fn.per_example_grads(theta, Z, y).mean(axis=0))
    h, fd = 1e-6, []
    for j in range(len(theta)):
        e = np.zeros_like(theta)
        e[j] = h
        fd.append((fn.total(theta + e, data) - fn.total(theta - e, data)) / (2 * h * len(y)))
    assert np.allclose(fn.mean_grad(theta, data), fd, atol=1e-5)


def test_squared_statistics_path_equals_the_records_path():
    Z, y = records()
    stats_only, full = owner(Z, y, keep=False), owner(Z, y, keep=True)
    assert pytest.approx(Z.T @ Z) == full.stats.A and full.stats.c == pytest.approx(y @ y)
    theta = np.array([0.2, 0.1, -0.4, 0.3])
    fn = make_loss("squared")
    assert fn.total(theta, stats_only) == pytest.approx(float(np.sum((y - Z @ theta) ** 2)), rel=1e-12)
    direct = -2 * Z.T @ (y - Z @ theta) / len(y)
    assert np.allclose(fn.mean_grad(theta, stats_only), direct, rtol=1e-12, atol=1e-14)
    assert SquaredStats.of(Z, y).b == pytest.approx(stats_only.stats.b)


def test_ridge_optimum_matches_the_closed_form_when_the_box_is_inactive():
    Z, y = records()
    obj = Objective(make_loss("squared"), [owner(Z, y, keep=False)], 1e-3, 10.0)
    n = len(y)
    closed = np.linalg.solve(Z.T @ Z / n + 1e-3 * np.eye(4), Z.T @ y / n)
    assert np.allclose(obj.theta_star, closed, atol=1e-12)
    assert obj.psi(obj.theta_star) == pytest.approx(0.0, abs=1e-12)


def test_ridge_optimum_on_a_binding_box_satisfies_kkt_and_matches_lbfgs():
    Z, y = records()
    y = 3 * y
    obj = Objective(make_loss("squared"), [owner(Z, y)], 1e-3, 0.4)
    theta = obj.theta_star
    assert np.max(np.abs(theta)) == pytest.approx(0.4)
    grad = obj.gradient(theta)
    for t, g in zip(theta, grad, strict=True):  # KKT on a box
        if abs(t) < 0.4 - 1e-9:
            assert abs(g) < 1e-8
        else:
            assert np.sign(g) == -np.sign(t)

    def f(t):
        r = y - Z @ t
        return r @ r / len(y) + 1e-3 * t @ t, -2 * Z.T @ r / len(y) + 2e-3 * t

    ref = optimize.minimize(f, np.zeros(4), jac=True, method="L-BFGS-B", bounds=[(-0.4, 0.4)] * 4,
                            options={"ftol": 1e-15, "gtol": 1e-12}).x
    assert obj.value(theta) <= obj.value(ref) + 1e-12
    assert np.allclose(theta, ref, atol=1e-6)


@pytest.mark.filterwarnings("ignore:delta_grad")
def test_logistic_optimum_matches_an_independent_trust_region_solver():
    Z, y = records(classify=True)
    obj = Objective(make_loss("logistic"), [owner(Z, y)], 1e-3, 5.0)

    def f(t):
        return np.mean(np.logaddexp(0, -y * (Z @ t))) + 1e-3 * t @ t

    ref = optimize.minimize(f, np.full(4, 0.1), method="trust-constr",
                            bounds=optimize.Bounds(-5, 5), options={"gtol": 1e-12, "xtol": 1e-14}).x
    assert np.allclose(obj.theta_star, ref, atol=1e-5)
    assert obj.value(obj.theta_star) <= f(ref) + 1e-12


def test_hinge_optimum_is_certified_by_the_duality_gap():
    Z, y = records(n=600, classify=True)
    obj = Objective(make_loss("hinge"), [owner(Z, y)], 5e-3, 10.0)
    gap = hinge_duality_gap(obj, obj.theta_star)
    assert 0 <= gap < 1e-6 * obj.f_star
    # the certificate is not vacuous: a visibly worse point has a large gap
    assert hinge_duality_gap(obj, 0.5 * obj.theta_star) > 1e-3 * obj.f_star


def test_psi_is_nonnegative_on_the_box_and_own_models_minimise_their_own_data():
    scenario = tiny(data={"owners": 4, "shift": 0.5})
    consortium = build_consortium(scenario)
    obj = Objective(make_loss("squared"), consortium.owners, 1e-5, 1.0)
    gen = np.random.default_rng(4)
    assert np.all(obj.psis(gen.uniform(-1, 1, (500, obj.p))) >= -1e-12)
    own = obj.own_data_models()
    for i, theta in enumerate(own):
        for _ in range(20):
            other = np.clip(theta + 0.05 * gen.standard_normal(obj.p), -1, 1)
            assert obj.value(theta, [i]) <= obj.value(other, [i]) + 1e-12
    assert np.allclose(obj.values(own), [obj.value(t) for t in own])
