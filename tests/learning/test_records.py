"""The record kernels: answers and loss sums that read every record (learning/records.py, compiled.py).

Each kernel must give, for every loss with and without clipping (L1 and L2 limits), what the per-example
formulas give (ℓ' and ℓ of :class:`Loss`, the clipped gradients summed one by one) within 10⁻¹² relative;
numba's and numpy's must agree within 10⁻¹²; a point's answer must be the same bits whether it is asked
alone or with others (the replay's batches); and every clipped per-example gradient must stay within the
bound in floating point. Each comparison is shown to fail on a deliberately wrong input.
"""

from __future__ import annotations

import numpy as np
import pytest

from dpmarket.learning import kernels, records
from dpmarket.learning.objective import OwnerData, make_loss

RELATIVE = 1e-12
BACKENDS = ["numpy", pytest.param("numba", marks=pytest.mark.skipif(not kernels.available(),
                                                                    reason="numba not installed"))]
CASES = [(loss, clip) for loss in ("squared", "logistic", "hinge") for clip in (None, "L1", "L2")]


def owner(loss: str, n: int = 3000, p: int = 7, seed: int = 0) -> OwnerData:
    """Records with features of mixed scales and an intercept, labels ±1 (or real for squared loss),
    built as a consortium builds them (feature-major)."""
    gen = np.random.default_rng(seed)
    X = gen.standard_normal((n, p - 1)) * 10 ** gen.uniform(-1, 1, p - 1)
    y = gen.standard_normal(n) * 3 if loss == "squared" else np.where(gen.random(n) < 0.4, 1.0, -1.0)
    block = np.vstack([X.T, np.ones(n), y])
    return OwnerData.from_block(block, intercept=True, keep_records=True)


def points(p: int, m: int, seed: int = 1, scale: float = 0.5) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((m, p)) * scale


def reference_answer(loss: str, data: OwnerData, theta: np.ndarray, bound: float | None, norm: str | None):
    """(1/n) Σ_j of the per-example gradients ℓ'_j z_j, each clipped to the bound: the definition."""
    fn = make_loss(loss)
    Z, y = data.records()
    d = fn.dmargin(Z @ theta, y)
    if bound is not None:
        limit = data.limits(bound, norm)
        d = np.clip(d, -limit, limit)
    return (d[:, None] * Z).sum(axis=0) / len(y)


def close(a: np.ndarray, b: np.ndarray) -> bool:
    """Within 10⁻¹² relative of the larger answer (a sum of terms of both signs: relative to its size)."""
    return bool(np.all(np.abs(a - b) <= RELATIVE * np.max(np.abs(b), axis=-1, keepdims=True)))


def bound_of(data: OwnerData, loss: str, norm: str | None) -> float | None:
    """A bound that clips about a third of the records at the test's points."""
    if norm is None:
        return None
    typical = np.median(data.row_norms(norm))
    return float(typical * (2.0 if loss == "squared" else 0.3))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("loss, norm", CASES)
def test_answers_are_the_per_example_sum(backend, loss, norm):
    data = owner(loss)
    bound = bound_of(data, loss, norm)
    thetas = points(data.columns.shape[0], 5)
    fn = make_loss(loss)
    with kernels.pinned(backend):
        got = fn.mean_grads(thetas, data, bound, norm or "L1")
    want = np.array([reference_answer(loss, data, t, bound, norm) for t in thetas])
    assert close(got, want)
    if bound is not None:  # the bound really clips here (else the clipped case tests nothing)
        d = np.abs(fn.dmargin(thetas[0] @ data.columns, data.y)) * data.row_norms(norm)
        assert 0.05 < np.mean(d > bound) < 0.95


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("loss", ["squared", "logistic", "hinge"])
def test_loss_sums_are_the_per_example_sum(backend, loss):
    data = owner(loss)
    thetas = points(data.columns.shape[0], 4, scale=3.0)  # large margins: the logistic's tails
    fn = make_loss(loss)
    Z, y = data.records()
    with kernels.pinned(backend):
        got = fn.totals(thetas, data)
    want = np.array([np.sum(fn.values(Z @ t, y)) for t in thetas])
    np.testing.assert_allclose(got, want, rtol=RELATIVE)


