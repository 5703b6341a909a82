"""The run's owners (dpmarket/privacy/cohort.py): common random numbers, every owner's noise the same
standard draws whichever policy made it a member and whatever its budget."""

from __future__ import annotations

import numpy as np
from helpers import market_scenario

from dpmarket.data import problem
from dpmarket.privacy import cohort


def standard_noise(scenario, members, eps, draws: int = 30) -> dict[int, np.ndarray]:
    prepared = problem.prepare(scenario)
    consortium, objective = prepared.consortium, prepared.objective
    owners = cohort.build_owners(scenario, consortium, objective, np.asarray(members), np.asarray(eps))
    return {o.index: np.array([o.noise.draw() / o.scale for _ in range(draws)]) for o in owners}


def test_policies_draw_identical_noise_for_the_owners_they_share():
    s = market_scenario()
    a = standard_noise(s, [0, 1, 2], [2.0, 2.0, 0.5])
    b = standard_noise(s, [0, 2], [7.0, 0.0, 3.0])  # other members, other budgets
    same = {"rtol": 1e-13, "atol": 0}  # (w·b)/b, up to rounding: the same standard Laplace draws
    assert np.allclose(a[0], b[0], **same) and np.allclose(a[2], b[2], **same)
    other_seed = standard_noise(s.model_copy(update={"seed": 4}), [0, 2], [7.0, 0.0, 3.0])
    assert not np.allclose(a[0], other_seed[0], **same)  # the check can fail: another seed differs
