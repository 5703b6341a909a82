"""The data owner's side of an exchange: answer a gradient query privately, or refuse.

An owner computes its exact answer Q_i(θ̄) = (1/n_i) Σ ∇ℓ(θ̄; z, y), adds Laplace noise of
scale b_i = 2Ξm_i/(n_iε_i) and charges ε_i/m_i to its ledger; when the ledger cannot take
another charge it refuses. Ξ comes either from the declared data bounds (records were clipped
into them when the owner was built) or from clipping every per-example gradient to L1 norm Ξ.
Every answer is finite: the exact part is bounded by the declared domain (see
:mod:`dpmarket.data.magnitudes`) and the noise by LAPLACE_TAIL·b_i, which the run checks.
"""

from __future__ import annotations

import numpy as np

from dpmarket.models import Loss, OwnerData
from dpmarket.privacy import Accountant, LaplaceNoise, laplace_scale

# Largest |standard Laplace draw| numpy can return: it takes the log of twice a 53-bit uniform
# (or of 2 − 2U), never of less than 2⁻⁵², so |w| ≤ 52·ln 2 ≈ 36.04 (rounded up here).
LAPLACE_TAIL = 37.0


def answer_bound(xi: float, scale: float) -> float:
    """A bound on every coordinate of an answer: the exact part's Ξ plus the largest noise."""
    return xi + LAPLACE_TAIL * scale


class DataOwner:
    """One hospital or bank: its records, its budget, its noise stream and its ledger."""

    def __init__(self, index: int, name: str, data: OwnerData, loss: Loss, epsilon: float,
                 answers: int, xi: float, noise_rng: np.random.Generator,
                 clip: float | None = None) -> None:
        self.index, self.name, self.data, self.loss = index, name, data, loss
        self.epsilon, self.answers_allowed, self.xi, self.clip = epsilon, answers, xi, clip
        self.scale = laplace_scale(xi, answers, data.n, epsilon)
        self.charge = Accountant.even_share(epsilon, answers)
        self.ledger = Accountant(index, epsilon)
        dim = data.stats.A.shape[0] if data.stats is not None else data.Z.shape[1]
        self.noise = LaplaceNoise(noise_rng, self.scale, dim, block=min(256, answers))

    def exact_answer(self, theta: np.ndarray) -> np.ndarray:
        """Q_i(θ) before noise (with per-example clipping when the owner clips)."""
        if self.clip is None:
            return self.loss.mean_grad(theta, self.data)
        return self.loss.clipped_mean_grad(theta, self.data, self.clip)

    def respond(self, theta: np.ndarray) -> np.ndarray | None:
        """The DP answer Q_i(θ) + w, or None (a refusal) when the budget cannot cover it."""
        if not self.ledger.try_pay(self.charge):
            return None
        answer = self.exact_answer(theta) + self.noise.draw()
        if not np.isfinite(answer).all():
            # Unreachable: records lie in the declared domain and data.magnitudes bounds every
            # sum; were it reached, a bug must stop the run rather than publish NaN or inf.
            raise FloatingPointError(f"owner {self.index} computed a non-finite answer at θ = {theta}")
        return answer

    @property
    def exhausted(self) -> bool:
        """Whether the next query would be refused."""
        return not self.ledger.can_pay(self.charge)

    @property
    def epsilon_spent(self) -> float:
        """ε spent so far (exact ledger value, as a float)."""
        return self.ledger.spent_float
