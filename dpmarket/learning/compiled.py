"""The compiled answers and loss sums: one pass over an owner's records per tile (numba, extra ``fast``).

Imported only where :mod:`dpmarket.learning.kernels` chooses numba; it imports numba, which compiles
each kernel at its first call and keeps it in its cache (``cache=True``: beside this file, else the
user's cache directory; ``NUMBA_CACHE_DIR`` overrides), so later processes load it.

The records are held feature-major (``ZT``, p × n, C order). For p up to :data:`SPECIALISED` the kernels
are written out for that p (:func:`specialised`: generated from a template, compiled at the first call
of each p, loss and clipping, and cached like the others): each record's margin u_j = θᵀz_j is one
expression of its p features, its loss derivative ℓ'(u_j; y_j) (clipped to its limit) one sweep of the
tile, and Σ_j ℓ'_j z_j one sweep with the p sums held in registers. Wider records take the generic
kernels (:func:`_gradients_any`, :func:`_sums_any`): margins and sums four features per sweep. Either
way a tile of records is read from memory once, and for each query point of the call the kernel
computes there the margins, ℓ' and its clip, and the tile's share of Σ_j ℓ'_j z_j. Nothing of size
n × p is made.

Arithmetic: the margins and sums over the records of a tile may be reordered by the compiler (vector
lanes, ``fastmath={"reassoc", "contract"}``); it does so the same way for every call, so a query point's
answer does not depend on the others in its call (the replay's batches give each replication the bits
of its run alone). The loss derivatives and the exponential are IEEE double without reordering (their
own functions, compiled with contraction only). The exponential of the logistic loss is written out
(range reduction, a Taylor polynomial and a final scaling by 2⁻ᵏ in one correctly rounded step,
``llvm.ldexp``) so that it vectorises, within 2.3·10⁻¹⁶ relative of numpy's (tested). The specialised
logistic loss sums Σ_j log(1 + e_j) as the log of the tile's product Π_j (1 + e_j) (each factor in
(1, 2], so 512 of them cannot overflow): one logarithm per tile instead of a log1p per record, its error
(one rounding per factor, about 10⁻¹⁶ of each term) that of summing the terms.
"""

from __future__ import annotations

import math  # noqa: F401  (the generated logistic sums call math.log)
import threading

import numpy as np
from llvmlite import ir
from llvmlite.binding import llvm_version_info
from numba import njit
from numba.core import types
from numba.extending import intrinsic

TILE = 1024  # records per tile of the generic kernels: 88 KiB of ZT at p = 11, in the core's L2
SQUARED, LOGISTIC, HINGE = 0, 1, 2  # the loss codes (dpmarket.learning.records.LOSS_CODES)
LOSS_NAMES = ("squared", "logistic", "hinge")
SPECIALISED = 16  # records of up to this many features take kernels written out for their p

LOG2E = 1.4426950408889634
LN2_HI = 0.6931471803691238  # ln 2 in two parts (fdlibm's): k·LN2_HI is exact for |k| < 2¹¹
LN2_LO = 1.9082149292705877e-10
ROUND = 6755399441055744.0  # 1.5·2⁵²: x + ROUND − ROUND rounds x to the nearest integer (|x| < 2⁵¹)
EXP_CAP = 746.0  # exp(−746) is below half the smallest subnormal: 0 from there on


@njit(cache=True, error_model="numpy", fastmath={"contract"})
def _exp_reduced(x):  # pragma: no cover - compiled
    """(e^−r, k) with e^−x = e^−r·2^−k for x ≥ 0 (capped at EXP_CAP): x = k ln 2 + r, |r| ≤ ln 2 / 2,
    e^−r by a Taylor polynomial of degree 13 (error below 10⁻¹⁷). The one reduction and polynomial of
    :func:`_exp_negative` and :func:`_exp_minus`, which differ only in how they scale by 2^−k."""
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
    return p, np.int64(k)


