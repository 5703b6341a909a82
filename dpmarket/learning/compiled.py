"""The compiled answers and loss sums: one pass over an owner's records per tile (numba, extra ``fast``).

Imported only where :mod:`dpmarket.learning.kernels` chooses numba; it imports numba, which compiles
each kernel at its first call and keeps it in its cache (``cache=True``: beside this file, else the
user's cache directory; ``NUMBA_CACHE_DIR`` overrides), so later processes load it.

The records are held feature-major (``ZT``, p × n, C order): the records of a tile of :data:`TILE` are
read once from memory into cache, and for each query point of the call the kernel computes there the
margins u_j = θᵀz_j (features in order), the loss derivative ℓ'(u_j; y_j), its clip to the record's
limit, and the tile's share of Σ_j ℓ'_j z_j, four features per sweep. Nothing of size n × p is made.

Arithmetic: every operation is IEEE double without contraction or reordering, except the sums over the
records of a tile, which the compiler may split into vector lanes (``fastmath={"reassoc"}``); it does
so the same way for every call, so a query point's answer does not depend on the others in its call
(the replay's batches give each replication the bits of its run alone). The exponential and log1p of
the logistic loss are written out (range reduction and series) so that they vectorise; within
2.3·10⁻¹⁶ and 4.5·10⁻¹⁶ relative of numpy's (tested).
"""

from __future__ import annotations

import numpy as np
from numba import njit

TILE = 1024  # records per tile: 88 KiB of ZT at p = 11, in the core's L2 while the queries sweep it
SQUARED, LOGISTIC, HINGE = 0, 1, 2  # the loss codes (dpmarket.learning.records.LOSS_CODES)

LOG2E = 1.4426950408889634
LN2_HI = 0.6931471803691238  # ln 2 in two parts (fdlibm's): k·LN2_HI is exact for |k| < 2¹¹
LN2_LO = 1.9082149292705877e-10
ROUND = 6755399441055744.0  # 1.5·2⁵²: x + ROUND − ROUND rounds x to the nearest integer (|x| < 2⁵¹)
EXP_CAP = 746.0  # exp(−746) is below half the smallest subnormal: 0 from there on


@njit(cache=True, error_model="numpy", fastmath={"contract"})
def _exp_negative(a, out, hi_bits, lo_bits, w):  # pragma: no cover - compiled
    """out[:w] = exp(−a[:w]) for a ≥ 0: a = k ln 2 + r with |r| ≤ ln 2 / 2, e^−r by a Taylor polynomial
    of degree 13 (error below 10⁻¹⁷), times 2^−k built in two normal halves (exact, and correctly
    rounded where the result is subnormal). ``hi_bits`` and ``lo_bits`` (int64) hold the halves' bits."""
    hi, lo = hi_bits.view(np.float64), lo_bits.view(np.float64)
    for i in range(w):
        x = a[i]
        x = x if x < EXP_CAP else EXP_CAP
        k = (x * LOG2E + ROUND) - ROUND
        r = (k * LN2_HI - x) + k * LN2_LO  # −(x − k ln 2)
        p = 1.0 / 6227020800.0
        p = p * r + 1.0 / 479001600.0
        p = p * r + 1.0 / 39916800.0
        p = p * r + 1.0 / 3628800.0
        p = p * r + 1.0 / 362880.0
        p = p * r + 1.0 / 40320.0
        p = p * r + 1.0 / 5040.0
        p = p * r + 1.0 / 720.0
        p = p * r + 1.0 / 120.0
        p = p * r + 1.0 / 24.0
        p = p * r + 1.0 / 6.0
        p = p * r + 0.5
        p = p * r + 1.0
        p = p * r + 1.0
        ki = np.int64(k)
        half = ki >> 1
        hi_bits[i] = (1023 - half) << 52
        lo_bits[i] = (1023 - (ki - half)) << 52
        out[i] = p
    for i in range(w):
        out[i] = (out[i] * hi[i]) * lo[i]


