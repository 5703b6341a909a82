"""Exact solves over the box Θ = {‖θ‖∞ ≤ θmax} by projected Newton: θ*, own-data models, the proxy's θ*
of the logistic and hinge losses.

f(θ) = λθᵀθ + (1/n) Σ_j ℓ(θᵀz_j; y_j) is strongly convex (σ = 2λ) and p is small (tens to a few
hundred), so its p × p Hessian is cheap next to one pass over the records, and Newton's method
converges in a handful of passes where a quasi-Newton method needs hundreds. On the box, Bertsekas's
projected Newton method (SIAM J. Control Optim. 20, 1982): coordinates at a face of the box whose
gradient pushes outward are held there, the others take the Newton step of the reduced Hessian, and
an Armijo search along the projection arc P_Θ(θ + α d) keeps every step a descent step; once the
faces that bind are found it converges quadratically, to the rounding of f.

The logistic loss is smooth. The hinge loss is not: it is solved through Huber smoothings of
decreasing width (each a C¹ piecewise quadratic, minimised by the same method, its generalised
Hessian counting the records in the smoothing band), then made exact by :func:`hinge_exact`, which
solves the optimality conditions of the hinge itself on the records the smoothing left on the margin;
:func:`dpmarket.learning.objective.hinge_duality_gap` certifies the result (zero to the rounding of f).

Every evaluation here is numpy (the same bits whatever ``DPMARKET_KERNEL`` says), on one BLAS thread
(the caller's :func:`~dpmarket.learning.objective.one_blas_thread`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

CHUNK = 1 << 16  # records per product in the Hessian (a p × CHUNK temporary, not n × p)
MAX_ITERATIONS = 200
ARMIJO = 1e-4


class Problem:
    """f, ∇f and ∇²f of λθᵀθ + (1/n) Σ ℓ over some owners' records (feature-major blocks ``ZT``)."""

    def __init__(self, loss: str, blocks: list[tuple[np.ndarray, np.ndarray]], lam: float,
                 width: float = 0.0) -> None:
        self.loss, self.blocks, self.lam, self.width = loss, blocks, lam, width
        self.n = sum(len(y) for _, y in blocks)
        self.p = blocks[0][0].shape[0]

    def value(self, theta: np.ndarray) -> float:
        """f(θ)."""
        total = 0.0
        for ZT, y in self.blocks:
            total += float(np.sum(self._parts(theta @ ZT, y, order=0)[0]))
        return self.lam * float(theta @ theta) + total / self.n

    def derivatives(self, theta: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        """(f, ∇f, ∇²f) at θ, in one pass over the records."""
        total, grad, hess = 0.0, np.zeros(self.p), np.zeros((self.p, self.p))
        for ZT, y in self.blocks:
            for start in range(0, len(y), CHUNK):
                Zc, yc = ZT[:, start:start + CHUNK], y[start:start + CHUNK]
                values, first, second = self._parts(theta @ Zc, yc, order=2)
                total += float(np.sum(values))
                grad += Zc @ first
                hess += (Zc * second) @ Zc.T
        n, lam2 = self.n, 2.0 * self.lam
        hess = hess / n
        hess[np.diag_indices(self.p)] += lam2
        return self.lam * float(theta @ theta) + total / n, lam2 * theta + grad / n, hess

    def _parts(self, u: np.ndarray, y: np.ndarray, order: int) -> tuple:
        """ℓ and (if ``order`` is 2) ℓ' and ℓ'' as functions of the score u."""
        if self.loss == "logistic":
            t = -y * u
            e = np.exp(-np.abs(t))
            values = np.maximum(t, 0.0) + np.log1p(e)
            if order == 0:
                return (values,)
            sigma = np.where(t >= 0.0, 1.0, e) / (1.0 + e)  # σ(t) = 1/(1 + e^−t)
            return values, -y * sigma, y * y * sigma * (1.0 - sigma)
        # the hinge max(0, m) of m = 1 − y u, Huber-smoothed over a band of ``width``
        m = 1.0 - y * u
        h = self.width
        slope = np.clip(m / h, 0.0, 1.0)
        values = np.where(m >= h, m - 0.5 * h, 0.5 * m * slope)
        if order == 0:
            return (values,)
        band = (m > 0.0) & (m < h)
        return values, -y * slope, np.where(band, y * y / h, 0.0)


def projected_newton(problem: Problem, bound: float, start: np.ndarray | None = None,
                     on_iteration: Callable[[], object] | None = None) -> np.ndarray:
    """argmin of ``problem`` over {‖θ‖∞ ≤ bound}, from ``start`` (default 0), to the rounding of f."""
    x = np.zeros(problem.p) if start is None else np.clip(start, -bound, bound)
    f, g, H = problem.derivatives(x)
    for _ in range(MAX_ITERATIONS):
        gap = _projected_gradient(x, g, bound)
        if gap == 0.0:
            break
        d, free = _direction(x, g, H, bound, gap)
        moved = _search(problem, x, f, g, d, free=free, bound=bound)
        if moved is not None:
            x = moved
            f, g, H = problem.derivatives(x)
        else:  # f no longer shows the decrease: the full step counts if it shrinks the gradient
            trial = np.clip(x + d, -bound, bound)
            ft, gt, Ht = problem.derivatives(trial)
            if ft > f + 4e-16 * abs(f) or _projected_gradient(trial, gt, bound) > 0.5 * gap:
                break  # x is the optimum to the rounding of f and of its gradient
            x, f, g, H = trial, ft, gt, Ht
        if on_iteration is not None:
            on_iteration()
    return x


def _projected_gradient(x: np.ndarray, g: np.ndarray, bound: float) -> float:
    """max |x − P(x − ∇f)|: zero exactly at the optimum over the box."""
    return float(np.max(np.abs(x - np.clip(x - g, -bound, bound))))


def _direction(x: np.ndarray, g: np.ndarray, H: np.ndarray, bound: float,
               gap: float) -> tuple[np.ndarray, np.ndarray]:
    """Newton's step on the coordinates that are free (not within ``gap`` of a face that the gradient
    pushes against), a diagonally scaled gradient step on the others; and the free mask."""
    near = min(gap, 1e-3 * bound)
    held = ((x <= -bound + near) & (g > 0)) | ((x >= bound - near) & (g < 0))
    free = ~held
    d = np.zeros_like(x)
    if free.any():
        d[free] = -np.linalg.solve(H[np.ix_(free, free)], g[free])
    d[held] = -g[held] / np.diag(H)[held]
    return d, free


def _search(problem: Problem, x: np.ndarray, f: float, g: np.ndarray, d: np.ndarray, *, free: np.ndarray,
            bound: float) -> np.ndarray | None:
    """The first of α = 1, 1/2, 1/4, … whose point P(x + αd) decreases f by Armijo's share of the
    predicted decrease (Bertsekas's rule for the projection arc); None if none does."""
    alpha = 1.0
    while alpha > 1e-12:
        trial = np.clip(x + alpha * d, -bound, bound)
        if np.array_equal(trial, x):
            return None
        predicted = -alpha * float(g[free] @ d[free]) + float(g[~free] @ (x - trial)[~free])
        value = problem.value(trial)
        if f - value >= ARMIJO * predicted and value < f:
            return trial
        alpha *= 0.5
    return None


def solve_hinge(blocks: list[tuple[np.ndarray, np.ndarray]], lam: float, bound: float,
                widths: tuple[float, ...], on_iteration: Callable[[], object] | None = None) -> np.ndarray:
    """The optimum of the hinge problem: exact (:func:`hinge_exact`), else that of its Huber smoothing
    of the last of ``widths`` (within that width of it); either is certified by
    :func:`dpmarket.learning.objective.hinge_duality_gap`.

    Projected Newton solves the widest smoothing; then the width shrinks tenfold at a time. Each
    smoothing is quadratic on a piece (which records lie in its band, inside the margin or past it,
    which coordinates are held at a face), and the records in the band of the last width are the
    candidates for the next: one Newton step on that piece (:func:`_on_piece`) is its optimum if the
    step's point has that partition; if not, projected Newton continues from there. The narrowest
    smoothing's optimum shows which records lie on the hinge's margin, from which its optimality
    conditions give the exact optimum."""
    theta = projected_newton(Problem("hinge", blocks, lam, widths[0]), bound, None, on_iteration)
    previous = widths[0]
    for width in _schedule(widths):
        problem = Problem("hinge", blocks, lam, width)
        stepped = _on_piece(problem, theta, previous, bound)
        theta = stepped if stepped is not None else projected_newton(problem, bound, theta, on_iteration)
        previous = width
        if on_iteration is not None:
            on_iteration()
    exact = hinge_exact(Problem("hinge", blocks, lam, widths[-1]), theta, bound)
    return theta if exact is None else exact


def hinge_exact(problem: Problem, theta: np.ndarray, bound: float) -> np.ndarray | None:
    """The exact optimum of the hinge problem, from the optimum ``theta`` of a smoothing of width
    ``problem.width``; None if the partition it shows does not give it.

    At the optimum of λ‖θ‖² + (1/n) Σ max(0, m_j), m_j = 1 − y_j z_jᵀθ, over the box, the records split
    into those past the margin (m_j < 0: weight 0), inside it (m_j > 0: weight 1/n) and on it (m_j = 0:
    a weight α_j ∈ [0, 1/n]), and coordinates are free or held at a face: 2λθ_F = (1/n) Σ_inside y_j z_jF
    + Σ_on α_j y_j z_jF on the free ones, and y_j z_jᵀθ = 1 on the margin — linear in θ_F and the α_j.
    Taking the records within the smoothing's width of the margin as on it, the solution is the
    optimum if it meets every condition: α in range, every record on its side, the held coordinates'
    gradients pushing outwards (then the KKT conditions of a convex problem hold)."""
    ZT = np.hstack([b[0] for b in problem.blocks])
    y = np.concatenate([b[1] for b in problem.blocks])
    n, lam, width = len(y), problem.lam, problem.width
    m = 1.0 - y * (theta @ ZT)
    on = np.flatnonzero(np.abs(m) <= width)
    inside = m > width
    held = np.abs(theta) >= bound
    F = np.flatnonzero(~held)
    if len(on) > len(F):
        return None  # more margin records than free coordinates: not a partition this solve handles
    Y = ZT[:, on] * y[on]  # columns y_j z_j of the margin records
    c = (ZT[:, inside] @ y[inside]) / n
    fixed = np.where(held, theta, 0.0)
    size = len(F) + len(on)
    A, rhs = np.zeros((size, size)), np.zeros(size)
    A[:len(F), :len(F)] = 2.0 * lam * np.eye(len(F))
    A[:len(F), len(F):] = -Y[F]
    A[len(F):, :len(F)] = Y[F].T
    rhs[:len(F)] = c[F]
    rhs[len(F):] = 1.0 - Y.T @ fixed
    try:
        solution = np.linalg.solve(A, rhs)
    except np.linalg.LinAlgError:
        return None
    exact = fixed.copy()
    exact[F] = solution[:len(F)]
    alpha = solution[len(F):] * n  # in units of 1/n
    m = 1.0 - y * (exact @ ZT)
    past = np.ones(n, dtype=bool)
    past[on] = False
    past &= ~inside
    grad = 2.0 * lam * exact - c - Y @ (alpha / n)  # before the box's multipliers
    tol = 1e-9
    if (np.any(np.abs(exact[F]) >= bound) or np.any(alpha < -tol) or np.any(alpha > 1 + tol)
            or np.any(np.abs(m[on]) > tol) or np.any(m[inside] <= 0.0) or np.any(m[past] >= 0.0)
            or np.any(grad[held] * exact[held] > 0.0)):
        return None
    return exact


def _schedule(widths: tuple[float, ...]) -> list[float]:
    """Widths from the first (excluded) to the last, ten times smaller at each step."""
    out, width = [], widths[0]
    while width > widths[-1] * 1.0001:
        width = max(width / 10.0, widths[-1])
        out.append(width)
    return out


def _on_piece(problem: Problem, theta: np.ndarray, previous: float, bound: float) -> np.ndarray | None:
    """The optimum of the smoothing ``problem`` if it lies on the piece that ``theta`` (the optimum of
    the smoothing of width ``previous``) shows: the records in the band of width ``previous`` in the
    band, the others inside the margin or past it as they are, the coordinates at a face held there.
    f is quadratic on that piece, so one Newton step from ``theta`` reaches its minimum; it is f's
    optimum (f is convex) if its partition is that piece's, else None."""
    ZT = np.hstack([b[0] for b in problem.blocks])
    y = np.concatenate([b[1] for b in problem.blocks])
    n, h, lam2 = len(y), problem.width, 2.0 * problem.lam
    m = 1.0 - y * (theta @ ZT)
    band = (m > 0.0) & (m < previous)
    inside = ~band & (m > 0.0)
    held = np.abs(theta) >= bound
    slope = np.where(band, m / h, np.where(inside, 1.0, 0.0))
    grad = lam2 * theta - (ZT @ (y * slope)) / n
    Zb = ZT[:, band]
    hess = (Zb * (y[band] ** 2 / h)) @ Zb.T / n
    hess[np.diag_indices(problem.p)] += lam2
    F = np.flatnonzero(~held)
    step = theta.copy()
    step[F] -= np.linalg.solve(hess[np.ix_(F, F)], grad[F])
    m = 1.0 - y * (step @ ZT)
    if (np.any(np.abs(step) > bound) or np.any((m[band] <= 0.0) | (m[band] >= h))
            or np.any(m[inside] < h) or np.any(m[~band & ~inside] > 0.0)):
        return None
    grad = lam2 * step - (ZT @ (y * np.clip(m / h, 0.0, 1.0))) / n
    if np.any(grad[held] * np.sign(step[held]) >= 0):  # a held coordinate would rather move inwards
        return None
    return step