@njit(cache=True, error_model="numpy", fastmath={"contract"})
def _exp_negative(a, out, hi_bits, lo_bits, w):  # pragma: no cover - compiled
    """out[:w] = exp(−a[:w]) for a ≥ 0: a = k ln 2 + r with |r| ≤ ln 2 / 2, e^−r by a Taylor polynomial
    of degree 13 (error below 10⁻¹⁷), times 2^−k built in two normal halves (exact, and correctly
    rounded where the result is subnormal). ``hi_bits`` and ``lo_bits`` (int64) hold the halves' bits."""
    hi, lo = hi_bits.view(np.float64), lo_bits.view(np.float64)
    for i in range(w):
        p, ki = _exp_reduced(a[i])
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
def _gradients_any(ZT, y, limit, clip, thetas, loss, out):  # pragma: no cover - compiled
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
def _sums_any(ZT, y, thetas, loss, out):  # pragma: no cover - compiled
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


@njit(cache=True, error_model="numpy")
def async_update(theta_bar, answer, weight, consts, block):  # pragma: no cover - compiled
    """Step 7 of Algorithm 1 into ``block`` (rows: θ_i's new value, θ_L's), with
    ``consts`` = (2λ, 2N, a_i, a_L, θmax): per coordinate the operations of
    :meth:`AsyncLearner.update`'s ufuncs in their order, IEEE double without fastmath (no
    reordering, no fused multiply-add), and the projection's maximum and minimum as numpy's (NaN
    kept): the same bits."""
    two_lam, two_n, step_owner, step_central, bound = consts[0], consts[1], consts[2], consts[3], consts[4]
    for k in range(theta_bar.shape[0]):
        grad_g = two_lam * theta_bar[k]
        own = grad_g / two_n + weight * answer[k]
        own = theta_bar[k] - step_owner * own
        central = theta_bar[k] - step_central * grad_g
        if own < -bound:
            own = -bound
        if own > bound:
            own = bound
        if central < -bound:
            central = -bound
        if central > bound:
            central = bound
        block[0, k] = own
        block[1, k] = central


# --- kernels written out for p features --------------------------------------------------------------

LDEXP = llvm_version_info >= (17,)  # llvm.ldexp exists from LLVM 17 (llvmlite 0.42 has LLVM 14)


@intrinsic
def _ldexp(typingctx, x, k):  # pragma: no cover - compiled
    """x · 2ᵏ rounded once (``llvm.ldexp``: AVX-512's vscalefpd where vectorised), exact for |k| < 2³¹."""
    signature = types.float64(types.float64, types.int64)

    def codegen(context, builder, sig, args):
        double, i32 = ir.DoubleType(), ir.IntType(32)
        fn = builder.module.globals.get("llvm.ldexp.f64.i32") or ir.Function(
            builder.module, ir.FunctionType(double, [double, i32]), "llvm.ldexp.f64.i32")
        return builder.call(fn, [args[0], builder.trunc(args[1], i32)])

    return signature, codegen


@intrinsic
def _as_double(typingctx, bits):  # pragma: no cover - compiled
    """The double whose IEEE bits are ``bits`` (int64)."""
    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.DoubleType())

    return types.float64(types.int64), codegen


@njit(cache=True, error_model="numpy", fastmath={"contract"})
def _scaled_down(x, k):  # pragma: no cover - compiled
    """x · 2^−k for 0 ≤ k ≤ 1077, rounded once: llvm.ldexp where LLVM has it, else the product by
    2^−k's two normal halves (the first exact, the second the one rounding)."""
    if LDEXP:
        return _ldexp(x, -k)
    half = k >> 1
    return (x * _as_double((1023 - half) << 52)) * _as_double((1023 - (k - half)) << 52)


@njit(cache=True, error_model="numpy", fastmath={"contract"})
def _exp_minus(x):  # pragma: no cover - compiled
    """e^−x for x ≥ 0, one value: :func:`_exp_negative`'s reduction and polynomial, scaled by 2^−k in
    one rounding (:func:`_scaled_down`: the same bits, its two exact halves round once too)."""
    p, k = _exp_reduced(x)
    return _scaled_down(p, k)


@njit(cache=True, error_model="numpy", fastmath={"contract"})
def _squared_derivative(u, y):  # pragma: no cover - compiled
    return -2.0 * (y - u)