@njit(cache=True, error_model="numpy", fastmath={"contract"})
def _log1p_unit(e, out, w):  # pragma: no cover - compiled
    """out[:w] = log(1 + e[:w]) for 0 ≤ e ≤ 1: 2 atanh(s) with s = e/(2 + e) ≤ 1/3, its odd series to
    s³⁵ (the next term is below 10⁻¹⁷ of the sum)."""
    for i in range(w):
        s = e[i] / (2.0 + e[i])
        s2 = s * s
        p = 1.0 / 35.0
        p = p * s2 + 1.0 / 33.0
        p = p * s2 + 1.0 / 31.0
        p = p * s2 + 1.0 / 29.0
        p = p * s2 + 1.0 / 27.0
        p = p * s2 + 1.0 / 25.0
        p = p * s2 + 1.0 / 23.0
        p = p * s2 + 1.0 / 21.0
        p = p * s2 + 1.0 / 19.0
        p = p * s2 + 1.0 / 17.0
        p = p * s2 + 1.0 / 15.0
        p = p * s2 + 1.0 / 13.0
        p = p * s2 + 1.0 / 11.0
        p = p * s2 + 1.0 / 9.0
        p = p * s2 + 1.0 / 7.0
        p = p * s2 + 1.0 / 5.0
        p = p * s2 + 1.0 / 3.0
        p = p * s2 + 1.0
        out[i] = 2.0 * (s * p)


@njit(cache=True, error_model="numpy", fastmath={"contract"})
def _margins(ZT, theta, s, w, u):  # pragma: no cover - compiled
    """u[:w] = θᵀz_j for the records s…s+w−1, the features added in order, four per sweep."""
    p = ZT.shape[0]
    z0, t0 = ZT[0, s:s + w], theta[0]
    for j in range(w):
        u[j] = z0[j] * t0
    k = 1
    while k + 4 <= p:
        z1, z2, z3, z4 = ZT[k, s:s + w], ZT[k + 1, s:s + w], ZT[k + 2, s:s + w], ZT[k + 3, s:s + w]
        t1, t2, t3, t4 = theta[k], theta[k + 1], theta[k + 2], theta[k + 3]
        for j in range(w):
            u[j] = u[j] + z1[j] * t1 + z2[j] * t2 + z3[j] * t3 + z4[j] * t4
        k += 4
    while k < p:
        zk, tk = ZT[k, s:s + w], theta[k]
        for j in range(w):
            u[j] = u[j] + zk[j] * tk
        k += 1


@njit(cache=True, error_model="numpy", fastmath={"reassoc", "contract"})
def _dot4(d, z1, z2, z3, z4, w):  # pragma: no cover - compiled
    """Σ_j d_j z_j of four features over a tile (the one reordered sum: vector lanes)."""
    a1 = a2 = a3 = a4 = 0.0
    for j in range(w):
        v = d[j]
        a1 += v * z1[j]
        a2 += v * z2[j]
        a3 += v * z3[j]
        a4 += v * z4[j]
    return a1, a2, a3, a4


@njit(cache=True, error_model="numpy", fastmath={"reassoc", "contract"})
def _dot1(d, z, w):  # pragma: no cover - compiled
    a = 0.0
    for j in range(w):
        a += d[j] * z[j]
    return a


@njit(cache=True, error_model="numpy", fastmath={"reassoc", "contract"})
def _total(v, w):  # pragma: no cover - compiled
    a = 0.0
    for j in range(w):
        a += v[j]
    return a


@njit(cache=True, error_model="numpy", fastmath={"contract"})
def _weighted_sums(ZT, d, s, w, out, q):  # pragma: no cover - compiled
    """out[q, k] += Σ_j d_j z_jk over the tile's records, for every feature k."""
    p = ZT.shape[0]
    k = 0
    while k + 4 <= p:
        a1, a2, a3, a4 = _dot4(d, ZT[k, s:s + w], ZT[k + 1, s:s + w], ZT[k + 2, s:s + w],
                               ZT[k + 3, s:s + w], w)
        out[q, k] += a1
        out[q, k + 1] += a2
        out[q, k + 2] += a3
        out[q, k + 3] += a4
        k += 4
    while k < p:
        out[q, k] += _dot1(d, ZT[k, s:s + w], w)
        k += 1


