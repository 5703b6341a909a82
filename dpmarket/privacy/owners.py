"""The data owner's side of an exchange: answer a gradient query privately, or refuse.

An owner computes its exact answer Q_i(θ) = (1/n_i) Σ ∇ℓ(θ; z, y) at θ projected onto Θ, adds noise
and records the answer in its ledger; when the ledger cannot take another answer it refuses. One
answer has sensitivity Δ_i = 2Ξ/n_i (times 1 + κ, the floating-point margin of
:func:`~dpmarket.privacy.mechanisms.rounding_margin`) between datasets that differ in one record, Ξ
bounding every per-example gradient in the mechanism's norm (L1 for Laplace, L2 for Gaussian) — from
the declared data bounds (records were clipped into them when the owner was built) or by clipping
every per-example gradient to norm Ξ. The noise scale is z·Δ_i, z the multiplier that makes m_i
answers compose to (ε_i, δ_i) (dpmarket/privacy/mechanisms.py), the least that a valid accountant
proves (the scenario's, or basic composition where that needs less noise); under basic composition
of Laplace answers that is Theorem 1's b_i = 2Ξm_i/(n_iε_i), charged ε_i/m_i at a time. Every answer
is finite: the exact part is bounded by the declared domain (see :mod:`dpmarket.data.magnitudes`) and
the noise by LAPLACE_TAIL times its scale, which the run checks.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable

import numpy as np

from dpmarket.learning import kernels, records
from dpmarket.learning.objective import HingeLoss, LogisticLoss, Loss, OwnerData, SquaredLoss
from dpmarket.privacy.guarantee import Guarantee
from dpmarket.privacy.mechanisms import (
    Accountant,
    ComposedLedger,
    laplace_scale,
    make_noise,
    noise_multiplier,
    proved_by,
    rounding_margin,
)

# Largest |standard Laplace draw| numpy can return: it takes the log of twice a 53-bit uniform
# (or of 2 − 2U), never of less than 2⁻⁵², so |w| ≤ 52·ln 2 ≈ 36.04 (rounded up here). Its standard
# normal (ziggurat, tail r − ln(U)/r with r ≈ 3.65) stays below 14, so the bound covers the Gaussian too.
LAPLACE_TAIL = 37.0


def project(theta: np.ndarray, theta_max: float) -> np.ndarray:
    """Π_Θ: each coordinate clipped to [−θmax, θmax] (maximum, then minimum, as the learner does; a
    point of Θ comes back unchanged, bit for bit)."""
    return np.minimum(np.maximum(theta, -theta_max), theta_max)


def _finite(answer: np.ndarray) -> bool:
    """Whether every coordinate of ``answer`` is finite, in a third of the time of
    ``np.isfinite(answer).all()``: its dot product with p weights 2⁻ᵏ ≤ 1/p is ±inf or NaN exactly when
    a coordinate is (the weighted sum of finite doubles stays within the largest double, and only a
    subnormal coordinate can underflow)."""
    if type(answer) is not np.ndarray or answer.ndim != 1:
        return bool(np.isfinite(answer).all())
    return math.isfinite(answer.dot(_weights(answer.shape[0])))


_WEIGHTS: dict[int, np.ndarray] = {}


def _weights(p: int) -> np.ndarray:
    """A read-only vector of p weights 2⁻ᵏ, the largest power of two not above 1/p; made once per p."""
    weights = _WEIGHTS.get(p)
    if weights is None:
        weights = _WEIGHTS[p] = np.full(p, 2.0 ** -math.ceil(math.log2(max(p, 1))))
        weights.flags.writeable = False
    return weights


def answer_bound(xi: float, scale: float) -> float:
    """A bound on every coordinate of an answer: the exact part's Ξ plus the largest noise."""
    return xi + LAPLACE_TAIL * scale


