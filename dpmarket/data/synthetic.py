"""Synthetic data owners shaped like the papers' hospitals, banks and card issuers.

Each kind is a small generative model ("profile"): features standing in for the papers' PCA
components, a linear signal, and label noise with the right shape (right-skewed for length of
stay, tight for interest rates, an imbalanced class for fraud).

Two generators (``data.generator``):

- ``whitened`` (the default) follows the papers' pre-processing: PCA-whitened features, i.e.
  independent coordinates of equal variance, and centred labels (no population intercept), so
  the Hessian of f is well conditioned (condition number near 1) and Algorithm 1 converges in
  the papers' T = 1,000 exchanges. Owners differ through their *coefficients*: owner i's labels
  follow θ + δ_i with δ_i ~ N(0, (shift_i·rms(θ))² I), a hospital whose patients respond
  differently; for classification its features shift along the fraud signature instead.
- ``correlated`` is the generator of dpmarket ≤ 0.1: AR(1)-correlated features, a population
  intercept, and owners whose features are shifted by a random vector of standard deviation
  ``shift_i`` and whose labels by a random offset. Its Hessian has a condition number near
  24 with an intercept column; it is kept so that earlier results can be reproduced.

Every feature is clipped into ``[−X, X]`` and every regression label into ``[−Y, Y]`` by the
owner before it answers, so Theorem 1's sensitivity bound holds for any draw.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dpmarket import rng as streams
from dpmarket.scenario.schema import LognormalSizes, ParetoSizes, Scenario, UniformSizes


@dataclass(frozen=True)
class Profile:
    """Shape of one kind of data: what the labels are and how noisy and skewed they are."""

    task: str  # "regression" or "classification"
    owner_prefix: str
    label_noise: float  # standard deviation of the label noise (regression)
    skew: float  # gamma shape of the noise; 0 means Gaussian
    feature_scale: float  # standard deviation of each feature before clipping
    correlation: float  # AR(1) correlation between neighbouring features
    signal: float  # size of the true coefficients
    positive_rate: float = 0.0  # classification: share of the +1 class


PROFILES = {
    # Length of stay: right-skewed around the mean, a modest share explained by the features.
    "length_of_stay": Profile("regression", "hospital", 0.6, 2.0, 0.35, 0.3, 0.5),
    # Interest rates: set almost entirely by grade and term, so little noise.
    "interest_rate": Profile("regression", "bank", 0.25, 0.0, 0.35, 0.5, 0.6),
    # Card fraud: a rare class whose features are shifted along a fraud signature.
    "card_fraud": Profile("classification", "institution", 0.0, 0.0, 0.35, 0.2, 0.6, 0.1),
}


@dataclass(frozen=True)
class Population:
    """What is shared by all owners of one scenario: the true coefficients and intercept."""

    coef: np.ndarray
    intercept: float


def owner_sizes(scenario: Scenario, seed: int) -> np.ndarray:
    """Records per owner: the per-owner override, else the list, the fixed number, or a draw."""
    data = scenario.data
    spec = data.records
    if isinstance(spec, int):
        sizes = np.full(data.owners, spec, dtype=np.int64)
    elif isinstance(spec, list):
        sizes = np.array(spec, dtype=np.int64)
    else:
        sizes = draw_sizes(spec, data.owners, streams.stream(seed, "sizes"))
    for i, owner in enumerate(scenario.owners):
        if owner.records is not None:
            sizes[i] = owner.records
    return sizes


def draw_sizes(spec: ParetoSizes | LognormalSizes | UniformSizes, count: int,
               gen: np.random.Generator) -> np.ndarray:
    """``count`` sizes from a size distribution, floored at its minimum and capped at its maximum."""
    if isinstance(spec, UniformSizes):
        return gen.integers(spec.minimum, spec.maximum, endpoint=True, size=count)
    if isinstance(spec, ParetoSizes):
        raw = spec.minimum * (1.0 + gen.pareto(spec.alpha, size=count))
    else:
        raw = spec.median * np.exp(spec.sigma * gen.standard_normal(count))
    cap = np.inf if spec.maximum is None else spec.maximum
    return np.clip(np.floor(raw), spec.minimum, cap).astype(np.int64)


COEF_LOW, COEF_HIGH, COEF_DECAY = 0.3, 1.0, 0.85  # coef_k = signal·U(low, high)·(±1)·decay^k


def population(profile: Profile, features: int, gen: np.random.Generator,
               generator: str = "whitened") -> Population:
    """Draw the coefficients shared by every owner (and, ``correlated`` only, an intercept)."""
    idx = np.arange(features)
    # Coefficients decay like the weights of successive principal components.
    coef = profile.signal * gen.uniform(COEF_LOW, COEF_HIGH, features) * gen.choice([-1.0, 1.0], features)
    coef *= COEF_DECAY ** idx
    intercept = float(gen.uniform(-0.3, 0.3))  # drawn either way: the same coefficients follow
    return Population(coef, intercept if generator == "correlated" else 0.0)


def coefficient_moments(profile: Profile, features: int) -> np.ndarray:
    """E coef_k² of :func:`population`'s draw, per feature: signal²·E U²·decay^{2k}, U uniform on
    [low, high] (E U² = (high³ − low³)/(3(high − low))). The coefficients are independent with mean
    0 (a random sign), so E coef·coefᵀ is the diagonal of these: the declared distribution of the
    population, public where its draw is not (dpmarket/data/proxy.py ``population_weights``)."""
    second = (COEF_HIGH**3 - COEF_LOW**3) / (3.0 * (COEF_HIGH - COEF_LOW))
    return profile.signal**2 * second * COEF_DECAY ** (2.0 * np.arange(features))


GENERATORS = ("whitened", "correlated")


def generate_owner(profile: Profile, pop: Population, n: int, shift: float, x_bound: float,
                   *, y_bound: float, noise: float, gen: np.random.Generator,
                   generator: str = "whitened") -> np.ndarray:
    """One owner's records as a block of shape (p + 2, n): features, a row of ones, labels.

    Records are stored one variable per row so every step below is a contiguous vector
    operation and the sufficient statistics are a single product ``block @ block.T``.
    Features are clipped into ``[−x_bound, x_bound]`` and labels into ``[−y_bound, y_bound]``.
    """
    if generator == "whitened":
        return _whitened_owner(profile, pop, n, shift, x_bound, y_bound=y_bound, noise=noise, gen=gen)
    if generator != "correlated":
        raise ValueError(f"Unknown generator {generator!r}; expected one of {', '.join(GENERATORS)}")
    return _correlated_owner(profile, pop, n, shift, x_bound, y_bound=y_bound, noise=noise, gen=gen)


def _whitened_owner(profile: Profile, pop: Population, n: int, shift: float, x_bound: float,
                    *, y_bound: float, noise: float, gen: np.random.Generator) -> np.ndarray:
    """Independent features of equal variance; owners differ in their coefficients (regression)."""
    block, X = _new_block(len(pop.coef), n, gen)
    X *= profile.feature_scale
    if profile.task == "classification":
        X += shift * profile.feature_scale * gen.standard_normal((len(pop.coef), 1))
        return _classes(profile, pop, X, block, shift, x_bound=x_bound, gen=gen)
    coef = pop.coef + shift * np.sqrt(np.mean(pop.coef**2)) * gen.standard_normal(len(pop.coef))
    return _regression(profile, block, coef, 0.0, x_bound, y_bound=y_bound, noise=noise, gen=gen)


def _new_block(p: int, n: int, gen: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A record block (p feature rows of standard normals, a row of ones, a label row) and its
    feature rows."""
    block = np.empty((p + 2, n))
    gen.standard_normal(out=block[:p])
    block[p] = 1.0
    return block, block[:p]