@njit(cache=True, error_model="numpy", fastmath={"contract"})
def _logistic_derivative(u, y):  # pragma: no cover - compiled
    """−y σ(t) at t = −y u, σ(t) = (1 or e)/(1 + e) with e = e^−|t| (no overflow)."""
    t = -y * u
    e = _exp_minus(t if t >= 0.0 else -t)
    top = 1.0 if t >= 0.0 else e
    return -y * (top / (1.0 + e))


@njit(cache=True, error_model="numpy", fastmath={"contract"})
def _hinge_derivative(u, y):  # pragma: no cover - compiled
    return -y if y * u < 1.0 else 0.0


@njit(cache=True, error_model="numpy", fastmath={"contract"})
def _clipped(d, limit):  # pragma: no cover - compiled
    d = d if d > -limit else -limit
    return d if d < limit else limit


@njit(cache=True, error_model="numpy", fastmath={"contract"})
def _squared_value(u, y):  # pragma: no cover - compiled
    r = y - u
    return r * r


@njit(cache=True, error_model="numpy", fastmath={"contract"})
def _hinge_value(u, y):  # pragma: no cover - compiled
    v = 1.0 - y * u
    return v if v > 0.0 else 0.0


@njit(cache=True, error_model="numpy", fastmath={"contract"})
def _logistic_linear(u, y):  # pragma: no cover - compiled
    """max(t, 0) at t = −y u: log(1 + e^t) = max(t, 0) + log(1 + e^−|t|)."""
    t = -y * u
    return t if t > 0.0 else 0.0


@njit(cache=True, error_model="numpy", fastmath={"contract"})
def _logistic_factor(u, y):  # pragma: no cover - compiled
    """1 + e^−|t| at t = −y u, in (1, 2]: the factor whose logarithm is the rest of log(1 + e^t)."""
    t = -y * u
    return 1.0 + _exp_minus(t if t >= 0.0 else -t)


_GRADIENT = '''
def {name}(ZT, y, limit, thetas, out):
    n = ZT.shape[1]
    m = thetas.shape[0]
    d = np.empty({tile})
    out[:, :] = 0.0
    for s in range(0, n, {tile}):
        w = min({tile}, n - s)
{rows}
        ys = y[s:s + w]
        lim = limit[s:s + w] if {clip} else ys
        for q in range(m):
{thetas}
{zeros}
{sweeps}
{store}
    for q in range(m):
        for k in range({p}):
            out[q, k] = out[q, k] / n
'''

_SUM = '''
def {name}(ZT, y, thetas, out):
    n = ZT.shape[1]
    m = thetas.shape[0]
    u = np.empty({tile})
    out[:] = 0.0
    for s in range(0, n, {tile}):
        w = min({tile}, n - s)
{rows}
        ys = y[s:s + w]
        for q in range(m):
{thetas}
            for j in range(w):
                u[j] = {margin}
            total = 0.0
{product}
            for j in range(w):
                total += {term}
{factor}
            out[q] += {result}
'''

_VALUES = {SQUARED: "_squared_value(u[j], ys[j])", HINGE: "_hinge_value(u[j], ys[j])",
           LOGISTIC: "_logistic_linear(u[j], ys[j])"}
_DERIVATIVES = {SQUARED: "_squared_derivative", LOGISTIC: "_logistic_derivative", HINGE: "_hinge_derivative"}


def tile_of(p: int) -> int:
    """Records per tile of the kernels written out for p features: the tile's p × tile doubles stay in
    the core's first-level cache (48 KiB) while the query points of a call sweep it, and no more than
    512 logistic factors (each ≤ 2) are multiplied before their logarithm is taken."""
    return 512 if p <= 8 else 256


def _margin(p: int) -> str:
    """θᵀz_j as one expression: products added pairwise (short dependency chains)."""
    terms = [f"z{k}[j] * t{k}" for k in range(p)]
    while len(terms) > 1:
        terms = [f"({terms[i]} + {terms[i + 1]})" if i + 1 < len(terms) else terms[i]
                 for i in range(0, len(terms), 2)]
    return terms[0]