@pytest.mark.skipif(not kernels.available(), reason="numba not installed")
@pytest.mark.parametrize("p", [7, 20])  # kernels written out for p = 7, the generic ones beyond 16
@pytest.mark.parametrize("loss, norm", CASES)
def test_numba_agrees_with_numpy(loss, norm, p):
    data = owner(loss, n=5000, p=p, seed=3)  # 5000 records: full tiles and a partial one
    bound = bound_of(data, loss, norm)
    thetas = points(data.columns.shape[0], 6)
    fn = make_loss(loss)
    with kernels.pinned("numpy"):
        ours, sums = fn.mean_grads(thetas, data, bound, norm or "L1"), fn.totals(thetas, data)
    with kernels.pinned("numba"):
        theirs, compiled_sums = fn.mean_grads(thetas, data, bound, norm or "L1"), fn.totals(thetas, data)
    assert close(theirs, ours)
    np.testing.assert_allclose(compiled_sums, sums, rtol=RELATIVE)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("p", [7, 20])
@pytest.mark.parametrize("loss, norm", CASES)
def test_a_point_has_the_same_bits_alone_or_in_a_batch(backend, loss, norm, p):
    """The replay asks an owner for many replications' points at once; each must be its run's answer."""
    data = owner(loss, n=2500, p=p)
    bound = bound_of(data, loss, norm)
    thetas = points(data.columns.shape[0], 7)
    fn = make_loss(loss)
    with kernels.pinned(backend):
        batch = fn.mean_grads(thetas, data, bound, norm or "L1")
        alone = np.array([fn.mean_grads(t[None], data, bound, norm or "L1")[0] for t in thetas])
        reordered = fn.mean_grads(thetas[::-1], data, bound, norm or "L1")[::-1]
        sums = fn.totals(thetas, data)
        sums_alone = np.array([fn.total(t, data) for t in thetas])
    assert np.array_equal(batch, alone) and np.array_equal(reordered, batch)
    assert np.array_equal(sums, sums_alone)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_comparison_fails_on_a_wrong_kernel(backend, monkeypatch):
    """A kernel that forgets the clip, or answers with the hinge's ℓ' for the logistic, is caught."""
    data = owner("logistic")
    bound = bound_of(data, "logistic", "L1")
    thetas = points(data.columns.shape[0], 3)
    fn = make_loss("logistic")
    want = np.array([reference_answer("logistic", data, t, bound, "L1") for t in thetas])
    with kernels.pinned(backend):
        unclipped = fn.mean_grads(thetas, data)
        monkeypatch.setitem(records.LOSS_CODES, "logistic", records.LOSS_CODES["hinge"])
        wrong_loss = fn.mean_grads(thetas, data, bound, "L1") if backend == "numba" else \
            records.gradients("hinge", data.columns, data.y, thetas, data.limits(bound, "L1"))
    assert not close(unclipped, want) and not close(wrong_loss, want)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("norm", ["L1", "L2"])
@pytest.mark.parametrize("seed", range(3))
def test_clipped_answers_keep_every_per_example_gradient_within_the_bound(backend, norm, seed):
    """Wild records (features over six decades): every clipped per-example gradient's computed norm is
    within the bound, and the kernel's answer is their mean; with the limits taken without the 10⁻¹²
    margin (a deliberately wrong input) rounding ends above the bound for some records."""
    gen = np.random.default_rng(seed)
    n, p = 20_000, 7
    X = gen.standard_normal((n, p)) * 10 ** gen.uniform(-3, 3, (n, 1))
    y, theta, bound = gen.standard_normal(n) * 1e3, gen.standard_normal(p), 5.0 * gen.uniform(0.5, 2)
    data = OwnerData.from_block(np.vstack([X.T, np.ones(n), y]), intercept=False, keep_records=True)
    Z = data.records()[0]
    fn = make_loss("squared")
    d = fn.dmargin(Z @ theta, y)
    limit = data.limits(bound, norm)
    per_example = np.clip(d, -limit, limit)[:, None] * Z
    norms = np.abs(per_example).sum(axis=1) if norm == "L1" else np.sqrt((per_example ** 2).sum(axis=1))
    assert np.all(norms <= bound)
    with kernels.pinned(backend):
        answer = fn.clipped_mean_grad(theta, data, bound, norm)
    assert close(answer, per_example.mean(axis=0))
    exact = np.clip(d, -bound / data.row_norms(norm), bound / data.row_norms(norm))[:, None] * Z
    exact_norms = np.abs(exact).sum(axis=1) if norm == "L1" else np.sqrt((exact ** 2).sum(axis=1))
    assert seed > 0 or np.any(exact_norms > bound)