def _regression(profile: Profile, block: np.ndarray, coef: np.ndarray, offset: float, x_bound: float,
                *, y_bound: float, noise: float, gen: np.random.Generator) -> np.ndarray:
    """Clip the features, then labels coefᵀx + offset + noise, clipped into [−y_bound, y_bound]."""
    p, n = len(coef), block.shape[1]
    np.clip(block[:p], -x_bound, x_bound, out=block[:p])
    y = block[p + 1]
    np.dot(coef, block[:p], out=y)
    y += offset + _label_noise(profile, noise, n, gen)
    np.clip(y, -y_bound, y_bound, out=y)
    return block


def _classes(profile: Profile, pop: Population, X: np.ndarray, block: np.ndarray, shift: float,
             *, x_bound: float, gen: np.random.Generator) -> np.ndarray:
    """Labels ±1 of an imbalanced class whose features are shifted along the signature."""
    n, p = X.shape[1], X.shape[0]
    prior = np.log(profile.positive_rate / (1 - profile.positive_rate))
    positive = gen.random(n) < _expit(prior + shift * gen.standard_normal())
    X += pop.coef[:, None] * positive
    np.clip(X, -x_bound, x_bound, out=X)
    block[p + 1] = np.where(positive, 1.0, -1.0)
    return block


def _correlated_owner(profile: Profile, pop: Population, n: int, shift: float, x_bound: float,
                      *, y_bound: float, noise: float, gen: np.random.Generator) -> np.ndarray:
    """The generator of dpmarket ≤ 0.1: AR(1) features shifted per owner, a label offset."""
    p = len(pop.coef)
    block, X = _new_block(p, n, gen)
    r = profile.correlation
    for j in range(1, p):  # X_j = r X_{j−1} + sqrt(1 − r²) U_j: unit variance, corr r^|i−j|
        X[j] *= np.sqrt(1.0 - r * r)
        X[j] += r * X[j - 1]
    X *= profile.feature_scale
    X += shift * gen.standard_normal((p, 1))
    if profile.task == "classification":
        return _classes(profile, pop, X, block, shift, x_bound=x_bound, gen=gen)
    offset = pop.intercept + 0.5 * shift * gen.standard_normal()
    return _regression(profile, block, pop.coef, offset, x_bound, y_bound=y_bound, noise=noise, gen=gen)


def _label_noise(profile: Profile, sd: float, n: int, gen: np.random.Generator) -> np.ndarray:
    if profile.skew <= 0:
        return sd * gen.standard_normal(n)
    k = profile.skew  # centred gamma: mean 0, standard deviation sd, right tail like LOS
    return sd * (gen.standard_gamma(k, n) - k) / np.sqrt(k)


def _expit(x: float) -> float:
    return float(1.0 / (1.0 + np.exp(-x)))


def default_name(profile: Profile, index: int, count: int) -> str:
    """``hospital-7``: the prefix and the 1-based index, not zero-padded, so that an owner keeps
    its name whatever the number of owners ``count`` (bank-1 in a sweep's N = 9 and N = 10 cells
    alike: tables of different cells join on it)."""
    return f"{profile.owner_prefix}-{index + 1}"