def source(kind: str, name: str, p: int, loss: int, clip: bool) -> str:
    """The Python source of a kernel written out for p features (``kind``: "gradient" or "sum")."""
    def lines(text: str, indent: int) -> str:
        return "\n".join(" " * indent + text.format(k=k) for k in range(p))

    common = dict(name=name, p=p, tile=tile_of(p), margin=_margin(p),
                  rows=lines("z{k} = ZT[{k}, s:s + w]", 8), thetas=lines("t{k} = thetas[q, {k}]", 12))
    if kind == "sum":
        logistic = loss == LOGISTIC
        return _SUM.format(term=_VALUES[loss], product=" " * 12 + "product = 1.0" if logistic else "",
                           factor=" " * 16 + "product *= _logistic_factor(u[j], ys[j])" if logistic else "",
                           result="total + math.log(product)" if logistic else "total", **common)
    return _GRADIENT.format(clip=clip, zeros=lines("a{k} = 0.0", 12), sweeps=_sweeps(p, loss, clip),
                            store=lines("out[q, {k}] += a{k}", 12), **common)


def _sweeps(p: int, loss: int, clip: bool) -> str:
    """The loops over a tile's records for one query point: one sweep (margin, ℓ', its clip and the p
    sums) where ℓ' is a few operations; three for the logistic loss (margins, then ℓ' — the exponential
    and a division, long dependency chains that vectorise best alone — then the sums)."""
    margin = _margin(p)
    accumulate = "\n".join(f"                a{k} += v * z{k}[j]" for k in range(p))
    derivative = f"{_DERIVATIVES[loss]}({{u}}, ys[j])"
    if clip:
        derivative = f"_clipped({derivative}, lim[j])"
    if loss != LOGISTIC:
        return (f"            for j in range(w):\n"
                f"                v = {derivative.format(u=margin)}\n{accumulate}")
    return (f"            for j in range(w):\n                d[j] = {margin}\n"
            f"            for j in range(w):\n                d[j] = {derivative.format(u='d[j]')}\n"
            f"            for j in range(w):\n                v = d[j]\n{accumulate}")


_made: dict[tuple, object] = {}
_making = threading.Lock()


def specialised(kind: str, p: int, loss: int, clip: bool = False):
    """The compiled kernel written out for p features (``kind`` "gradient": (ZT, y, limit, thetas, out);
    "sum": (ZT, y, thetas, out)), made at its first use in the process. Its source is compiled as part
    of this file (numba's cache finds it there, keyed by name and this file's stamp)."""
    key = (kind, p, loss, clip)
    kernel = _made.get(key)
    if kernel is None:
        with _making:
            kernel = _made.get(key)
            if kernel is None:
                name = f"_{kind}_{p}_{LOSS_NAMES[loss]}{'_clipped' if clip else ''}"
                exec(compile(source(kind, name, p, loss, clip), __file__, "exec"), globals())
                kernel = _made[key] = njit(cache=True, error_model="numpy",
                                           fastmath={"reassoc", "contract"})(globals()[name])
    return kernel


def gradients(ZT, y, limit, clip, thetas, loss, out) -> None:
    """out[q] = (1/n) Σ_j ℓ'(θ_qᵀz_j; y_j) z_j for each row θ_q of ``thetas``, each ℓ' clipped to
    ±limit_j when ``clip``: the answers of one owner at m query points."""
    gradient_kernel(ZT.shape[0], loss, bool(clip))(ZT, y, limit, thetas, out)


def gradient_kernel(p: int, loss: int, clip: bool):
    """The compiled answer kernel of p features, ``loss`` (a code) and clipping, called as
    (ZT, y, limit, thetas, out): the one :func:`gradients` calls (an owner binds it once)."""
    if p <= SPECIALISED:
        return specialised("gradient", p, loss, clip)

    def kernel(ZT, y, limit, thetas, out) -> None:
        _gradients_any(ZT, y, limit, clip, thetas, loss, out)

    return kernel


def sums(ZT, y, thetas, loss, out) -> None:
    """out[q] = Σ_j ℓ(θ_qᵀz_j; y_j) for each row θ_q of ``thetas`` (f's data term, unnormalised)."""
    p = ZT.shape[0]
    if p <= SPECIALISED:
        specialised("sum", p, loss)(ZT, y, thetas, out)
    else:
        _sums_any(ZT, y, thetas, loss, out)
