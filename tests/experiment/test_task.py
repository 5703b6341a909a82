"""Tasks (dpmarket/experiment/task.py): a task's replications share their data and each equals a plain run
with its seed; cells share cached data only when the data stage reads the same keys."""

from __future__ import annotations

from helpers import plan

from dpmarket.experiment.task import Task, data_key, run_task
from dpmarket.runs.run import execute


def test_replications_share_data_and_each_equals_a_plain_run_with_its_seed():
    p = plan("replications", replications=4)
    records = run_task(Task(0, p.cells[0].scenario, (0, 1, 2, 3), tuple(p.seeds), True))
    assert len({r["psi_final"] for r in records}) == 4  # the noise differs …
    assert all(r["owners"] == records[0]["owners"] for r in records)  # … the data do not
    for r, seed in zip(records, p.seeds, strict=True):
        alone = execute(p.cells[0].scenario.model_copy(update={"seed": seed}))
        assert alone.psi_final == r["psi_final"] and list(alone.training.metrics.psi) == r["metrics"]["psi"]


def test_cells_share_cached_data_only_when_the_data_stage_reads_the_same_keys():
    p = plan(grid=["privacy.epsilon=1,10", "learner.rho=1,2", "data.shift=0,0.5"], replications=1)
    keys = {c.values: data_key(c.scenario) for c in p.cells}
    assert len(set(keys.values())) == 2  # only data.shift changes the records
    assert keys[(1, 1, 0)] == keys[(10, 2, 0)] != keys[(1, 1, 0.5)]
    other = plan(grid=["model.regularization=1e-5,1e-3", "privacy.epsilon=1"], replications=1)
    assert data_key(other.cells[0].scenario) != data_key(other.cells[1].scenario)  # θ* changes
