"""Losses, per-owner data views, the fitness f, its optimum θ* over Θ, and the relative fitness ψ.

Notation follows the docs' mathematics: ``f(θ) = λ θᵀθ + (1/n) Σ_i Σ_{D_i} ℓ(θ; z, y)`` over the box
``Θ = {‖θ‖∞ ≤ θmax}``, where ``z`` is the design vector (the features, with a trailing 1 when
the model has an intercept). ``σ = 2λ`` is the strong-convexity constant of the regulariser.

Squared loss is served from per-owner sufficient statistics (``ZᵀZ``, ``Zᵀy``, ``yᵀy``), so a
gradient query or an evaluation of f costs O(p²) whatever the owners' sizes. Logistic and hinge
losses keep the records and cost O(n_i p) per query.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import numpy as np

LOSSES = ("squared", "logistic", "hinge")


@dataclass(frozen=True)
class SquaredStats:
    """Sufficient statistics of one owner for squared loss: ``A = ZᵀZ``, ``b = Zᵀy``, ``c = yᵀy``."""

    A: np.ndarray
    b: np.ndarray
    c: float

    @classmethod
    def of(cls, Z: np.ndarray, y: np.ndarray) -> SquaredStats:
        """Statistics of the records ``(Z, y)``."""
        return cls(Z.T @ Z, Z.T @ y, float(y @ y))

    @classmethod
    def of_block(cls, block: np.ndarray, intercept: bool) -> SquaredStats:
        """Statistics of a record block (rows: p features, ones, labels) in one product."""
        gram = block @ block.T
        cols = slice(0, block.shape[0] - 1) if intercept else slice(0, block.shape[0] - 2)
        return cls(gram[cols, cols].copy(), gram[cols, -1].copy(), float(gram[-1, -1]))

    def __add__(self, other: SquaredStats) -> SquaredStats:
        return SquaredStats(self.A + other.A, self.b + other.b, self.c + other.c)


@dataclass(frozen=True)
class OwnerData:
    """One owner's records as the learner may never see them: design matrix, labels, statistics.

    ``Z`` and ``y`` may be ``None`` for squared loss when only the statistics were kept (the
    records of large owners are summarised and dropped to keep memory flat).
    """

    n: int
    stats: SquaredStats | None = None
    Z: np.ndarray | None = None
    y: np.ndarray | None = None

    @classmethod
    def from_block(cls, block: np.ndarray, intercept: bool, keep_records: bool) -> OwnerData:
        """An owner from its record block (rows: p features, ones, labels).

        Records are needed by losses other than squared and by per-example clipping; squared
        loss with bounds-derived sensitivity lives on the statistics alone (memory stays flat).
        """
        stats = SquaredStats.of_block(block, intercept)
        n = block.shape[1]
        if not keep_records:
            return cls(n, stats)
        rows = block.shape[0] - 1 if intercept else block.shape[0] - 2
        return cls(n, stats, np.ascontiguousarray(block[:rows].T), block[-1].copy())

    def records(self) -> tuple[np.ndarray, np.ndarray]:
        """The raw records; an error if they were summarised away."""
        if self.Z is None or self.y is None:
            raise ValueError("records were not kept for this owner (only sufficient statistics)")
        return self.Z, self.y

    @cached_property
    def row_l1(self) -> np.ndarray:
        """‖z_j‖₁ of every record: a margin loss's per-example gradient has L1 norm |ℓ'|·‖z_j‖₁."""
        return np.abs(self.records()[0]).sum(axis=1)

    @cached_property
    def row_l2(self) -> np.ndarray:
        """‖z_j‖₂ of every record (its per-example gradient's L2 norm is |ℓ'|·‖z_j‖₂)."""
        Z = self.records()[0]
        return np.sqrt(np.einsum("ij,ij->i", Z, Z))

    def row_norms(self, norm: str) -> np.ndarray:
        """‖z_j‖ of every record in ``norm`` ("L1" or "L2")."""
        return self.row_l1 if norm == "L1" else self.row_l2


class Loss(ABC):
    """Interface of a per-example loss ℓ(θ; z, y) with its (sub)gradient and sensitivity bound."""

    name: str = ""

    def total(self, theta: np.ndarray, data: OwnerData) -> float:
        """Σ over the owner's records of ℓ(θ; z, y)."""
        Z, y = data.records()
        return float(np.sum(self.values(Z @ theta, y)))

    def mean_grad(self, theta: np.ndarray, data: OwnerData) -> np.ndarray:
        """(1/n_i) Σ ∇ℓ(θ; z, y): the owner's exact answer to a gradient query."""
        Z, y = data.records()
        return Z.T @ self.dmargin(Z @ theta, y) / data.n

    def clipped_mean_grad(self, theta: np.ndarray, data: OwnerData, bound: float,
                          norm: str = "L1") -> np.ndarray:
        """(1/n_i) Σ of the per-example gradients ℓ'(θᵀz_j)·z_j, each clipped to ``norm`` ≤ ``bound``
        (L1 for Laplace answers, L2 for Gaussian ones).

        Every loss here is a function of the margin, so clipping scales the scalar ℓ' of each
        record and the answer is one pass over the records, not an (n, p) gradient matrix.
        """
        Z, y = data.records()
        d = clip_margins(self.dmargin(Z @ theta, y), data.row_norms(norm), bound)
        return Z.T @ d / data.n

    def clipped_count(self, theta: np.ndarray, data: OwnerData, bound: float, norm: str = "L1") -> int:
        """How many of the owner's per-example gradients at θ exceed ``norm`` ``bound``."""
        Z, y = data.records()
        return int(np.sum(np.abs(self.dmargin(Z @ theta, y)) * data.row_norms(norm) > bound))

    def per_example_grads(self, theta: np.ndarray, Z: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Rows ∇ℓ(θ; z_j, y_j), shape (n, p)."""
        return self.dmargin(Z @ theta, y)[:, None] * Z

    @abstractmethod
    def values(self, u: np.ndarray, y: np.ndarray) -> np.ndarray:
        """ℓ as a function of the score ``u = θᵀz``."""

    @abstractmethod
    def dmargin(self, u: np.ndarray, y: np.ndarray) -> np.ndarray:
        """dℓ/du (a subgradient where ℓ is not differentiable)."""

    @abstractmethod
    def l1_sensitivity(self, z_l1: float, y_max: float, theta_max: float) -> float:
        """Ξ ≥ sup ‖∇ℓ(θ; z, y)‖₁ over ‖θ‖∞ ≤ θmax, ‖z‖₁ ≤ z_l1, |y| ≤ y_max (Theorem 1)."""


class SquaredLoss(Loss):
    """ℓ = (y − θᵀz)²; answers and f come from sufficient statistics in O(p²)."""

    name = "squared"

    def total(self, theta: np.ndarray, data: OwnerData) -> float:
        s = data.stats
        return float(s.c - 2.0 * s.b @ theta + theta @ s.A @ theta)

    def mean_grad(self, theta: np.ndarray, data: OwnerData) -> np.ndarray:
        s = data.stats
        return (2.0 / data.n) * (s.A @ theta - s.b)

    def values(self, u: np.ndarray, y: np.ndarray) -> np.ndarray:
        return (y - u) ** 2

    def dmargin(self, u: np.ndarray, y: np.ndarray) -> np.ndarray:
        return -2.0 * (y - u)

    def l1_sensitivity(self, z_l1: float, y_max: float, theta_max: float) -> float:
        # |y − θᵀz| ≤ Y + ‖θ‖∞‖z‖₁ and ‖∇‖₁ = 2|y − θᵀz|·‖z‖₁.
        return 2.0 * (y_max + theta_max * z_l1) * z_l1


class LogisticLoss(Loss):
    """ℓ = log(1 + exp(−y θᵀz)) with labels y ∈ {−1, +1}."""

    name = "logistic"

    def values(self, u: np.ndarray, y: np.ndarray) -> np.ndarray:
        return np.logaddexp(0.0, -y * u)

    def dmargin(self, u: np.ndarray, y: np.ndarray) -> np.ndarray:
        return -y * _expit(-y * u)

    def l1_sensitivity(self, z_l1: float, y_max: float, theta_max: float) -> float:
        return z_l1  # |dℓ/du| < 1 for labels ±1


class HingeLoss(Loss):
    """ℓ = max(0, 1 − y θᵀz) (linear SVM), labels y ∈ {−1, +1}; subgradient 0 at the kink."""

    name = "hinge"

    def values(self, u: np.ndarray, y: np.ndarray) -> np.ndarray:
        return np.maximum(0.0, 1.0 - y * u)

    def dmargin(self, u: np.ndarray, y: np.ndarray) -> np.ndarray:
        return np.where(y * u < 1.0, -y, 0.0)

    def l1_sensitivity(self, z_l1: float, y_max: float, theta_max: float) -> float:
        return z_l1


CLIP_MARGIN = 1e-12  # relative: what clipping gives up so that rounding never ends above the bound


def clip_margins(d: np.ndarray, row_norm: np.ndarray, bound: float) -> np.ndarray:
    """Scale each ℓ'_j so that |ℓ'_j|·‖z_j‖ ≤ bound (L1 or L2 row norms), with a 10⁻¹² margin so that
    the rounded norm of the clipped gradient (p products and a sum) never exceeds ``bound``."""
    with np.errstate(divide="ignore", over="ignore"):
        limit = (bound * (1.0 - CLIP_MARGIN)) / row_norm  # z = 0, or subnormal: no limit (inf)
    return np.clip(d, -limit, limit)


def _expit(x: np.ndarray) -> np.ndarray:
    """The logistic function 1/(1 + e^−x), without overflow for large |x|."""
    return np.exp(-np.logaddexp(0.0, -x))


def make_loss(name: str) -> Loss:
    """The loss called ``name`` (one of LOSSES)."""
    table = {"squared": SquaredLoss, "logistic": LogisticLoss, "hinge": HingeLoss}
    if name not in table:
        raise ValueError(f"Unknown loss {name!r}; expected one of {', '.join(LOSSES)}")
    return table[name]()


class Objective:
    """The fitness f over a set of owners, with θ*, ψ and own-data baselines."""

    def __init__(self, loss: Loss, owners: list[OwnerData], lam: float, theta_max: float) -> None:
        if lam <= 0:
            raise ValueError(f"Regularisation must be positive for strong convexity, got {lam}")
        self.loss, self.owners, self.lam, self.theta_max = loss, owners, float(lam), theta_max
        self.sizes = np.array([o.n for o in owners], dtype=np.int64)
        self.n = int(self.sizes.sum())
        self.p = int(owners[0].stats.A.shape[0]) if owners[0].stats else owners[0].Z.shape[1]
        self._total = _pooled_stats(owners) if loss.name == "squared" else None
        self._theta_star: np.ndarray | None = None  # solved on first use (see optimum)

    @property
    def pooled(self) -> SquaredStats | None:
        """Everyone's sufficient statistics summed (squared loss), which f is evaluated from; else None."""
        return self._total

    @property
    def sigma(self) -> float:
        """Strong-convexity constant of g(θ) = λθᵀθ."""
        return 2.0 * self.lam

    def value(self, theta: np.ndarray, owners: list[int] | None = None) -> float:
        """f(θ), or the objective restricted to the records of ``owners`` (normalised by their n)."""
        idx = range(len(self.owners)) if owners is None else owners
        if self._total is not None and owners is None:
            data_sum = self.loss.total(theta, OwnerData(self.n, self._total))
        else:
            data_sum = sum(self.loss.total(theta, self.owners[i]) for i in idx)
        n = self.n if owners is None else int(self.sizes[list(idx)].sum())
        return self.lam * float(theta @ theta) + data_sum / n

    def values(self, thetas: np.ndarray) -> np.ndarray:
        """f at each row of ``thetas`` (R, p); vectorised for squared loss."""
        thetas = np.atleast_2d(thetas)
        if self._total is None:
            return np.array([self.value(t) for t in thetas])
        s = self._total
        quad = np.einsum("rp,pq,rq->r", thetas, s.A, thetas)
        data = (s.c - 2.0 * thetas @ s.b + quad) / self.n
        return self.lam * np.einsum("rp,rp->r", thetas, thetas) + data

    def gradient(self, theta: np.ndarray, owners: list[int] | None = None) -> np.ndarray:
        """∇f(θ) (or of the restricted objective), used by the optimisers."""
        idx = list(range(len(self.owners))) if owners is None else owners
        n = int(self.sizes[idx].sum())
        data = sum(self.owners[i].n * self.loss.mean_grad(theta, self.owners[i]) for i in idx)
        return 2.0 * self.lam * theta + data / n

    def minimize(self, owners: list[int] | None = None,
                 on_iteration: Callable[[], object] | None = None) -> np.ndarray:
        """argmin over Θ of f (or of the objective restricted to ``owners``), non-private.

        ``on_iteration`` is called after each iteration of an iterative solver (progress only;
        the exact ridge solve has none).
        """
        if self.loss.name == "squared":
            return _ridge_box(self, owners)
        with one_blas_thread():
            if self.loss.name == "hinge":
                return _hinge_box(self, owners, on_iteration)
            return _smooth_box(self, owners, on_iteration=on_iteration)

    def optimum(self, on_iteration: Callable[[], object] | None = None) -> np.ndarray:
        """θ*, solved on the first call (``on_iteration`` as in :meth:`minimize`) and kept."""
        if self._theta_star is None:
            self._theta_star = self.minimize(on_iteration=on_iteration)
        return self._theta_star

    @property
    def theta_star(self) -> np.ndarray:
        """The non-private optimum θ* over Θ."""
        return self.optimum()

    @cached_property
    def f_star(self) -> float:
        """f(θ*)."""
        return self.value(self.theta_star)

    def psi(self, theta: np.ndarray) -> float:
        """Relative fitness ψ(θ) = f(θ)/f(θ*) − 1 (an oracle measurement, never in the protocol)."""
        return self.value(theta) / self.f_star - 1.0

    def psis(self, thetas: np.ndarray) -> np.ndarray:
        """ψ at each row of ``thetas``."""
        return self.values(thetas) / self.f_star - 1.0

    def own_data_models(self, on_model: Callable[[], object] | None = None) -> np.ndarray:
        """θ_i*: each owner's non-private model trained on its own records alone, shape (N, p).

        ``on_model`` is called after each owner's model (progress only).
        """
        models = []
        for i in range(len(self.owners)):
            models.append(self.minimize([i]))
            if on_model is not None:
                on_model()
        return np.array(models)


def _pooled_stats(owners: list[OwnerData]) -> SquaredStats:
    total = owners[0].stats
    for o in owners[1:]:
        total = total + o.stats
    return total


def _pooled(obj: Objective, owners: list[int] | None) -> tuple[SquaredStats, int]:
    idx = list(range(len(obj.owners))) if owners is None else owners
    return _pooled_stats([obj.owners[i] for i in idx]), int(obj.sizes[idx].sum())


def _ridge_box(obj: Objective, owners: list[int] | None) -> np.ndarray:
    """Exact ridge optimum over the box: a bounded least-squares problem solved by BVLS.

    n·f(θ) = ‖y − Zθ‖² + nλ‖θ‖² = θᵀ(A + nλI)θ − 2bᵀθ + c. With the Cholesky factor
    ``A + nλI = RᵀR`` this is ‖Rθ − R⁻ᵀb‖² + const, and BVLS (an active-set method with finite
    termination) returns the exact box-constrained minimiser.
    """
    s, n = _pooled(obj, owners)
    H = s.A + n * obj.lam * np.eye(obj.p)
    free = np.linalg.solve(H, s.b)
    if np.max(np.abs(free)) <= obj.theta_max:
        return free
    from scipy import optimize  # deferred: slow to import, needed only when the box binds

    R = np.linalg.cholesky(H).T
    rhs = np.linalg.solve(R.T, s.b)
    res = optimize.lsq_linear(R, rhs, bounds=(-obj.theta_max, obj.theta_max), method="bvls",
                              tol=1e-14)
    return res.x


def one_blas_thread():
    """A context in which BLAS uses one thread. The solvers' products are matrix-vector products
    of n × p records with p ≈ 10: OpenBLAS's threads make them slower (0.9 ms single-threaded
    against 18 ms for 90,000 × 11 records with a second process on the other core, spinning
    threads included), and the threads' split of the sums would make θ* depend on the cores."""
    from threadpoolctl import threadpool_limits  # deferred: only record-based losses need it

    return threadpool_limits(1, user_api="blas")


def _smooth_box(obj: Objective, owners: list[int] | None, x0: np.ndarray | None = None,
                loss_fn=None, on_iteration: Callable[[], object] | None = None) -> np.ndarray:
    """Minimise a smooth objective over the box with L-BFGS-B (scipy), to tight tolerances."""
    from scipy import optimize  # deferred: slow to import, needed only here

    def fun(theta):
        return obj.value(theta, owners), obj.gradient(theta, owners)

    start = np.zeros(obj.p) if x0 is None else x0
    bounds = [(-obj.theta_max, obj.theta_max)] * obj.p
    res = optimize.minimize(fun if loss_fn is None else loss_fn, start, jac=True,
                            method="L-BFGS-B", bounds=bounds,
                            callback=None if on_iteration is None else (lambda *_: on_iteration()),
                            options={"maxiter": 10_000, "ftol": 1e-15, "gtol": 1e-12})
    return res.x


HINGE_WIDTHS = (1e-2, 1e-4, 1e-6)


def _stacked(obj: Objective, owners: list[int] | None) -> tuple[np.ndarray, int]:
    """Rows y_j z_j of the selected owners' records (the hinge depends on nothing else)."""
    idx = list(range(len(obj.owners))) if owners is None else owners
    Z = np.vstack([obj.owners[i].records()[0] for i in idx])
    y = np.concatenate([obj.owners[i].records()[1] for i in idx])
    return y[:, None] * Z, len(y)


def _hinge_box(obj: Objective, owners: list[int] | None,
               on_iteration: Callable[[], object] | None = None) -> np.ndarray:
    """Hinge optimum over the box by smoothing continuation, certified by a duality gap.

    The hinge max(0, m) of the margin deficit m = 1 − y zᵀθ is replaced by its Huber smoothing
    of width h (within h/2 of it everywhere), minimised with L-BFGS-B for each h in
    HINGE_WIDTHS, warm-started from the last; :func:`hinge_duality_gap` bounds what is left.
    """
    YZ, n = _stacked(obj, owners)
    lam, theta = obj.lam, np.zeros(obj.p)
    for h in HINGE_WIDTHS:
        def fun(t: np.ndarray, h: float = h) -> tuple[float, np.ndarray]:
            m = 1.0 - YZ @ t
            d = np.clip(m / h, 0.0, 1.0)  # derivative of the smoothed hinge in m
            value = np.where(m > h, m - h / 2, 0.5 * m * d)
            return lam * t @ t + value.sum() / n, 2 * lam * t - (d @ YZ) / n
        theta = _smooth_box(obj, owners, x0=theta, loss_fn=fun, on_iteration=on_iteration)
    return theta


def hinge_duality_gap(obj: Objective, theta: np.ndarray, owners: list[int] | None = None,
                      width: float = HINGE_WIDTHS[-1]) -> float:
    """An upper bound on f(θ) − f(θ*) for the box-constrained hinge problem.

    Lagrangian dual with multipliers α_j ∈ [0, 1/n] on the margins: for v = Σ α_j y_j z_j,
    D(α) = Σ α_j + Σ_coords min_{|t|≤θmax} (λt² − v t) ≤ f(θ*) for any such α. α is the
    derivative of the smoothed hinge at θ (width ``width``), the smoothed problem's own dual.
    """
    YZ, n = _stacked(obj, owners)
    alpha = np.clip((1.0 - YZ @ theta) / width, 0.0, 1.0) / n
    v = alpha @ YZ
    t = np.clip(v / (2 * obj.lam), -obj.theta_max, obj.theta_max)
    dual = alpha.sum() + float(np.sum(obj.lam * t * t - v * t))
    return obj.value(theta, owners) - dual
