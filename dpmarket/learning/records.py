"""Answers and loss sums that read every record: the owners' gradients at many query points at once.

An answer of a margin loss is (1/n) Σ_j ℓ'(θᵀz_j; y_j) z_j, each ℓ'_j clipped to ±limit_j when the owner
clips (limit_j = Ξ(1 − 10⁻¹²)/‖z_j‖, :func:`clip_limits`, so that every clipped per-example gradient
stays within Ξ in floating point); f's data term is Σ_j ℓ(θᵀz_j; y_j). Both read the records
feature-major (``ZT``, p × n: an owner keeps its records so, see :class:`OwnerData`) at m points θ at once.

Two kernels compute them (:mod:`dpmarket.learning.kernels` chooses): numpy — two matrix-vector
products per point (the same BLAS call per point whatever m, so a point's answer does not depend on the
others asked with it) and the loss's elementwise operations on (m, n) blocks; and numba
(:mod:`dpmarket.learning.compiled`) — one sweep over the records per tile, no n × p temporary. They
agree within 10⁻¹² relative (tested), not bit for bit.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import partial

import numpy as np

from dpmarket.learning import kernels

LOSS_CODES = {"squared": 0, "logistic": 1, "hinge": 2}  # as dpmarket.learning.compiled numbers them
GROUP_VALUES = 1 << 20  # record-by-point values the numpy kernel holds at once (8 MiB a buffer)
CLIP_MARGIN = 1e-12  # relative: what clipping gives up so that rounding never ends above the bound


def clip_limits(bound: float, row_norm: np.ndarray) -> np.ndarray:
    """limit_j = bound(1 − 10⁻¹²)/‖z_j‖: |ℓ'_j| ≤ limit_j keeps the rounded norm of the clipped gradient
    (p products and a sum) within ``bound``; a record with z = 0 (or subnormal) has no limit (inf)."""
    with np.errstate(divide="ignore", over="ignore"):
        return (bound * (1.0 - CLIP_MARGIN)) / row_norm


def gradients(loss: str, ZT: np.ndarray, y: np.ndarray, thetas: np.ndarray,
              limit: np.ndarray | None = None) -> np.ndarray:
    """(m, p): row q is (1/n) Σ_j ℓ'(θ_qᵀz_j; y_j) z_j, each ℓ'_j clipped to ±limit_j if ``limit``."""
    thetas = np.ascontiguousarray(thetas, dtype=float)
    out = np.empty_like(thetas)
    if kernels.backend() == "numba":
        clip = limit is not None
        _compiled().gradients(ZT, y, limit if clip else _NO_LIMIT, clip, thetas, LOSS_CODES[loss], out)
        return out
    _numpy_gradients(thetas, out, loss=loss, ZT=ZT, y=y, limit=limit)
    return out


def answerer(loss: str, ZT: np.ndarray, y: np.ndarray,
             limit: np.ndarray | None = None) -> Callable[[np.ndarray, np.ndarray], None]:
    """:func:`gradients` with the owner bound: a function of (thetas, out) — ``thetas`` C-contiguous
    float (m, p), ``out`` float (m, p) — that writes the answers into ``out`` with the kernel of the
    backend in force now (:func:`kernels.backend`). An owner that answers many times binds it once
    (the compiled kernel for its p, loss and clipping, :func:`compiled.gradient_kernel`, the one
    :func:`gradients` calls: the same bits)."""
    if kernels.backend() == "numba":
        kernel = _compiled().gradient_kernel(ZT.shape[0], LOSS_CODES[loss], limit is not None)
        return partial(kernel, ZT, y, _NO_LIMIT if limit is None else limit)
    return partial(_numpy_gradients, loss=loss, ZT=ZT, y=y, limit=limit)


def _numpy_gradients(thetas: np.ndarray, out: np.ndarray, *, loss: str, ZT: np.ndarray, y: np.ndarray,
                     limit: np.ndarray | None) -> None:
    """The numpy kernel of :func:`gradients`, into ``out``."""
    n = len(y)
    step = max(1, GROUP_VALUES // max(1, n))
    for start in range(0, len(thetas), step):
        part = thetas[start:start + step]
        d = _derivative(loss, _margins(ZT, part), y)
        if limit is not None:
            np.maximum(d, _negated(limit), out=d)
            np.minimum(d, limit, out=d)
        out[start:start + step] = np.matmul(ZT, d[:, :, None])[:, :, 0] / n


def sums(loss: str, ZT: np.ndarray, y: np.ndarray, thetas: np.ndarray) -> np.ndarray:
    """(m,): Σ_j ℓ(θ_qᵀz_j; y_j) for each row θ_q of ``thetas``."""
    thetas = np.ascontiguousarray(thetas, dtype=float)
    out = np.empty(len(thetas))
    if kernels.backend() == "numba":
        _compiled().sums(ZT, y, thetas, LOSS_CODES[loss], out)
        return out
    step = max(1, GROUP_VALUES // max(1, len(y)))
    for start in range(0, len(thetas), step):
        values = _values(loss, _margins(ZT, thetas[start:start + step]), y)
        out[start:start + step] = [row.sum() for row in values]  # each row alone: bits as if asked alone
    return out


_NO_LIMIT = np.zeros(0)
_loaded = []  # dpmarket.learning.compiled once imported (an import statement per answer costs a µs)


def _compiled():
    """The compiled kernels' module, imported at its first use (it imports numba)."""
    if not _loaded:
        from dpmarket.learning import compiled

        _loaded.append(compiled)
    return _loaded[0]


