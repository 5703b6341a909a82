"""The learner: Algorithm 1 of the asynchronous papers and the synchronous baselines.

Plain classes that know nothing of SimPy, owners or privacy: they produce query points and
absorb (noisy) answers. Notation of the docs' mathematics: g(θ) = λθᵀθ, σ = 2λ, Π_Θ clips every coordinate
to [−θmax, θmax], n_i/n is owner i's share of the records.
"""

from __future__ import annotations

import numpy as np

from dpmarket.learning import kernels

THETA_L_STEPS = ("printed", "proof")


def _project(x: np.ndarray, bound: float, out: np.ndarray) -> None:
    """Π_Θ: clip every coordinate to [−bound, bound] into ``out`` (two ufuncs; np.clip's
    Python wrapper costs more than the arithmetic at this size)."""
    np.minimum(np.maximum(x, -bound, out=out), bound, out=out)
WEIGHTINGS = ("none", "inverse_frequency")
_loaded = []  # dpmarket.learning.compiled once imported (it imports numba)


def _compiled():
    """The compiled kernels' module, imported at the first update under the numba backend."""
    if not _loaded:
        from dpmarket.learning import compiled

        _loaded.append(compiled)
    return _loaded[0]


class AsyncLearner:
    """Algorithm 1 (papers 003/001): a central model θ_L and one copy θ_i per owner.

    At the k-th exchange, with owner i:
        θ̄   = (θ_L + θ_i)/2
        θ_i ← Π_Θ[θ̄ − (Nρ/(T²σ)) (∇g(θ̄)/(2N) + (n_i/n) Q̃_i)]
        θ_L ← Π_Θ[θ̄ − a_L ∇g(θ̄)]
    with a_L = (N−1)ρ/(N T² σ) as printed in the algorithm (``theta_l_step="printed"``), or
    ρ/(2T²σ) as derived in its proof (``"proof"``). With ``weighting="inverse_frequency"``
    (Remark 4 of paper 001) owner i's answer is scaled by 1/(N π̂_i), where
    π̂_i = (c_i + 1)/(k + N) is its add-one-smoothed share of the exchanges so far (c_i counts
    its exchanges including this one); unequal clocks then no longer tilt the model.
    """

    def __init__(self, sizes: np.ndarray, dim: int, iterations: int, rho: float, lam: float, *,
                 theta_max: float, theta_l_step: str = "printed", weighting: str = "none"):
        if theta_l_step not in THETA_L_STEPS:
            raise ValueError(f"Unknown theta_l_step {theta_l_step!r}; expected {THETA_L_STEPS}")
        if weighting not in WEIGHTINGS:
            raise ValueError(f"Unknown weighting {weighting!r}; expected {WEIGHTINGS}")
        sizes = np.asarray(sizes, dtype=float)
        N, sigma, T = len(sizes), 2.0 * lam, float(iterations)
        self.N, self.lam, self.theta_max, self.weighting = N, lam, theta_max, weighting
        self.share = sizes / sizes.sum()
        self._share = self.share.tolist()  # Python floats: cheaper than numpy scalars per update
        self.step_owner = N * rho / (T * T * sigma)
        self.step_central = ((N - 1) * rho / (N * T * T * sigma) if theta_l_step == "printed"
                             else rho / (2.0 * T * T * sigma))
        self.theta_L = np.zeros(dim)
        self.theta = np.zeros((N, dim))
        self.counts = np.zeros(N, dtype=np.int64)
        self.k = 0
        self._scratch_of = None  # the learner whose scratch arrays these are (see _scratch)

    def query_point(self, owner: int) -> np.ndarray:
        """θ̄ = (θ_L + θ_i)/2, the point at which owner i is asked for its gradient."""
        theta_bar = np.add(self.theta_L, self.theta[owner])
        theta_bar *= 0.5
        return theta_bar

    def update(self, owner: int, theta_bar: np.ndarray, answer: np.ndarray) -> None:
        """Apply step 7 of Algorithm 1 with owner i's (noisy) answer Q̃_i at θ̄.

        Both steps are computed side by side in a scratch block (rows: θ_i's step, θ_L's), each
        with the operations of the formula in its order, so the bits are the formula's; eight
        small ufunc calls and no temporaries (at p ≈ 10 their calls are the cost). Where a run has
        pinned the numba backend, one compiled call does the same operations in the same order
        (:func:`dpmarket.learning.compiled.async_update`: the same bits, tested)."""
        self.k += 1
        self.counts[owner] += 1
        weight = self._share[owner]
        if self.weighting != "none":
            weight *= self._frequency_weight(owner)
        block, term = self._scratch()
        if kernels.pinned_backend() == "numba" and type(answer) is np.ndarray:  # compiled: the same bits
            _compiled().async_update(theta_bar, answer, weight, self._consts, block)
            self.theta[owner] = block[0]
            self.theta_L[...] = block[1]
            return
        own, central = block
        grad_g = np.multiply(2.0 * self.lam, theta_bar, out=central)  # ∇g(θ̄) = 2λθ̄
        np.divide(grad_g, 2 * self.N, out=own)
        np.add(own, np.multiply(weight, answer, out=term), out=own)  # ∇g/(2N) + (n_i/n) Q̃_i
        np.multiply(self._steps, block, out=block)  # rows times a_i and a_L
        np.subtract(theta_bar, block, out=block)
        _project(block, self.theta_max, block)
        self.theta[owner] = own
        self.theta_L[...] = central

    def _scratch(self) -> tuple[np.ndarray, np.ndarray]:
        """This learner's scratch arrays (a copy of the learner, ``copy.copy``, makes its own)."""
        if self._scratch_of is not self:
            p = self.theta_L.shape[0]
            self._block, self._term, self._scratch_of = np.empty((2, p)), np.empty(p), self
            self._steps = np.array([[self.step_owner], [self.step_central]])
            self._consts = np.array([2.0 * self.lam, 2 * self.N, self.step_owner, self.step_central,
                                     self.theta_max], dtype=float)
        return self._block, self._term

    def _frequency_weight(self, owner: int) -> float:
        share = (self.counts[owner] + 1.0) / (self.k + self.N)
        return 1.0 / (self.N * share)

    @property
    def model(self) -> np.ndarray:
        """The model the learner would publish now: the central copy θ_L."""
        return self.theta_L


