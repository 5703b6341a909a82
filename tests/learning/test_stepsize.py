"""Learner parameters from public information: the floor law, ρ = "auto" and its stability limit,
answer caps sized by clock rates, the clip bound, and that none of them reads the owners' records."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from helpers import tiny
from scipy import optimize, stats

from dpmarket.data import build_consortium
from dpmarket.data.problem import prepare
from dpmarket.data.proxy import floor_terms, public_info, resolve_step, twin_seed
from dpmarket.learning.objective import OwnerData, clip_margins, make_loss
from dpmarket.learning.stepsize import (
    STABILITY_LIMIT,
    auto_rho,
    floor_law,
    floor_slowdown,
    share_moments,
    stability_number,
)
from dpmarket.privacy.cohort import build_owners, sensitivity
from dpmarket.rng import replication_seeds
from dpmarket.runs.replications import final_psis
from dpmarket.runs.run import execute
from dpmarket.scenario.loading import validate


def whitened(owners: int, iterations: int, rho, seed: int = 1, **sections) -> object:
    """A scenario on the default data (whitened, no intercept), without noise unless told, with the
    papers' privacy set-up (Ξ from the declared bounds: no clipping bias in the floor law's way)."""
    table = {"name": "w", "seed": seed, "data": {"owners": owners, "records": 2000, "features": 4, "seed": 7},
             "privacy": {"epsilon": 1e12, "preset": "paper"},
             "learner": {"iterations": iterations, "rho": rho},
             "output": {"metric_points": 5, "plots": False}}
    for key, value in sections.items():
        table[key] = {**table.get(key, {}), **value}
    return validate(table, "test")


# --- the floor law ---------------------------------------------------------------------------

@pytest.mark.parametrize("owners, iterations, rho", [(2, 300, 0.1), (10, 1000, 2.0), (4, 600, 0.3)])
def test_floor_law_predicts_noise_free_training(owners, iterations, rho):
    """Mean ψ_T of 4 noise-free runs within 3% of Σ w_j exp(−2ρh_j/(Tσ(N+1))); the same law with N
    in place of N+1 (a deliberately wrong input) misses by more than 8%."""
    prepared = prepare(whitened(owners, iterations, rho))
    h, w = floor_terms(prepared.objective)
    sims = [execute(whitened(owners, iterations, rho, seed), prepared=prepared).psi_final
            for seed in range(1, 5)]
    law = floor_law(rho, owners, iterations, 1e-5, h, weights=w)
    wrong = float(np.sum(w * np.exp(-2 * rho * h / (iterations * 2e-5 * owners))))
    assert law < 0.5 * prepared.objective.psi(np.zeros(4))  # a regime where training moved ψ
    assert np.mean(sims) == pytest.approx(law, rel=0.03)
    assert abs(np.mean(sims) / wrong - 1) > 0.08


@pytest.mark.parametrize("records, iterations, rho, wrong_fails", [
    ([30_000] + [2_000] * 5, 600, 1.0, True),  # one owner holds 75 % of the records
    ([40_000] + [1_000] * 20, 1_500, 8.0, True),  # 67 % among 21 owners
    ([20_000, 8_000, 4_000, 2_000, 1_000, 500], 800, 1.5, True),  # shares falling by halves
    ([15_000, 15_000] + [2_000] * 4, 600, 1.0, False),  # two leaders: the approximation's hardest case
])
def test_floor_law_with_unequal_shares_predicts_noise_free_training(records, iterations, rho, wrong_fails):
    """Mean ψ_T of 200 noise-free runs with unequal owner sizes within 6 % (the first-moment picture
    the slowdown comes from) plus 5 standard errors of the floor law given the members' shares; the
    equal-share law (a deliberately wrong input: shares ignored) misses by more where a leader
    dominates (it forecast 0.24–0.66 of these means)."""
    owners = len(records)
    scenario = whitened(owners, iterations, rho, data={"records": records})
    prepared = prepare(scenario)
    h, w = floor_terms(prepared.objective)
    sims = np.array(final_psis(scenario, replication_seeds(5, 200), prepared.consortium, prepared.objective))
    mean, se = sims.mean(), sims.std(ddof=1) / np.sqrt(len(sims))
    law = floor_law(rho, owners, iterations, 1e-5, h, weights=w, shares=share_moments(records))
    equal = floor_law(rho, owners, iterations, 1e-5, h, weights=w)
    tolerance = 0.06 + 5 * se / mean
    assert law < 0.5 * prepared.objective.psi(np.zeros(4))  # a regime where training moved ψ
    assert abs(mean / law - 1) <= tolerance
    if wrong_fails:
        assert abs(mean / equal - 1) > tolerance


def test_floor_slowdown_takes_the_secular_roots_of_every_member():
    """κ from the largest share, Σ s_i² and Σ s_i³ within 1.5 % of the exact smallest root of the
    secular equation over every member's share (module docstring), on Pareto-drawn shares of 3 to 50
    owners, 40 draws each, the leader's copy moving 50 % and 100 % of the way (ρ = "auto" stops at
    100 %: half the stability limit); 1 at equal shares."""
    rng = np.random.default_rng(3)
    lam, h = 1e-5, np.array([0.02, 0.05, 0.3])
    for owners, reach in itertools.product((3, 8, 20, 50), (0.5, 1.0) * 20):
        sizes = rng.pareto(1.2, owners) + 1.0
        shares = sizes / sizes.sum()
        eta = reach / (owners * (owners + 1) * shares.max() * h.max())  # how far the leader's copy moves
        kappa = floor_slowdown(owners, eta, lam, h, share_moments(sizes))
        for j, hj in enumerate(h):
            t = (owners + 1) * eta * (2 * lam + owners * shares * (hj - 2 * lam))
            def secular(u, t=t, n=owners):
                return (1 - u / 2) * np.mean(1 / (1 + t - u)) - (1 - u / (2 * n))
            u = optimize.brentq(secular, 0.0, 1 + t.min() - 1e-12)
            b = owners + 1 + (owners + 1) * eta * hj
            u0 = (b - np.sqrt(b * b - 8 * owners * (owners + 1) * eta * hj)) / 2
            assert np.ravel(kappa)[j] == pytest.approx(u / u0, rel=0.015)
        assert np.allclose(floor_slowdown(owners, eta, lam, h, share_moments(np.ones(owners))), 1.0)


def test_floor_slowdown_of_a_coalition_does_not_depend_on_the_others_solved_with_it():
    """Bit for bit: each root stops at its own last Newton step, so a coalition's floor (and so the
    forecast, which caches it) is the same alone as among others that take more steps."""
    rng = np.random.default_rng(5)
    h = np.array([0.02, 0.05, 0.3])
    moments = [share_moments(rng.pareto(a, n) + 1.0) for a, n in ((0.8, 4), (1.2, 30), (3.0, 12), (1.0, 86))]
    owners = np.array([4, 30, 12, 86])
    eta = 0.9 / (owners * (owners + 1) * np.array([m[0] for m in moments]) * h.max())
    together = floor_slowdown(owners, eta, 1e-5, h, tuple(np.array(x) for x in zip(*moments, strict=True)))
    for k in range(len(owners)):
        alone = floor_slowdown(owners[k:k + 1], eta[k:k + 1], 1e-5, h,
                               tuple(np.array([x]) for x in moments[k]))
        assert np.array_equal(alone[0], together[k])


def test_floor_grows_with_n_at_fixed_rho_and_auto_rho_grows_with_n():
    floors = [floor_law(3.0, n, 1000, 1e-5, np.array([0.25]), weights=np.array([0.7])) for n in (2, 20, 200)]
    assert floors[0] < floors[1] < floors[2]
    rhos = [auto_rho(n, 1000, 1e-5, 1 / n, 0.3, h_min=0.25, decay=5.0, fraction=0.5) for n in (2, 20, 200)]
    assert rhos[0] < rhos[1] < rhos[2]


# --- ρ = "auto" and stability -----------------------------------------------------------------

@pytest.mark.parametrize("seed", range(30))
def test_auto_rho_never_exceeds_its_share_of_the_stability_limit(seed):
    """Random N, T, λ, heavy-tailed sizes and curvatures: s(auto ρ) ≤ fraction × limit; a rule that
    assumes equal sizes (share_max = 1/N) breaks the limit for the heavy-tailed draws."""
    gen = np.random.default_rng(seed)
    N, T, lam = int(gen.integers(2, 300)), int(gen.integers(50, 5000)), 10 ** gen.uniform(-7, -2)
    sizes = np.floor(1000 * (1 + gen.pareto(1.2, N)))
    share_max, L, h_min = sizes.max() / sizes.sum(), 10 ** gen.uniform(-2, 1), 10 ** gen.uniform(-3, -1)
    fraction = gen.uniform(0.1, 1.0)
    rho = auto_rho(N, T, lam, share_max, L, h_min=h_min, decay=5.0, fraction=fraction)
    assert stability_number(rho, N, T, lam, share_max,
                            curvature=L) <= fraction * STABILITY_LIMIT * (1 + 1e-12)
    equal_sizes_limit = fraction * STABILITY_LIMIT / stability_number(1.0, N, T, lam, 1.0 / N, curvature=L)
    naive = min(5.0 * (N + 1) * T * 2 * lam / h_min, equal_sizes_limit)
    if share_max > 3.0 / N and naive == equal_sizes_limit:
        assert stability_number(naive, N, T, lam, share_max, curvature=L) > fraction * STABILITY_LIMIT


def test_the_stability_limit_separates_calm_copies_from_oscillating_ones():
    """Noise-free, heavy-tailed sizes: at auto ρ (half the limit) every copy stays near θ*; at four
    times the limit the largest owners' copies overshoot into the box's walls."""
    base = {"data": {"records": {"distribution": "pareto", "alpha": 1.5, "minimum": 500}}}
    calm = execute(whitened(12, 400, "auto", **base))
    limit_rho = calm.step.rho / (calm.step.stability / STABILITY_LIMIT)
    wild = execute(whitened(12, 400, 4 * limit_rho, **base))
    star = np.abs(calm.objective.theta_star).max()
    assert calm.step.stability == pytest.approx(0.5 * STABILITY_LIMIT) or calm.step.stability < 1.0
    assert np.abs(calm.training.learner.theta).max() < 1.5 * star < 1.0
    assert np.abs(wild.training.learner.theta).max() == pytest.approx(1.0)  # θmax: pinned to the box


def test_auto_rho_and_clip_bound_never_read_the_owners_records():
    """Replace every owner's records by others of the same size: ρ and the clip bound stay bit for
    bit; they change with the public twin (another data seed draws another twin)."""
    s = whitened(5, 500, "auto", privacy={"sensitivity": "clip", "clip": "auto"})
    consortium = build_consortium(s)
    step, xi = resolve_step(s, consortium, consortium.sizes), sensitivity(s, consortium)
    other = build_consortium(s.model_copy(update={"data": s.data.model_copy(update={"seed": 99})}))
    swapped = consortium.__class__(consortium.names, other.owners, consortium.z_l1, consortium.y_max)
    assert resolve_step(s, swapped, swapped.sizes) == step
    assert sensitivity(s, swapped) == xi
    moved = s.model_copy(update={"data": s.data.model_copy(update={"seed": 8})})
    assert resolve_step(moved, consortium, consortium.sizes).rho != step.rho
    assert twin_seed(7) != 7 and twin_seed(7) == twin_seed(7)


def test_table_parameters_come_from_the_hold_out_only(tmp_path):
    """A table's ρ and clip bound change when a hold-out row changes, not when an owner's row does."""
    gen = np.random.default_rng(0)
    n = 900
    rows = "\n".join(f"{i},{'AB'[i % 2]},{a:.6f},{b:.6f},{a - b + gen.normal(0, .1):.6f}"
                     for i, (a, b) in enumerate(gen.normal(0, 1, (n, 2))))
    spec = {"target": "y", "numeric": ["a", "b"], "partition": "site", "holdout": 300}

    def run(text: str):
        path = tmp_path / "t.csv"
        path.write_text("row,site,a,b,y\n" + text + "\n")
        s = validate({"name": "t", "data": {"source": "table", "path": str(path), "table": spec},
                      "privacy": {"sensitivity": "clip", "clip": "auto"},
                      "learner": {"iterations": 50}, "output": {"plots": False}}, "test")
        c = build_consortium(s)
        from dpmarket.data import proxy

        proxy._CACHE.clear()
        return resolve_step(s, c, c.sizes).rho, sensitivity(s, c)

    lines = rows.splitlines()
    base = run(rows)
    owner_changed = lines.copy()
    owner_changed[3] = "3,B,9.0,-9.0,4.0"
    holdout_changed = lines.copy()
    holdout_changed[-1] = f"{n - 1},B,3.0,-3.0,2.0"
    assert run("\n".join(owner_changed)) == base
    assert run("\n".join(holdout_changed)) != base


# --- caps and clipping ------------------------------------------------------------------------

def test_capped_split_sizes_each_cap_by_its_clock_rate():
    """Owner 0 ticks four times faster: its cap is the quantile of Binomial(T, 4/7), and it refuses
    almost nothing; caps from Binomial(T, 1/N) (the old bug, a deliberately wrong input) would make
    it refuse most of its queries."""
    s = tiny(privacy={"split": "capped", "cap_quantile": 0.999, "epsilon": 5.0}, learner={"iterations": 600},
             owners=[{"clock_rate": 4.0}])
    result = execute(s)
    caps = [o.answers_allowed for o in result.owners]
    T = 600
    assert caps[0] == stats.binom.ppf(0.999, T, 4 / 6) and caps[1] == stats.binom.ppf(0.999, T, 1 / 6)
    queried = np.bincount(result.training.sequence, minlength=3)
    assert queried[0] <= caps[0] and result.stop_reason == "iterations"
    wrong_cap = stats.binom.ppf(0.999, T, 1 / 3)
    assert queried[0] - wrong_cap > 0.3 * queried[0]  # the old caps would refuse over 30% of them


@pytest.mark.parametrize("seed", range(5))
def test_clipped_gradients_never_exceed_the_bound_in_floating_point(seed):
    """Wild per-record values: every clipped per-example gradient's computed L1 norm ≤ bound; without
    the 1e-12 margin (a deliberately wrong input) rounding ends above the bound for some records."""
    gen = np.random.default_rng(seed)
    Z = gen.standard_normal((20_000, 7)) * 10 ** gen.uniform(-3, 3, (20_000, 1))
    y, theta, bound = gen.standard_normal(20_000) * 1e3, gen.standard_normal(7), 5.0 * gen.uniform(0.5, 2)
    loss = make_loss("squared")
    row_l1 = np.abs(Z).sum(axis=1)
    d = loss.dmargin(Z @ theta, y)
    clipped = clip_margins(d, row_l1, bound)
    assert np.all(np.abs(clipped[:, None] * Z).sum(axis=1) <= bound)
    exact = np.clip(d, -bound / row_l1, bound / row_l1)
    over = np.abs(exact[:, None] * Z).sum(axis=1) > bound
    assert seed > 0 or over.any()  # at least one seed shows the rounding the margin guards against
    data = OwnerData(len(y), None, Z, y)
    np.testing.assert_allclose(loss.clipped_mean_grad(theta, data, bound),
                               (clipped[:, None] * Z).mean(axis=0), rtol=1e-12)


def test_clip_auto_is_a_quantile_of_the_twins_gradient_norms_and_bounds_every_answer():
    s = whitened(4, 200, 3.0, privacy={"sensitivity": "clip", "clip": "auto", "clip_quantile": 0.99,
                                        "epsilon": 1e6})
    consortium = build_consortium(s)
    info = public_info(s, consortium, norms=True)
    xi = sensitivity(s, consortium)
    assert xi == pytest.approx(np.quantile(info.gradient_norms, 0.99, method="higher"))
    assert np.mean(info.gradient_norms > xi) == pytest.approx(0.01, abs=0.002)
    result = execute(s)
    assert result.clipped_share is not None and 0.005 < result.clipped_share < 0.02  # near θ*: ~1%
    owner = build_owners(s, consortium, result.objective)[0]
    assert owner.scale == pytest.approx(2 * xi * 200 / (owner.data.n * 1e6))


def test_the_hinges_support_vectors_count_alike_whatever_the_last_bits_of_their_margins():
    """At the hinge's θ* the support vectors' margins are 1 up to rounding: every machine must count
    them alike (as active), or the clip bound Ξ moves by 10⁻³ between CPUs (fraud_svm). θ* moved by a
    few units in the last place gives the same norms; the old rule (ℓ' = −y where y·u < 1 exactly, the
    wrong input) does not."""
    from dpmarket.api import load
    from dpmarket.data.proxy import gradient_norms

    objective = prepare(load("fraud_svm", overrides=["data.records=500"])).objective
    theta = objective.theta_star
    Z = np.vstack([o.records()[0] for o in objective.owners])
    y = np.concatenate([o.records()[1] for o in objective.owners])
    on_kink = np.abs(y * (Z @ theta) - 1.0) < 1e-9
    assert on_kink.sum() >= 2  # the support vectors: the case this guards
    nudges = [theta * (1.0 + k * np.finfo(float).eps) for k in (-4, -1, 1, 4)]
    assert all(np.array_equal(gradient_norms(objective, theta), gradient_norms(objective, t)) for t in nudges)
    old = [np.abs(objective.loss.dmargin(Z @ t, y)) * np.abs(Z).sum(axis=1) for t in [theta, *nudges]]
    assert any(not np.array_equal(np.sort(old[0]), np.sort(o)) for o in old[1:])


# --- bad input ---------------------------------------------------------------------------------

def test_auto_rho_for_the_hinge_borrows_the_logistic_losss_curvature():
    """The hinge loss has no curvature: "auto" takes the step the logistic loss's curvature gives on
    the same public twin (the same ρ bit for bit), and says so; a hinge scenario that names only its
    data, loss and ε validates."""
    hinge = {"model": {"loss": "hinge"}, "data": {"kind": "card_fraud"}, "privacy": {"preset": "paper"}}
    s = whitened(3, 200, "auto", **hinge)
    logistic = s.model_copy(update={"model": s.model.model_copy(update={"loss": "logistic"})})
    consortium = build_consortium(s)
    step = resolve_step(s, consortium, consortium.sizes)
    assert step.rho == resolve_step(logistic, consortium, consortium.sizes).rho
    assert "the logistic loss's curvature standing in for the hinge's" in step.source
    validate({"name": "svm", "data": {"kind": "card_fraud"}, "model": {"loss": "hinge"}}, "svm.toml")
