"""The experiment directory (dpmarket/experiment/store.py): a re-run skips what is saved and more
replications extend it, another experiment's directory is refused, and Ctrl-C during a save waits until
the file is whole."""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import pytest
from helpers import files, plan, saved_replications

from dpmarket.experiment.store import ExperimentDirectoryError, write_atomic
from dpmarket.experiment.study import Execution, run_sweep


def test_rerun_skips_what_is_done_and_more_replications_extend_the_experiment(tmp_path):
    out = tmp_path / "out"
    run_sweep(plan(replications=2), out, Execution("serial"))
    meta = run_sweep(plan(replications=4), out, Execution("serial"))
    assert meta["reused_replications"] == 4 * 2  # 4 cells x the first 2 replications
    run_sweep(plan(replications=4), tmp_path / "direct", Execution("serial"))
    assert files(out) == files(tmp_path / "direct")
    lost = sorted((out / "tasks").glob("*.json"))[::3]
    count = len(saved_replications(out))
    for f in lost:
        f.unlink()
    left = len(saved_replications(out))
    assert 0 < left < count
    meta = run_sweep(plan(replications=4), out, Execution("serial"))
    assert meta["reused_replications"] == left
    assert files(out) == files(tmp_path / "direct")


def test_a_different_experiment_in_the_same_directory_is_refused(tmp_path, capsys):
    out = tmp_path / "out"
    run_sweep(plan(replications=1), out, Execution("serial"))
    with pytest.raises(ExperimentDirectoryError, match=r"privacy\.epsilon = 1\.0 there, 2\.0 here"):
        run_sweep(plan(replications=1, privacy={"epsilon": 2.0}), out, Execution("serial"))
    with pytest.raises(ExperimentDirectoryError, match="grid"):
        run_sweep(plan(replications=1, grid=["privacy.epsilon=1,10"]), out, Execution("serial"))
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(ExperimentDirectoryError, match="not a dpmarket experiment"):
        run_sweep(plan(replications=1), other, Execution("serial"))
    assert (other / "notes.txt").read_text() == "mine"


def test_ctrl_c_during_a_save_is_held_until_the_file_is_in_place(tmp_path):
    def write(temp: Path) -> None:
        # arrives between creating and moving the file: sent to this very thread (the main one), so
        # it is handled at once, not whenever another thread the kernel picked lets the main one know
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)
        temp.write_text("whole")

    with pytest.raises(KeyboardInterrupt):
        write_atomic(tmp_path / "f.json", write)
    assert (tmp_path / "f.json").read_text() == "whole" and not list(tmp_path.glob(".*"))
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
