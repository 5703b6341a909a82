"""Small builders shared by the tests: tiny scenarios and statistical checks with derived thresholds."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from scipy import stats

from dpmarket.scenario import Scenario, validate


def tiny(**sections) -> Scenario:
    """A small valid scenario; keyword arguments are merged into its sections.

    It keeps the correlated generator with an intercept (the defaults before conditioned data),
    so that the many tests written against it keep their meaning; tests of the defaults say so.
    """
    table: dict = {"name": "tiny", "seed": 3,
                   "data": {"owners": 3, "records": 300, "features": 3, "generator": "correlated"},
                   "model": {"intercept": True},
                   "learner": {"iterations": 60, "rho": 3.0},
                   "output": {"metric_points": 10, "plots": False}}
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(table.get(key), dict):
            table[key] = {**table[key], **value}
        else:
            table[key] = value
    return validate(table, "test")


def clip_l1(grads: np.ndarray, bound: float) -> np.ndarray:
    """Reference per-example clipping on the full (n, p) gradient matrix: each row scaled down to
    L1 norm ≤ ``bound`` (with the package's 10⁻¹² margin). The package clips margins instead, in
    one pass; the tests compare the two."""
    norms = np.abs(grads).sum(axis=1)
    factor = np.minimum(1.0, bound * (1.0 - 1e-12) / np.maximum(norms, np.finfo(float).tiny))
    return grads * factor[:, None]


TINY_TOML = """
name = "tiny"
seed = 5
[data]
owners = 3
records = 300
features = 3
[learner]
iterations = 80
rho = 3.0
[output]
metric_points = 20
plots = {plots}
"""


def ks_accepts(samples: np.ndarray, dist, alpha: float = 1e-4) -> bool:
    """Kolmogorov–Smirnov: the sample fits ``dist`` at level ``alpha`` (critical value from n)."""
    result = stats.kstest(samples, dist.cdf)
    return bool(result.pvalue > alpha)


def chi2_accepts(counts: np.ndarray, probabilities: np.ndarray, alpha: float = 1e-4) -> bool:
    """Pearson chi-square goodness of fit of ``counts`` to ``probabilities`` at level ``alpha``."""
    counts = np.asarray(counts, dtype=float)
    expected = counts.sum() * np.asarray(probabilities, dtype=float)
    statistic = float(np.sum((counts - expected) ** 2 / expected))
    return statistic < stats.chi2.ppf(1 - alpha, len(counts) - 1)


def mean_within(samples: np.ndarray, theory: float, z: float = 5.0) -> bool:
    """The sample mean is within ``z`` standard errors (estimated from the sample) of ``theory``."""
    se = np.std(samples, ddof=1) / np.sqrt(len(samples))
    return bool(abs(np.mean(samples) - theory) <= z * se)


def proportion_within(successes: int, trials: int, p: float, z: float = 5.0) -> bool:
    """A binomial proportion is within ``z`` standard errors (from the theory p) of p."""
    se = np.sqrt(p * (1 - p) / trials)
    return bool(abs(successes / trials - p) <= z * se)


def saved_replications(directory: Path) -> dict[tuple[int, int], dict]:
    """Every replication saved in an experiment directory's ``tasks/`` (a file per task, or per
    replication as older versions wrote them), by (cell, replication)."""
    found = {}
    for path in sorted((Path(directory) / "tasks").glob("c*.json")):
        document = json.loads(path.read_bytes())
        for record in document.get("records", [document]):
            found[record["cell"], record["replication"]] = record
    return found