class DataOwner:
    """One hospital or bank: its records, its guarantee, its noise stream and its ledger.

    ``answers`` is m_i, the number of answers the guarantee is spread over (the owner refuses the
    next one); ``xi`` bounds every per-example gradient in the guarantee's norm over Θ = [−θmax, θmax]^p
    (``theta_max``; every query is projected onto Θ); ``clip``, when given, is the norm each per-example
    gradient is clipped to (then ``xi`` equals it).
    """

    def __init__(self, index: int, name: str, data: OwnerData, loss: Loss, *, guarantee: Guarantee,
                 answers: int, xi: float, noise_rng: np.random.Generator, theta_max: float,
                 clip: float | None = None) -> None:
        self.index, self.name, self.data, self.loss = index, name, data, loss
        self.theta_max = float(theta_max)  # Θ's box, public: the query is projected onto it
        self.requested = guarantee  # what the scenario asked for
        self.guarantee = proved_by(guarantee, answers)  # the accountant that proves it with least noise
        self.answers_allowed, self.xi, self.clip = answers, xi, clip
        dim = data.stats.A.shape[0] if data.stats is not None else data.Z.shape[1]
        # Of one answer, in the mechanism's norm, as computed in floating point: 2Ξ/n_i, and the margin
        # by which rounding can part two neighbouring datasets' answers further (rounding_margin).
        self.margin = rounding_margin(data.n, dim)
        self.sensitivity = 2.0 * xi / data.n * (1.0 + self.margin)
        if self.guarantee.pure:  # Theorem 1, as the papers do: b = 2Ξm/(nε), with the rounding margin
            self.multiplier = answers / guarantee.epsilon
            self.scale = laplace_scale(xi, answers, data.n, guarantee.epsilon) * (1.0 + self.margin)
        else:
            self.multiplier = noise_multiplier(self.guarantee, answers)
            self.scale = self.multiplier * self.sensitivity
        self.charge, self.ledger = self._ledger()
        self.noise = make_noise(guarantee.mechanism, noise_rng, self.scale, dim, block=min(256, answers))
        self._bound: tuple | None = None  # (backend, thread, answer function): exact_answer

    def __getstate__(self) -> dict:
        """A copy or a pickle binds its own answer function (the binding holds this owner's buffers)."""
        return {**self.__dict__, "_bound": None}

    @property
    def epsilon(self) -> float:
        return self.guarantee.epsilon

    @property
    def delta(self) -> float:
        return self.guarantee.delta

    @property
    def mechanism(self) -> str:
        return self.guarantee.mechanism

    @property
    def accountant(self) -> str:
        """The accountant whose proof the owner's noise and ledger rest on: the scenario's, or basic
        composition where that proves the guarantee with less noise."""
        return self.guarantee.accountant

    def _ledger(self):
        """(charge per answer, ledger): exact even shares of ε_i under basic composition; one answer
        at a time on the accountant's ε curve under RDP and PLD."""
        if self.accountant == "basic":
            charge = Accountant.even_share(self.epsilon, self.answers_allowed)
            return charge, Accountant(self.index, self.epsilon)
        from dpmarket.privacy.accounting import epsilon_curve

        curve = epsilon_curve(self.guarantee, self.multiplier)
        return 1, ComposedLedger(self.index, self.epsilon, self.answers_allowed, curve)

    @property
    def norm(self) -> str:
        """The norm Ξ bounds (and clipping uses): L1 for Laplace, L2 for Gaussian."""
        return self.guarantee.norm

    def exact_answer(self, theta: np.ndarray) -> np.ndarray:
        """Q_i(θ) before noise (with per-example clipping when the owner clips), at θ projected onto Θ.

        Ξ bounds the per-example gradients over Θ only (squared loss: 2(Y + θmax‖z‖₁)‖z‖₁); at θ = 10·θmax
        an answer would shift by 3.5 times the sensitivity between neighbours. Algorithm 1 never asks
        outside Θ (its copies are projected and θ̄ is their midpoint, in floating point too), so the
        projection changes no answer it asks for; the owner does not rely on it."""
        bound = self._bound  # bound at the first answer of this thread and kernel backend (pinned per
        # run); a binding serves one thread, as its buffer does
        if bound is None or bound[0] != kernels.backend() or bound[1] != threading.get_ident():
            bound = self._bound = (kernels.backend(), threading.get_ident(), self._bind())
        return bound[2](theta)

    def _bind(self) -> Callable[[np.ndarray], np.ndarray]:
        """Q_i as a function of θ with everything but θ bound once: the Gram statistics, or the records,
        the clip limits and the kernel for the backend in force (:func:`records.answerer`), and a buffer
        that θ is projected into. Each answer is the bits of the loss's own ``mean_grad`` or
        ``clipped_mean_grad`` at ``project(θ)`` (the same operations on the same values); a loss of
        another class than the three built in answers through those methods."""
        loss, data, tmax, clip = self.loss, self.data, self.theta_max, self.clip
        if type(loss) is SquaredLoss and clip is None:  # SquaredLoss.mean_grad, from the statistics
            A, b, two_n = data.stats.A, data.stats.b, 2.0 / data.n
            point = np.empty(A.shape[0])

            def from_stats(theta: np.ndarray) -> np.ndarray:
                q = np.minimum(np.maximum(theta, -tmax, out=point), tmax, out=point)  # project()
                return two_n * (A @ q - b)
            return from_stats
        if type(loss) not in (SquaredLoss, LogisticLoss, HingeLoss):
            return self._generic_answer
        limit = None if clip is None else data.limits(clip, self.norm)  # Loss.mean_grads' limit
        kernel = records.answerer(loss.name, data.columns, data.records()[1], limit)
        points = np.empty((1, data.columns.shape[0]))  # Loss.mean_grad's θ[None]
        point = points[0]

        def from_records(theta: np.ndarray) -> np.ndarray:
            np.minimum(np.maximum(theta, -tmax, out=point), tmax, out=point)  # project()
            out = np.empty_like(points)
            kernel(points, out)
            return out[0]
        return from_records

    def _generic_answer(self, theta: np.ndarray) -> np.ndarray:
        """:meth:`exact_answer` through the loss's methods (a loss class not built in)."""
        theta = project(theta, self.theta_max)
        if self.clip is None:
            return self.loss.mean_grad(theta, self.data)
        return self.loss.clipped_mean_grad(theta, self.data, self.clip, self.norm)

    def respond(self, theta: np.ndarray) -> np.ndarray | None:
        """The DP answer Q_i(θ) + w, or None (a refusal) when the budget cannot cover it."""
        if not self.ledger.try_pay(self.charge):
            return None
        answer = self.exact_answer(theta) + self.noise.draw()
        if not _finite(answer):
            # Unreachable: records lie in the declared domain and data.magnitudes bounds every
            # sum; were it reached, a bug must stop the run rather than publish NaN or inf.
            raise FloatingPointError(f"owner {self.index} computed a non-finite answer at θ = {theta}")
        return answer

    @property
    def answers_left(self) -> int:
        """How many more answers the ledger can pay: a schedule may ask no more of this owner."""
        return self.ledger.remaining(self.charge)

    @property
    def exhausted(self) -> bool:
        """Whether the next query would be refused."""
        return not self.ledger.can_pay(self.charge)

    @property
    def epsilon_spent(self) -> float:
        """ε spent so far (exact ledger value, or the accountant's ε at δ_i, as a float)."""
        return self.ledger.spent_float