class SyncLearner:
    """Algorithm 1 of paper 002: every owner answers every round.

    θ[k+1] = Π_Θ[θ[k] − (ρ/(T²k)) (∇g(θ[k]) + Σ_i (n_i/n) Q̃_i)]. (The paper states its
    theorem without a constraint; the projection keeps the iterate inside Θ like every other
    learner here and is inactive whenever θmax is large.)
    """

    def __init__(self, sizes: np.ndarray, dim: int, iterations: int, rho: float, lam: float, *,
                 theta_max: float):
        sizes = np.asarray(sizes, dtype=float)
        self.N, self.lam, self.theta_max = len(sizes), lam, theta_max
        self.share = sizes / sizes.sum()
        self.T, self.rho = iterations, rho
        self.theta_now = np.zeros(dim)
        self.k = 0

    def query_point(self) -> np.ndarray:
        """The point θ[k] at which every owner is asked this round."""
        return self.theta_now.copy()

    def step_size(self) -> float:
        """ρ/(T² k) for the round being completed."""
        return self.rho / (self.T * self.T * (self.k + 1))

    def update(self, answers: np.ndarray) -> None:
        """Apply one round with the answers of all owners (shape (N, p), in owner order)."""
        direction = 2.0 * self.lam * self.theta_now + self.share @ answers
        step = self.step_size()
        self.k += 1
        np.clip(self.theta_now - step * direction, -self.theta_max, self.theta_max,
                out=self.theta_now)

    @property
    def model(self) -> np.ndarray:
        """The current iterate θ[k]."""
        return self.theta_now


class SyncAveragedLearner(SyncLearner):
    """Algorithm 2 of paper 002: steps c/√k with iterate averaging, for non-smooth losses.

    θ[k+1] = Π_Θ[θ[k] − (c/√k)(∇g(θ[k]) + Σ_i (n_i/n) Q̃_i)] and
    θ̄[k+1] = ((k−1) θ̄[k] + (1/√T + 1) θ[k]) / (1/√T + k); ``rho`` plays the role of c.
    The published model is the average θ̄.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.theta_avg = np.zeros_like(self.theta_now)

    def step_size(self) -> float:
        """c/√k for the round being completed."""
        return self.rho / np.sqrt(self.k + 1)

    def update(self, answers: np.ndarray) -> None:
        k, r = self.k + 1, 1.0 / np.sqrt(self.T)
        previous = self.theta_now.copy()
        super().update(answers)
        self.theta_avg = ((k - 1) * self.theta_avg + (r + 1.0) * previous) / (r + k)

    @property
    def model(self) -> np.ndarray:
        """The averaged iterate θ̄."""
        return self.theta_avg
