"""The learning problem of a scenario: the owners' data, the objective with its θ*, the own-data baselines.

Runs that differ only outside ``[data]`` and ``[model]`` share it (replications, market pilots).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dpmarket.data import Consortium, build_consortium
from dpmarket.data.magnitudes import check_curvature, check_optimum
from dpmarket.learning import kernels
from dpmarket.learning.objective import Objective, make_loss
from dpmarket.scenario.schema import Scenario
from dpmarket.system.progress import SILENT, Progress


@dataclass(frozen=True)
class Prepared:
    """The data stage of a scenario, reusable by runs that differ only outside ``[data]`` and
    ``[model]`` (replications share it: same records, θ*, own-data baselines)."""

    consortium: Consortium
    objective: Objective
    own_psi: np.ndarray


def prepare(scenario: Scenario, progress: Progress = SILENT) -> Prepared:
    """Build the owners' data, the objective with its θ*, and the own-data ψ(θ_i*).

    ``progress`` hears of each phase (θ* and the N own-data solves take seconds for the hinge loss).
    """
    with progress.phase("building the owners' data"):
        consortium = build_consortium(scenario)
    m = scenario.model
    objective = Objective(make_loss(m.loss), consortium.owners, m.regularization, m.theta_max)
    check_curvature(scenario, consortium)  # θ* solvable in floating point
    with progress.phase(f"solving θ* ({m.loss} loss)", unit="iterations") as step:
        objective.optimum(step.update)
    check_optimum(scenario, consortium, objective)  # ψ = f/f* − 1 finite over Θ
    with progress.phase("own-data models θ_i*", total=len(consortium.owners), unit="owner") as step:
        own = objective.own_data_models(step.update)
    with kernels.pinned("numpy"):  # data shared by runs whatever kernel each uses: one ψ(θ_i*)
        own_psi = objective.psis(own)
    return Prepared(consortium, objective, own_psi)