_scratch = threading.local()  # per thread: Dask may run tasks in threads


def _buffer(name: str, size: int, dtype=float) -> np.ndarray:
    """A scratch array of ``size`` elements kept per thread and reused: numpy's temporaries from 128 KiB
    up are fresh pages from the system at every call (about 0.3 µs a page), which cost more than the
    arithmetic on them (20,000 records: 0.15 ms of the 0.2 ms a logistic answer took)."""
    pool = getattr(_scratch, "pool", None)
    if pool is None:
        pool = _scratch.pool = {}
    buf = pool.get(name)
    if buf is None or buf.size < size:
        buf = pool[name] = np.empty(size, dtype=dtype)
    return buf[:size]


_NEGATED: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # id(y) → (y, −y) of the owners answering lately
NEGATED_VALUES = 1 << 22  # values kept negated at most (32 MiB), then forgotten together
_negated_values = 0  # Σ len(−y) over _NEGATED: a running total, so that a miss reads no other entry
_negated_lock = threading.Lock()  # misses only (threads of one process share the cache)


def _negated(y: np.ndarray) -> np.ndarray:
    """−y, kept for the labels and clip limits of the owners answering lately (an owner answers many
    times with the same arrays).

    A miss keeps the count of values held as a running total instead of summing every entry's size:
    with thousands of owners answering in turn, that sum made each answer cost time in proportion to
    the owners cached (a quarter of a 10,000-owner run)."""
    found = _NEGATED.get(id(y))
    if found is not None and found[0] is y:
        return found[1]
    global _negated_values
    with _negated_lock:
        stale = _NEGATED.pop(id(y), None)  # another array's, whose id this one reuses
        if stale is not None:
            _negated_values -= len(stale[1])
        if _negated_values + len(y) > NEGATED_VALUES:
            _NEGATED.clear()
            _negated_values = 0
        negated = np.negative(y)
        _NEGATED[id(y)] = (y, negated)
        _negated_values += len(negated)
    return negated


def _margins(ZT: np.ndarray, thetas: np.ndarray) -> np.ndarray:
    """(m, n): θ_qᵀz_j, one matrix-vector product per point (the same BLAS call whatever m)."""
    m, n = len(thetas), ZT.shape[1]
    out = _buffer("margins", m * n).reshape(m, 1, n)
    return np.matmul(thetas[:, None, :], ZT, out=out)[:, 0, :]


def _derivative(loss: str, u: np.ndarray, y: np.ndarray) -> np.ndarray:
    """ℓ'(u; y) elementwise, in place of ``u`` (the compiled kernel's formulas but the logistic one's
    form, which numpy computes in fewer passes)."""
    if loss == "squared":
        np.subtract(y, u, out=u)
        u *= -2.0
        return u
    neg_y = _negated(y)
    if loss == "hinge":  # −y where y u < 1, else 0 (its sign aside: a ±0 term adds nothing)
        mask = _buffer("mask", u.size, bool).reshape(u.shape)
        np.multiply(u, y, out=u)
        np.less(u, 1.0, out=mask)
        return np.multiply(mask, neg_y, out=u)
    # logistic, y ∈ {−1, 1} or any: −y σ(t) at t = −y u as −y/(1 + e^−t), e^−t = e^{y u}: four passes
    # over the records where the compiled kernel's overflow-free (1 or e)/(1 + e), e = e^−|t|, takes
    # nine in numpy. Each step rounds once, so σ is within a few ulps of it wherever σ is a normal
    # number; beyond y u = 709.8, e^{y u} overflows to inf and σ(t) < 10⁻³⁰⁸ becomes 0.
    np.multiply(u, y, out=u)
    with np.errstate(over="ignore", under="ignore"):  # inf, 0 and subnormals are σ's right values there
        np.exp(u, out=u)
        u += 1.0
        return np.divide(neg_y, u, out=u)


def _values(loss: str, u: np.ndarray, y: np.ndarray) -> np.ndarray:
    """ℓ(u; y) elementwise, in place of ``u`` (the compiled kernel's formulas)."""
    if loss == "squared":
        np.subtract(y, u, out=u)
        return np.square(u, out=u)
    if loss == "hinge":
        np.multiply(u, y, out=u)
        np.subtract(1.0, u, out=u)
        return np.maximum(u, 0.0, out=u)
    # logistic: log(1 + e^t) at t = −y u, as max(t, 0) + log1p(e^−|t|)
    u *= _negated(y)
    e = _buffer("exp", u.size).reshape(u.shape)
    np.abs(u, out=e)
    np.negative(e, out=e)
    np.exp(e, out=e)
    np.log1p(e, out=e)
    np.maximum(u, 0.0, out=u)
    u += e
    return u
