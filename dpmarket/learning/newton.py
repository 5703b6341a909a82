"""Exact solves over the box Θ = {‖θ‖∞ ≤ θmax} by projected Newton: θ*, own-data models and the
proxy's θ* of the logistic loss.

f(θ) = λθᵀθ + (1/n) Σ_j ℓ(θᵀz_j; y_j) is strongly convex (σ = 2λ) and p is small (tens to a few
hundred), so its p × p Hessian costs little next to one pass over the records, and Newton's method
converges in a handful of passes where a quasi-Newton method needs hundreds. On the box, Bertsekas's
projected Newton method (SIAM J. Control Optim. 20, 1982): coordinates at a face of the box whose
gradient pushes outward are held there, the others take the Newton step of the reduced Hessian, and
an Armijo search along the projection arc P_Θ(θ + α d) keeps every step a descent step; once the
faces that bind are found it converges quadratically, until the projected gradient is zero or no
longer shrinks in floating point.

(Squared loss has its exact ridge solve; the hinge, not smooth, keeps its smoothing continuation
certified by a duality gap: :mod:`dpmarket.learning.objective`.) Every evaluation here is numpy (the
same bits whatever ``DPMARKET_KERNEL`` says), on one BLAS thread (the caller's
:func:`~dpmarket.learning.objective.one_blas_thread`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

CHUNK = 1 << 16  # records per product in the Hessian (a p × CHUNK temporary, not n × p)
MAX_ITERATIONS = 200
ARMIJO = 1e-4


class Problem:
    """f, ∇f and ∇²f of λθᵀθ + (1/n) Σ ℓ (logistic) over some owners' records (feature-major blocks
    ``ZT`` with their labels)."""

    def __init__(self, loss: str, blocks: list[tuple[np.ndarray, np.ndarray]], lam: float) -> None:
        if loss != "logistic":
            raise ValueError(f"projected Newton solves the logistic loss here, not {loss!r}")
        self.loss, self.blocks, self.lam = loss, blocks, lam
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

    @staticmethod
    def _parts(u: np.ndarray, y: np.ndarray, order: int) -> tuple:
        """ℓ = log(1 + e^t) at t = −y u and (if ``order`` is 2) ℓ' and ℓ'' in u."""
        t = -y * u
        e = np.exp(-np.abs(t))
        values = np.maximum(t, 0.0) + np.log1p(e)
        if order == 0:
            return (values,)
        sigma = np.where(t >= 0.0, 1.0, e) / (1.0 + e)  # σ(t) = 1/(1 + e^−t)
        return values, -y * sigma, y * y * sigma * (1.0 - sigma)


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
        moved = _search(problem, x, f, g, d, free, bound)
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


def _search(problem: Problem, x: np.ndarray, f: float, g: np.ndarray, d: np.ndarray, free: np.ndarray,
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
