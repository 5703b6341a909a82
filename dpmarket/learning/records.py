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

import numpy as np

from dpmarket.learning import kernels

LOSS_CODES = {"squared": 0, "logistic": 1, "hinge": 2}  # as dpmarket.learning.compiled numbers them
GROUP_VALUES = 1 << 22  # record-by-point values the numpy kernel holds at once (32 MiB)
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
    if kernels.backend() == "numba":
        from dpmarket.learning import compiled  # deferred: imports numba

        out = np.empty_like(thetas)
        clip = limit is not None
        compiled.gradients(ZT, y, limit if clip else _NO_LIMIT, clip, thetas, LOSS_CODES[loss], out)
        return out
    out = np.empty_like(thetas)
    step = max(1, GROUP_VALUES // max(1, len(y)))
    for start in range(0, len(thetas), step):
        margins = _margins(ZT, thetas[start:start + step])
        d = _derivative(loss, margins, y)
        if limit is not None:
            np.maximum(d, -limit, out=d)
            np.minimum(d, limit, out=d)
        out[start:start + step] = np.matmul(ZT, d[:, :, None])[:, :, 0] / len(y)
    return out


def sums(loss: str, ZT: np.ndarray, y: np.ndarray, thetas: np.ndarray) -> np.ndarray:
    """(m,): Σ_j ℓ(θ_qᵀz_j; y_j) for each row θ_q of ``thetas``."""
    thetas = np.ascontiguousarray(thetas, dtype=float)
    if kernels.backend() == "numba":
        from dpmarket.learning import compiled  # deferred: imports numba

        out = np.empty(len(thetas))
        compiled.sums(ZT, y, thetas, LOSS_CODES[loss], out)
        return out
    out = np.empty(len(thetas))
    step = max(1, GROUP_VALUES // max(1, len(y)))
    for start in range(0, len(thetas), step):
        values = _values(loss, _margins(ZT, thetas[start:start + step]), y)
        out[start:start + step] = [row.sum() for row in values]  # each row alone: bits as if asked alone
    return out


_NO_LIMIT = np.zeros(0)


def _margins(ZT: np.ndarray, thetas: np.ndarray) -> np.ndarray:
    """(m, n): θ_qᵀz_j, one matrix-vector product per point (the same BLAS call whatever m)."""
    return np.matmul(thetas[:, None, :], ZT)[:, 0, :]


def _derivative(loss: str, u: np.ndarray, y: np.ndarray) -> np.ndarray:
    """ℓ'(u; y) elementwise, in place of ``u`` where the loss allows (the compiled kernel's formulas)."""
    if loss == "squared":
        np.subtract(y, u, out=u)
        u *= -2.0
        return u
    if loss == "hinge":
        return np.where(y * u < 1.0, -y, 0.0)
    # logistic, y ∈ {−1, 1} or any: −y σ(t) at t = −y u, σ(t) = 1/(1 + e^−t) as (1 or e)/(1 + e), e = e^−|t|
    neg_y = -y
    u *= neg_y
    e = np.abs(u)
    np.negative(e, out=e)
    np.exp(e, out=e)
    top = np.where(u >= 0.0, 1.0, e)
    e += 1.0
    np.divide(top, e, out=top)
    top *= neg_y
    return top


def _values(loss: str, u: np.ndarray, y: np.ndarray) -> np.ndarray:
    """ℓ(u; y) elementwise (the compiled kernel's formulas)."""
    if loss == "squared":
        np.subtract(y, u, out=u)
        return np.square(u, out=u)
    if loss == "hinge":
        v = y * u
        np.subtract(1.0, v, out=v)
        return np.maximum(v, 0.0, out=v)
    # logistic: log(1 + e^t) at t = −y u, as max(t, 0) + log1p(e^−|t|)
    u *= -y
    e = np.abs(u)
    np.negative(e, out=e)
    np.exp(e, out=e)
    np.log1p(e, out=e)
    np.maximum(u, 0.0, out=u)
    u += e
    return u
