"""Learner: Algorithm 1 exactly as printed, the synchronous baselines, uniform selection."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import chi2_accepts, ks_accepts, tiny
from scipy import stats

from dpmarket.learning import kernels
from dpmarket.learning.learner import AsyncLearner, SyncAveragedLearner, SyncLearner
from dpmarket.privacy.cohort import build_owners
from dpmarket.runs.run import execute


def reference_algorithm_1(sizes, p, T, rho, lam, tmax, owners, answers, central="printed"):
    """Design §2 written out directly, one formula per line."""
    N, n, sigma = len(sizes), sum(sizes), 2 * lam
    theta_L, theta = np.zeros(p), np.zeros((N, p))
    for i, q in zip(owners, answers, strict=True):
        bar = (theta_L + theta[i]) / 2
        grad_g = 2 * lam * bar
        step = N * rho / (T**2 * sigma)
        theta[i] = np.clip(bar - step * (grad_g / (2 * N) + sizes[i] / n * q), -tmax, tmax)
        a_L = (N - 1) * rho / (N * T**2 * sigma) if central == "printed" else rho / (2 * T**2 * sigma)
        theta_L = np.clip(bar - a_L * grad_g, -tmax, tmax)
    return theta_L, theta


@pytest.mark.parametrize("central", ["printed", "proof"])
@pytest.mark.parametrize("tmax", [10.0, 0.05])  # the second makes the projection bind
def test_async_learner_is_algorithm_1(central, tmax):
    gen = np.random.default_rng(1)
    sizes, p, T = np.array([100, 300, 50]), 4, 200
    owners = gen.integers(0, 3, T)
    answers = gen.standard_normal((T, p)) * 3
    learner = AsyncLearner(sizes, p, T, 2.0, 1e-3, theta_max=tmax, theta_l_step=central)
    for i, q in zip(owners, answers, strict=True):
        learner.update(i, learner.query_point(i), q)
    ref_L, ref = reference_algorithm_1(sizes, p, T, 2.0, 1e-3, tmax, owners, answers, central)
    assert np.array_equal(learner.theta_L, ref_L) and np.array_equal(learner.theta, ref)
    assert learner.k == T


def test_a_copy_of_the_learner_updates_on_its_own():
    """The replay runs a copy (copy.copy) of the learner beside it: the copy's updates, interleaved
    with the original's, leave the original's models the ones it makes alone, and the copy makes its
    own scratch arrays (a copy may run in another thread)."""
    import copy

    gen = np.random.default_rng(2)
    sizes, p, T = np.array([100, 300, 50]), 4, 50
    owners, answers = gen.integers(0, 3, T), gen.standard_normal((T, p))
    alone = AsyncLearner(sizes, p, T, 2.0, 1e-3, theta_max=0.05)
    for i, q in zip(owners, answers, strict=True):
        alone.update(i, alone.query_point(i), q)
    original = AsyncLearner(sizes, p, T, 2.0, 1e-3, theta_max=0.05)
    original.update(0, original.query_point(0), answers[0])  # its scratch made before the copy
    twin = copy.copy(original)
    twin.theta_L, twin.theta, twin.counts, twin.k = np.zeros(p), np.zeros((3, p)), np.zeros(3, int), 0
    original.theta_L[:], original.theta[:], original.k = 0.0, 0.0, 0
    for i, q in zip(owners, answers, strict=True):
        original.update(i, original.query_point(i), q)
        twin.update(2 - i, twin.query_point(2 - i), -q)
    assert np.array_equal(original.theta_L, alone.theta_L) and np.array_equal(original.theta, alone.theta)
    assert twin._block is not original._block and not np.array_equal(twin.theta, original.theta)


def test_inverse_frequency_weighting_scales_answers_by_the_smoothed_share():
    """Weighted learner fed q equals a plain learner fed q/(N π̂_i), π̂_i = (c_i+1)/(k+N)."""
    sizes, p, T, N = np.array([100, 100]), 2, 10, 2
    weighted = AsyncLearner(sizes, p, T, 1.0, 1e-2, theta_max=10.0, weighting="inverse_frequency")
    plain = AsyncLearner(sizes, p, T, 1.0, 1e-2, theta_max=10.0)
    counts = np.zeros(N)
    for k, i in enumerate([0, 0, 1, 0], start=1):
        counts[i] += 1
        share = (counts[i] + 1) / (k + N)
        weighted.update(i, weighted.query_point(i), np.ones(p))
        plain.update(i, plain.query_point(i), np.ones(p) / (N * share))
    assert np.allclose(weighted.theta, plain.theta) and np.allclose(weighted.theta_L, plain.theta_L)
    unweighted = AsyncLearner(sizes, p, T, 1.0, 1e-2, theta_max=10.0)
    for i in [0, 0, 1, 0]:
        unweighted.update(i, unweighted.query_point(i), np.ones(p))
    assert not np.allclose(unweighted.theta, weighted.theta)


def test_sync_learners_follow_paper_002():
    sizes, p, T, rho, lam = np.array([1, 3]), 2, 5, 0.5, 0.1
    answers = [np.array([[1.0, -1.0], [0.5, 2.0]])] * T
    sync, avg = SyncLearner(sizes, p, T, rho, lam, theta_max=10.0), SyncAveragedLearner(sizes, p, T, rho,
                                                                                        lam, theta_max=10.0)
    theta, theta_avg, r = np.zeros(p), np.zeros(p), 1 / np.sqrt(T)
    theta2 = np.zeros(p)
    share = sizes / sizes.sum()
    for k in range(1, T + 1):
        sync.update(answers[k - 1])
        avg.update(answers[k - 1])
        theta = theta - rho / (T**2 * k) * (2 * lam * theta + share @ answers[k - 1])
        new = theta2 - rho / np.sqrt(k) * (2 * lam * theta2 + share @ answers[k - 1])
        theta_avg = ((k - 1) * theta_avg + (r + 1) * theta2) / (r + k)
        theta2 = new
    assert np.allclose(sync.model, theta) and np.allclose(avg.model, theta_avg)


@pytest.mark.parametrize("algorithm,rho,bound", [("async", 3.0, 1e-3), ("sync", 3e6, 1e-4),
                                                  ("sync_averaged", 2.0, 1e-3)])
def test_noise_free_runs_converge(algorithm, rho, bound):
    result = execute(tiny(privacy={"epsilon": 1e12}, learner={"algorithm": algorithm, "rho": rho,
                                                               "iterations": 600}))
    assert result.psi_final < bound


def test_ideal_network_selects_owners_uniformly_and_ticks_at_rate_n():
    """20,000 exchanges over 5 owners: chi-square and KS at α = 1e-4 (critical values from n)."""
    result = execute(tiny(data={"owners": 5, "records": 50, "features": 1},
                          learner={"iterations": 20_000}, output={"metric_points": 1, "plots": False}))
    counts = np.bincount(result.training.sequence, minlength=5)
    assert chi2_accepts(counts, np.full(5, 0.2))
    assert not chi2_accepts(counts, np.array([0.24, 0.19, 0.19, 0.19, 0.19]))  # one owner 1.2x
    total = result.training.time  # sum of 20,000 Exp(5) gaps: Gamma, mean T/N, sd √T/N
    assert abs(total - 20_000 / 5) < 5 * np.sqrt(20_000) / 5
    assert abs(total - 20_000 / 4) > 5 * np.sqrt(20_000) / 4  # a rate of 4 would be rejected


def test_unequal_clock_rates_tilt_selection_in_proportion():
    rates = [1.0, 2.0, 3.0]
    owners = [{"clock_rate": r} for r in rates]
    result = execute(tiny(data={"owners": 3, "records": 50, "features": 1}, owners=owners,
                          learner={"iterations": 12_000}, output={"metric_points": 1, "plots": False}))
    counts = np.bincount(result.training.sequence, minlength=3)
    assert chi2_accepts(counts, np.array(rates) / 6)
    assert not chi2_accepts(counts, np.full(3, 1 / 3))


def test_capped_budgets_refuse_and_stop_the_run():
    result = execute(tiny(privacy={"split": "capped", "cap": 5}, learner={"iterations": 60}))
    assert result.stop_reason == "budgets exhausted" and result.training.k == 15
    assert result.training.log.counts["refusal"] > 0
    for o in result.owners:
        assert o.ledger.spent == o.ledger.budget and o.ledger.answers == 5


def test_inter_exchange_times_are_exponential():
    """KS against Exp(N) on the event times of a run; a rate off by 25% is rejected."""
    from dpmarket.schedule.events import EventLog
    from dpmarket.schedule.protocol import Training, make_learner, run_uniform

    scenario = tiny(data={"owners": 4, "records": 40, "features": 1}, learner={"iterations": 4000})
    result = execute(scenario)
    owners, objective = result.owners, result.objective
    learner = make_learner("async", result.consortium.sizes, objective.p, 4000, 3.0, lam=1e-5, theta_max=1.0,
                           theta_l_step="printed", weighting="none")
    times = []

    class Log(EventLog):  # every row goes through record(), emit() included
        def record(self, time, kind, *rest):
            if kind == "update":
                times.append(time)

    owners = build_owners(scenario, result.consortium, objective)  # fresh ledgers
    training = Training(learner, owners, objective, Log(None), np.array([0]))
    run_uniform(training, 4000, np.random.default_rng(1), np.random.default_rng(2))
    gaps = np.diff([0.0, *times])
    assert ks_accepts(gaps, stats.expon(scale=1 / 4))
    assert not ks_accepts(gaps, stats.expon(scale=1 / 3))


@pytest.mark.skipif(not kernels.available(), reason="numba not installed")
@pytest.mark.parametrize("weighting", ["none", "inverse_frequency"])
def test_the_compiled_update_is_the_ufuncs_bits(weighting):
    """Under the numba backend Algorithm 1's update is one compiled call with the ufuncs' operations in
    their order: θ_i and θ_L are the numpy update's bits over 3,000 updates of answers spread over ten
    decades, steps that reach the box, and NaN answers (kept NaN, as np.maximum keeps them); a learner
    with θ_L's other step (a wrong input) ends elsewhere."""
    gen = np.random.default_rng(4)
    sizes, p = np.array([5.0, 1.0, 3.0]), 7

    def learner(step: str = "printed") -> AsyncLearner:
        return AsyncLearner(sizes, p, 50, 40.0, 1e-3, theta_max=0.5, theta_l_step=step, weighting=weighting)

    runs = [("numpy", learner()), ("numba", learner()), ("numpy", learner("proof"))]
    at_the_box = 0
    for k in range(3000):
        owner = int(gen.integers(3))
        answer = gen.standard_normal(p) * 10.0 ** gen.uniform(-5, 5, p)
        if k % 500 == 499:
            answer[gen.integers(p)] = np.nan
        for backend, run in runs:
            with kernels.pinned(backend):
                run.update(owner, run.query_point(owner), answer)
        (_, a), (_, b), _ = runs
        assert np.array_equal(a.theta, b.theta, equal_nan=True)
        assert np.array_equal(a.theta_L, b.theta_L, equal_nan=True)
        at_the_box += bool(np.any(np.abs(a.theta[owner]) == 0.5))
        if k % 500 == 499:  # the NaN is in the owner's copy: every learner starts again from one point
            assert np.isnan(a.theta[owner]).any()
            fresh = gen.uniform(-0.5, 0.5, (3, p))
            for _, run in runs:
                run.theta[:] = fresh
    assert at_the_box > 100  # the projection was active
    assert not np.array_equal(runs[2][1].theta_L, b.theta_L)