@njit(cache=True, error_model="numpy", fastmath={"contract"})
def _logistic_parts(y, w, u, a, e, hi_bits, lo_bits):  # pragma: no cover - compiled
    """u[:w] ← t_j = −y_j u_j, a[:w] ← |t_j| and e[:w] ← exp(−|t_j|) (``a`` and ``e`` apart: a loop
    whose input and output overlap is not vectorised)."""
    for j in range(w):
        t = -y[j] * u[j]
        u[j] = t
        a[j] = t if t >= 0.0 else -t
    _exp_negative(a, e, hi_bits, lo_bits, w)


@njit(cache=True, error_model="numpy", fastmath={"contract"})
def gradients(ZT, y, limit, clip, thetas, loss, out):  # pragma: no cover - compiled
    """out[q] = (1/n) Σ_j ℓ'(θ_qᵀz_j; y_j) z_j for each row θ_q of ``thetas``, each ℓ' clipped to
    ±limit_j when ``clip``: the answers of one owner at m query points, tile by tile."""
    p, n = ZT.shape
    m = thetas.shape[0]
    u, a, e = np.empty(TILE), np.empty(TILE), np.empty(TILE)
    hi_bits, lo_bits = np.empty(TILE, dtype=np.int64), np.empty(TILE, dtype=np.int64)
    out[:, :] = 0.0
    for s in range(0, n, TILE):
        w = min(TILE, n - s)
        ys = y[s:s + w]
        for q in range(m):
            _margins(ZT, thetas[q], s, w, u)
            if loss == SQUARED:
                for j in range(w):
                    u[j] = -2.0 * (ys[j] - u[j])
            elif loss == LOGISTIC:
                _logistic_parts(ys, w, u, a, e, hi_bits, lo_bits)
                for j in range(w):
                    top = 1.0 if u[j] >= 0.0 else e[j]
                    u[j] = -ys[j] * (top / (1.0 + e[j]))
            else:
                for j in range(w):
                    u[j] = -ys[j] if ys[j] * u[j] < 1.0 else 0.0
            if clip:
                lim = limit[s:s + w]
                for j in range(w):
                    d = u[j]
                    d = d if d > -lim[j] else -lim[j]
                    u[j] = d if d < lim[j] else lim[j]
            _weighted_sums(ZT, u, s, w, out, q)
    for q in range(m):
        for k in range(p):
            out[q, k] = out[q, k] / n


@njit(cache=True, error_model="numpy", fastmath={"contract"})
def sums(ZT, y, thetas, loss, out):  # pragma: no cover - compiled
    """out[q] = Σ_j ℓ(θ_qᵀz_j; y_j) for each row θ_q of ``thetas`` (f's data term, unnormalised)."""
    n = ZT.shape[1]
    m = thetas.shape[0]
    u, a, e = np.empty(TILE), np.empty(TILE), np.empty(TILE)
    hi_bits, lo_bits = np.empty(TILE, dtype=np.int64), np.empty(TILE, dtype=np.int64)
    out[:] = 0.0
    for s in range(0, n, TILE):
        w = min(TILE, n - s)
        ys = y[s:s + w]
        for q in range(m):
            _margins(ZT, thetas[q], s, w, u)
            if loss == SQUARED:
                for j in range(w):
                    r = ys[j] - u[j]
                    u[j] = r * r
            elif loss == LOGISTIC:
                _logistic_parts(ys, w, u, a, e, hi_bits, lo_bits)
                _log1p_unit(e, a, w)
                for j in range(w):
                    t = u[j]
                    u[j] = (t if t > 0.0 else 0.0) + a[j]
            else:
                for j in range(w):
                    v = 1.0 - ys[j] * u[j]
                    u[j] = v if v > 0.0 else 0.0
            out[q] += _total(u, w)
