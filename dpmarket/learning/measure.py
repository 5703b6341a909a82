"""The measurement: ψ of many models at once, as :meth:`Objective.psi` gives it for each.

ψ(θ) = f(θ)/f(θ*) − 1 is the analyst's oracle, evaluated at the recorded iterations
of every replication after the replay (:mod:`dpmarket.replay.kernel`). Each row's value is computed with
the operations :meth:`Objective.value` uses, in its order, with stacked matrix products (the same
BLAS call per row), so each ψ equals the inline run's. (:meth:`Objective.values` is a faster
vectorised f whose last bits may differ; the figures of own-data models use it.)
"""

from __future__ import annotations

import numpy as np

from dpmarket.learning.objective import Objective

GROUP_VALUES = 1 << 22  # record-by-model products held at once (losses without statistics)


def psis(objective: Objective, thetas: np.ndarray) -> np.ndarray:
    """ψ at each row of ``thetas`` (M, p), each equal to ``objective.psi(row)``."""
    thetas = np.ascontiguousarray(thetas, dtype=float).reshape(-1, objective.p)
    if len(thetas) == 0:
        return np.zeros(0)
    return values(objective, thetas) / objective.f_star - 1.0


def values(objective: Objective, thetas: np.ndarray) -> np.ndarray:
    """f at each row of ``thetas``: λθᵀθ + (Σ_i Σ_{D_i} ℓ)/n, as :meth:`Objective.value`."""
    rows, cols = thetas[:, None, :], thetas[:, :, None]
    norm2 = np.matmul(rows, cols)[:, 0, 0]
    s = objective.pooled
    if s is not None:
        linear = np.matmul(s.b[None, None, :], cols)[:, 0, 0]
        quadratic = np.matmul(np.matmul(rows, s.A), cols)[:, 0, 0]
        data_sum = s.c - 2.0 * linear + quadratic
    else:
        data_sum = 0
        for owner in objective.owners:
            data_sum = data_sum + _loss_sums(objective, owner, thetas)
    return objective.lam * norm2 + data_sum / objective.n


def _loss_sums(objective: Objective, owner, thetas: np.ndarray) -> np.ndarray:
    """Σ over ``owner``'s records of ℓ at each row of ``thetas`` (as ``Loss.total``)."""
    Z, y = owner.records()
    out = np.empty(len(thetas))
    step = max(1, GROUP_VALUES // max(1, len(y)))
    for start in range(0, len(thetas), step):
        part = thetas[start:start + step]
        scores = np.matmul(Z[None], part[:, :, None])[:, :, 0]
        out[start:start + step] = np.sum(objective.loss.values(scores, y), axis=1)
    return out
