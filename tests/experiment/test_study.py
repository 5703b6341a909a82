"""Studies (dpmarket/experiment/study.py): a plan's cells are the grid's product with every cell
validated up front, a cell's record kernel does not depend on its split into tasks, and Ctrl-C keeps
the finished replications for a re-run to complete."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from helpers import ROOT, files, frozen, plan, tiny, wait_for

from dpmarket.errors import ScenarioError
from dpmarket.experiment.study import Execution, make_plan, run_replications, run_sweep
from dpmarket.learning import kernels


def test_cells_are_the_product_in_grid_order_with_the_data_seed_pinned():
    p = plan(grid=["privacy.epsilon=1,10,100", "data.owners=2,5"], seed=11)
    assert [c.values for c in p.cells] == [(e, n) for e in (1, 10, 100) for n in (2, 5)]
    for cell in p.cells:
        s = cell.scenario
        assert (s.privacy.epsilon, s.data.owners) == cell.values
        assert s.data.seed == 11 and s.seed == 11 and s.learner.iterations == 60
    fixed = plan(grid=["privacy.epsilon=1"], seed=11, data={"seed": 4})
    assert fixed.cells[0].scenario.data.seed == 4


@pytest.mark.parametrize("grid,expected", [
    (["privacy.epsilon=1,-1"], "privacy.epsilon=-1): privacy.epsilon = -1"),
    (["privacy.epsilom=1"], "privacy.epsilom = 1: unknown key"),
    (["data.owners=3,4"], "data.owners=4): data.records"),  # a 3-size list cannot serve 4 owners
])
def test_bad_cells_fail_up_front_naming_key_and_value(grid, expected):
    with pytest.raises(ScenarioError) as err:
        plan(grid=grid, data={"records": [300, 300, 300]})
    assert expected in str(err.value) and "--grid" in str(err.value)


# ---------------------------------------------------------------------------------- tasks


@pytest.mark.skipif(not kernels.available(), reason="numba not installed")
def test_the_record_kernel_is_the_cells_whatever_the_split_into_tasks(tmp_path, monkeypatch):
    """Under ``auto`` a cell's runs take numba from their scenario's record reads (here every clipped
    cell's: the threshold lowered to 0), never from how many replications a task holds: the serial
    executor (a cell per task) and two processes (cells split into tasks) give the same bytes, which
    differ from numpy's (so the kernel did change)."""
    from dpmarket.experiment import study

    monkeypatch.setattr(kernels, "AUTO_READS_REPLICATED", 0.0)  # forked workers inherit it
    monkeypatch.setenv(kernels.VARIABLE, "auto")
    p = plan("replications", replications=6, privacy={"sensitivity": "clip", "clip": 2.0})
    assert len(study.pending_tasks(p, {}, 2, True)[0]) == 2  # one cell, two tasks on two workers
    names = ("metrics.csv", "replications.csv")
    run_replications(p, tmp_path / "serial", Execution("serial"))
    run_replications(p, tmp_path / "process", Execution("process", 2))
    monkeypatch.setenv(kernels.VARIABLE, "numpy")
    run_replications(p, tmp_path / "numpy", Execution("serial"))
    serial, process = files(tmp_path / "serial", names), files(tmp_path / "process", names)
    assert serial == process != files(tmp_path / "numpy", names)


# ---------------------------------------------------------------------------------- interrupts


# request mode, 1500 iterations: slow enough to interrupt
SLOW = tiny(name="slowish", seed=9, learner={"iterations": 1500}, network={"mode": "request"},
            output={"metric_points": 5, "plots": False})


CELLS = 32
EPSILONS = ",".join(str(2 ** (k / 4)) for k in range(CELLS))  # 1 … 215


@pytest.mark.slow
def test_ctrl_c_keeps_finished_replications_and_a_rerun_completes_identically(tmp_path):
    """Independent of the machine's speed: 32 cells of 4 replications are 32 tasks (replayed, a task
    is a whole cell), and the sweep's process tree is frozen while the test sees the first saved task
    and sends Ctrl-C, so the interrupt lands with tasks still to do (under load the sweep could finish
    between the test's look and its signal; the waits are patience only)."""
    path = tmp_path / "slow.toml"
    path.write_text(SLOW.to_toml())
    args = [sys.executable, "-m", "dpmarket", "sweep", str(path), "--grid", f"privacy.epsilon={EPSILONS}",
            "--replications", "4", "--executor", "process", "--workers", "2", "--quiet"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = tmp_path / "out"
    proc = subprocess.Popen([*args, "--out", str(out)], stderr=subprocess.PIPE, text=True, env=env)
    wait_for(lambda: list((out / "tasks").glob("c*.json")), timeout=600)
    with frozen(proc.pid):
        assert 0 < len(list((out / "tasks").glob("c*.json"))) < CELLS  # work remains
        proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 130, err
    assert err.strip().splitlines() == [f"dpmarket: interrupted; finished replications are saved in "
                                        f"{out}: re-run the same command to resume"]
    saved = list((out / "tasks").glob("*.json"))
    assert 0 < len(saved) < CELLS and not list(out.rglob(".*.tmp")) and not (out / "sweep.csv").exists()
    for f in saved:
        json.loads(f.read_text())
    done = subprocess.run([*args, "--out", str(out)], capture_output=True, text=True, env=env,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    clean = make_plan("sweep", SLOW, [f"privacy.epsilon={EPSILONS}"], 4, "t")
    run_sweep(clean, tmp_path / "clean", Execution("process", 2))
    assert files(out) == files(tmp_path / "clean")
    assert json.loads((out / "sweep.json").read_text())["reused_replications"] >= len(saved)