def logistic_derivative_error(form, margins: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """The largest relative error of ``form`` (the numpy kernel's −y/(1 + e^{yu}) in place) against the
    overflow-free −y·(1 or e)/(1 + e), e = e^−|t| at t = −yu (the compiled kernel's form, each step one
    rounding), where that is a normal number, and its largest magnitude elsewhere."""
    t = -y * margins
    e = np.exp(-np.abs(t))
    want = -y * (np.where(t >= 0.0, 1.0, e) / (1.0 + e))
    with np.errstate(all="raise"):
        got = form(margins.copy()[None, :], y)[0]
    normal = np.abs(want) > 2.3e-308
    return (float(np.max(np.abs(got - want)[normal] / np.abs(want[normal]))),
            float(np.max(np.abs(got[~normal]), initial=0.0)))


def test_numpys_logistic_derivative_is_the_stable_one_within_a_few_ulps():
    """numpy's four passes (e^{yu} overflows to inf beyond yu = 709.8, where σ < 10⁻³⁰⁸ becomes 0) agree
    with the overflow-free form within 4 units in the last place (exp's 1 or 2, the sum's and the
    quotient's one each) over margins of ±800, both labels and a label of another size, without a
    warning; the same check fails on a form whose exponent has the wrong sign."""
    u = np.linspace(-800.0, 800.0, 400_001)
    for label in (1.0, -1.0, 0.37):
        y = np.full(u.shape, label)
        relative, beyond = logistic_derivative_error(lambda m, y: records._derivative("logistic", m, y), u, y)
        assert relative <= 4 * 2.2e-16 and beyond <= 2.3e-308
    def wrong(m, y):
        with np.errstate(over="ignore", under="ignore"):
            return -y / (1.0 + np.exp(-y * m))
    assert logistic_derivative_error(wrong, u, np.ones_like(u))[0] > 0.5


@pytest.mark.skipif(not kernels.available(), reason="numba not installed")
def test_compiled_exponential_and_log1p_are_numpys_to_the_last_bits():
    """The logistic's e^−a and log(1 + e) written out for vectorisation: within 2.3·10⁻¹⁶ and 4.5·10⁻¹⁶
    relative of numpy's (one and two units in the last place) over the whole range, subnormal results
    and the underflow to 0 included."""
    from dpmarket.learning import compiled

    a = np.concatenate([np.linspace(0, 50, 200_001), np.linspace(700, 760, 20_001), [1e300, np.inf]])
    out = np.empty_like(a)
    hi, lo = np.empty(len(a), dtype=np.int64), np.empty(len(a), dtype=np.int64)
    compiled._exp_negative(a, out, hi, lo, len(a))
    want = np.exp(-a)
    normal = want > 2.3e-308
    assert np.max(np.abs(out - want)[normal] / want[normal]) <= 2.3e-16
    assert np.max(np.abs(out - want)[~normal]) <= 5e-324 and out[-1] == 0.0 == out[-2]
    e = np.linspace(0, 1, 100_001)
    logs = np.empty_like(e)
    compiled._log1p_unit(e, logs, len(e))
    assert np.max(np.abs(logs - np.log1p(e))[1:] / np.log1p(e)[1:]) <= 4.5e-16 and logs[0] == 0.0


@pytest.mark.skipif(not kernels.available(), reason="numba not installed")
def test_the_scalar_exponential_is_the_array_one_bit_for_bit():
    """The kernels written out for p call e^−x one value at a time, scaled by 2^−k in one rounding
    (llvm.ldexp): the bits of the array function's two exact halves, subnormal results included."""
    from dpmarket.learning import compiled

    a = np.concatenate([np.linspace(0, 50, 20_001), np.linspace(700, 760, 20_001), [1e300, np.inf]])
    out = np.empty_like(a)
    hi, lo = np.empty(len(a), dtype=np.int64), np.empty(len(a), dtype=np.int64)
    compiled._exp_negative(a, out, hi, lo, len(a))
    scalar = np.array([compiled._exp_minus(x) for x in a])
    assert np.array_equal(scalar, out) and np.count_nonzero((scalar > 0) & (scalar < 2.3e-308)) > 1000
    assert not np.array_equal(np.array([compiled._exp_minus(x) for x in a + 1e-9]), out)  # a wrong input


@pytest.mark.skipif(not kernels.available(), reason="numba not installed")
@pytest.mark.parametrize("scale", [0.0, 0.05, 40.0])
def test_logistic_sums_as_the_log_of_a_product_are_the_sum_of_the_terms(scale):
    """The written-out logistic sum takes one logarithm of Π_j (1 + e^−|t_j|) per tile: at θ = 0 every
    factor is 2 (the largest product a tile makes, 2^512), at large margins the factors are 1 + tiny;
    the sum agrees with Σ log(1 + e^t) added exactly (math.fsum) within 10⁻¹⁴ relative, numpy's
    kernel within 10⁻¹² of numba's — and a sum that forgets the product's logarithm is caught."""
    import math

    data = owner("logistic", n=5000, p=5, seed=4)  # p = 5: tiles of 512 records
    theta = points(5, 1, seed=5, scale=scale)
    fn = make_loss("logistic")
    with kernels.pinned("numba"):
        got = fn.totals(theta, data)[0]
    with kernels.pinned("numpy"):
        theirs = fn.totals(theta, data)[0]
    exact = math.fsum(np.logaddexp(0.0, -data.y * (theta[0] @ data.columns)))
    assert abs(got - exact) <= 1e-14 * exact and abs(got - theirs) <= RELATIVE * exact
    linear_only = math.fsum(np.maximum(-data.y * (theta[0] @ data.columns), 0.0))
    assert abs(linear_only - exact) > 1e-6 * exact


class _Watched(dict):
    """A dict that counts the passes over its entries (what a miss of the negation cache must not do)."""

    passes = 0

    def values(self):
        self.passes += 1
        return super().values()

    def items(self):
        self.passes += 1
        return super().items()

    def __iter__(self):
        self.passes += 1
        return super().__iter__()


def test_the_negation_cache_keeps_its_size_as_a_running_total(monkeypatch):
    """A miss of ``_negated`` reads no other entry (it summed every cached array's size: time in
    proportion to the owners cached), and the running total stays the exact Σ len(−y) through misses,
    hits, an id reused by another array, and the clearing at the limit; each −y is right."""
    watched = _Watched()
    monkeypatch.setattr(records, "_NEGATED", watched)
    monkeypatch.setattr(records, "_negated_values", 0, raising=False)
    monkeypatch.setattr(records, "NEGATED_VALUES", 1000)
    arrays = [np.arange(float(k + 1)) for k in range(60)]  # 1 + 2 + … + 60 = 1,830 values: one clearing
    for y in arrays + arrays[-5:]:
        assert np.array_equal(records._negated(y), -y)
    assert watched.passes == 0
    assert records._negated_values == sum(len(v[1]) for v in dict.values(watched)) > 0
    y = arrays[-1]
    impostor = np.zeros(3)
    dict.__setitem__(watched, id(impostor), (y, -y))  # a stale entry under the id the next array takes
    monkeypatch.setattr(records, "_negated_values", records._negated_values + len(y))
    assert np.array_equal(records._negated(impostor), -impostor)
    assert records._negated_values == sum(len(v[1]) for v in dict.values(watched))
