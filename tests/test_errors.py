"""The project's exceptions (dpmarket/errors.py): user errors cross process boundaries intact."""

from __future__ import annotations

from dpmarket.errors import ScenarioError
from dpmarket.experiment.store import ExperimentDirectoryError


def test_user_errors_cross_process_boundaries_intact():
    import pickle

    from dpmarket.errors import _MISSING, BudgetExhaustedError

    for err in (ScenarioError("a.toml", "x.y", _MISSING, "bad"), ScenarioError("a.toml", "x", 3, "bad"),
                BudgetExhaustedError(1, 0.5, 0.1, 0.55), ExperimentDirectoryError("d: other")):
        back = pickle.loads(pickle.dumps(err))
        assert type(back) is type(err) and str(back) == str(err)
