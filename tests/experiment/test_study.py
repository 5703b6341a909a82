"""Replications and sweeps: grids, cells, seeds, executors (incl. a real Dask cluster), resume,
interrupts, and the statistics of sweep.csv against numpy on the saved per-replication ψ."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from helpers import ROOT, frozen, ks_accepts, saved_replications, tiny, wait_for
from scipy import stats

from dpmarket import rng
from dpmarket.cli import main
from dpmarket.errors import ScenarioError
from dpmarket.experiment import executors, publish
from dpmarket.experiment.executors import ExecutorError
from dpmarket.experiment.grid import parse_axis, parse_grid, split_values
from dpmarket.experiment.store import ExperimentDirectoryError, write_atomic
from dpmarket.experiment.study import Execution, make_plan, run_replications, run_sweep
from dpmarket.experiment.task import Task, data_key, run_task
from dpmarket.learning import kernels
from dpmarket.markets.forecast import calibrate
from dpmarket.output.figures import sweep as sweep_plots
from dpmarket.runs.run import execute

GRID = ["privacy.epsilon=1,10", "data.records=200,400"]
SWEEP_FILES = ("sweep.csv", "sweep_owners.csv")


def plan(kind="sweep", grid=GRID, replications=3, **sections):
    return make_plan(kind, tiny(**sections), grid if kind == "sweep" else [], replications, "t.toml")


def read_csv(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def files(directory: Path, names=SWEEP_FILES) -> dict[str, bytes]:
    return {n: (directory / n).read_bytes() for n in names}


# ---------------------------------------------------------------------------------- grid and cells


def test_values_split_outside_brackets_and_quotes():
    assert split_values('1, 2.5,"a,b"') == ["1", "2.5", '"a,b"']
    text = '{distribution="pareto", alpha=1.5},[1, 2]'
    assert split_values(text) == ['{distribution="pareto", alpha=1.5}', "[1, 2]"]
    axis = parse_axis("data.records=" + text)
    assert axis.values == ({"distribution": "pareto", "alpha": 1.5}, [1, 2])
    assert parse_axis("network.mode=ideal,request").values == ("ideal", "request")


@pytest.mark.parametrize("text", ["privacy.epsilon", "privacy.epsilon=", "privacy.epsilon=1,,2", "=1,2"])
def test_malformed_grid_options_are_scenario_errors(text):
    with pytest.raises(ScenarioError, match="expected dotted.key=v1,v2"):
        parse_axis(text)


def test_a_key_swept_twice_or_the_run_seed_is_refused():
    with pytest.raises(ScenarioError, match="two --grid"):
        parse_grid(["privacy.epsilon=1", "privacy.epsilon=2"])
    with pytest.raises(ScenarioError, match="sweep data.seed"):
        parse_grid(["seed=1,2"])


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


def test_bad_grid_on_the_command_line_is_one_line_exit_2_and_writes_nothing(tmp_path, capsys):
    path = tmp_path / "s.toml"
    path.write_text(tiny().to_toml())
    out = tmp_path / "out"
    code = main(["sweep", str(path), "--grid", "privacy.epsilon=1,0", "--out", str(out), "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "privacy.epsilon = 0" in err
    assert not out.exists()


# ---------------------------------------------------------------------------------- seeds


def test_replication_seeds_are_distinct_and_prefix_stable():
    seeds = rng.replication_seeds(7, 200)
    assert len(set(seeds)) == 200 and rng.replication_seeds(7, 20) == seeds[:20]
    assert set(seeds).isdisjoint(rng.replication_seeds(8, 200))


def test_replication_noise_streams_are_independent_laplace_draws():
    """The first noise draw of owner 0 under 2,000 replication seeds: Laplace(0, 1) by KS, and no
    lag-1 correlation (within 5 SE = 5/sqrt(n)); the same seed repeated must fail both."""
    def first_draws(seeds):
        return np.array([rng.stream(s, "noise", 0).laplace() for s in seeds])

    draws = first_draws(rng.replication_seeds(2024, 2000))
    assert ks_accepts(draws, stats.laplace)
    assert abs(np.corrcoef(draws[:-1], draws[1:])[0, 1]) < 5 / np.sqrt(len(draws))
    repeated = first_draws([rng.replication_seeds(2024, 1)[0]] * 2000)
    assert not ks_accepts(repeated, stats.laplace)


def test_replications_share_data_and_each_equals_a_plain_run_with_its_seed():
    p = plan("replications", replications=4)
    records = run_task(Task(0, p.cells[0].scenario, (0, 1, 2, 3), tuple(p.seeds), True))
    assert len({r["psi_final"] for r in records}) == 4  # the noise differs …
    assert all(r["owners"] == records[0]["owners"] for r in records)  # … the data do not
    for r, seed in zip(records, p.seeds, strict=True):
        alone = execute(p.cells[0].scenario.model_copy(update={"seed": seed}))
        assert alone.psi_final == r["psi_final"] and list(alone.training.metrics.psi) == r["metrics"]["psi"]


# ---------------------------------------------------------------------------------- executors


@pytest.fixture(scope="module")
def dask_address():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                                  dashboard_address=None, scheduler_kwargs=executors.NO_DASHBOARD) as cluster:
        yield cluster.scheduler_address


def published(directory: Path) -> dict[str, bytes]:
    """Every result file of an experiment directory, with the JSON document's how-it-was-made
    keys (executor, workers, scheduler, reused replications, wall time) left out."""
    out = {}
    for path in sorted(directory.iterdir()):
        if path.is_file() and not path.name.startswith("."):
            out[path.name] = path.read_bytes()
    for name in ("sweep.json", "summary.json"):
        if name in out:
            out[name] = json.dumps(publish.what_was_computed(json.loads(out[name]))).encode()
    return out


def test_every_executor_gives_byte_identical_results_figures_and_report(tmp_path, dask_address):
    p = plan(replications=5, output={"plots": True})
    runs = {"serial": Execution("serial"), "process": Execution("process", 2),
            "dask": Execution("dask", scheduler=dask_address)}
    outputs = {}
    for name, how in runs.items():
        meta = run_sweep(p, tmp_path / name, how)
        assert meta["executor"] == name and meta["reused_replications"] == 0
        outputs[name] = published(tmp_path / name)
    assert {"psi_epsilon.png", "psi_records.png", "owner_benefit.png", "report.html", "sweep.csv",
            "sweep_owners.csv", "sweep.json"} <= set(outputs["serial"])
    assert outputs["serial"] == outputs["process"] == outputs["dask"]
    page = outputs["serial"]["report.html"].decode()
    assert page.count("base64,") == 3 and "dask" not in page and "process" not in page
    rep = plan("replications", replications=4, output={"plots": True})
    run_replications(rep, tmp_path / "r-serial", Execution("serial"))
    run_replications(rep, tmp_path / "r-dask", Execution("dask", scheduler=dask_address))
    serial, dask = published(tmp_path / "r-serial"), published(tmp_path / "r-dask")
    assert {"psi_band.png", "report.html", "metrics.csv", "replications.csv", "owners.csv"} <= set(serial)
    assert serial == dask


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


def test_dask_local_cluster_of_worker_processes(tmp_path):
    pytest.importorskip("distributed")
    p = plan(grid=["privacy.epsilon=1,10"], replications=2)
    run_sweep(p, tmp_path / "serial", Execution("serial"))
    run_sweep(p, tmp_path / "dask", Execution("dask", workers=1))
    assert files(tmp_path / "serial") == files(tmp_path / "dask")


def killing_task(task):
    """A task that takes its worker process down when it reaches cell 1."""
    if task.cell == 1:
        os._exit(1)
    return run_task(task)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="workers must fork to see the patched task")
def test_a_killed_worker_loses_no_finished_task(tmp_path, monkeypatch):
    p = plan(replications=4)
    monkeypatch.setattr(executors, "run_task", killing_task)
    with pytest.raises(ExecutorError, match="re-run the same command"):
        run_sweep(p, tmp_path / "out", Execution("process", 1))
    saved = sorted((tmp_path / "out" / "tasks").glob("*.json"))
    kept = saved_replications(tmp_path / "out")
    assert saved and not any(f.name.startswith("c00001") for f in saved)
    assert not list((tmp_path / "out").glob("sweep*"))  # no aggregate from a partial experiment
    for f in saved:
        json.loads(f.read_text())  # every saved file is whole
    monkeypatch.setattr(executors, "run_task", run_task)
    meta = run_sweep(p, tmp_path / "out", Execution("serial"))
    assert meta["reused_replications"] == len(kept)
    run_sweep(p, tmp_path / "clean", Execution("serial"))
    assert files(tmp_path / "out") == files(tmp_path / "clean")


# ---------------------------------------------------------------------------------- resume


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


# request mode, 1500 iterations: slow enough to interrupt
SLOW = tiny(name="slowish", seed=9, learner={"iterations": 1500}, network={"mode": "request"},
            output={"metric_points": 5, "plots": False})


CELLS = 32
EPSILONS = ",".join(str(2 ** (k / 4)) for k in range(CELLS))  # 1 … 215


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


# ---------------------------------------------------------------------------------- the tables


def test_one_replication_leaves_psi_std_blank_in_csv_and_null_in_json(tmp_path):
    """No spread from one run: sweep.csv's psi_std is empty (not "nan"), summary.json's null."""
    out = tmp_path / "sweep"
    run_sweep(plan(grid=["privacy.epsilon=1,10"], replications=1), out, Execution("serial"))
    rows = read_csv(out / "sweep.csv")
    assert [row["psi_std"] for row in rows] == ["", ""] and all(float(row["psi_mean"]) > 0 for row in rows)
    assert "nan" not in (out / "sweep.csv").read_text().lower()
    rep = tmp_path / "rep"
    run_replications(plan("replications", replications=1), rep, Execution("serial"))
    text = (rep / "summary.json").read_text()
    summary = json.loads(text, parse_constant=lambda token: pytest.fail(f"non-strict JSON: {token}"))
    assert summary["psi_std"] is None and summary["psi_mean"] > 0


def test_sweep_statistics_are_numpys_on_the_saved_replications(tmp_path):
    p = plan(replications=7, owners=[{"epsilon": 0.5}, {"epsilon": 2.0}])
    out = tmp_path / "out"
    meta = run_sweep(p, out, Execution("serial"))
    rows = read_csv(out / "sweep.csv")
    assert list(rows[0]) == ["cell", "privacy.epsilon", "data.records", "replications", "owners",
                             "records", "epsilon_harmonic", "psi_mean", "psi_median", "psi_q25",
                             "psi_q75", "psi_std", "psi_zero", "own_psi_first", "own_psi_median",
                             "benefit_share_mean", "forecast", "mechanism", "accountant", "delta"]
    assert {(r["mechanism"], r["accountant"], r["delta"]) for r in rows} == {("laplace", "basic", "0.0")}
    eps_all, n_all, mean_all = [], [], []
    saved = saved_replications(out)
    for cell, row in zip(p.cells, rows, strict=True):
        recs = [saved[cell.index, r] for r in range(7)]
        psi = np.array([r["psi_final"] for r in recs])
        own = np.array(recs[0]["owners"]["own_psi"])
        eps = np.array([0.5, 2.0, cell.values[0]])
        assert float(row["psi_median"]) == np.median(psi)
        assert float(row["psi_q25"]) == np.percentile(psi, 25)
        assert float(row["psi_q75"]) == np.percentile(psi, 75)
        assert float(row["psi_mean"]) == np.mean(psi) and float(row["psi_std"]) == np.std(psi, ddof=1)
        assert float(row["own_psi_first"]) == own[0] and float(row["own_psi_median"]) == np.median(own)
        assert float(row["benefit_share_mean"]) == np.mean([np.mean(own > v) for v in psi])
        assert np.isclose(float(row["epsilon_harmonic"]) ** -2 * 3, np.sum(eps ** -2.0), rtol=1e-12)
        assert int(row["records"]) == 3 * cell.values[1] and row["replications"] == "7"
        eps_all.append(eps)
        n_all.append(3 * cell.values[1])
        mean_all.append(np.mean(psi))
    fit = calibrate(eps_all, n_all, mean_all)
    assert meta["forecast"] == fit.to_dict()
    for row, eps, n in zip(rows, eps_all, n_all, strict=True):
        assert float(row["forecast"]) == fit.psi(eps, n)
    owners = read_csv(out / "sweep_owners.csv")
    assert len(owners) == 4 * 3
    for o in owners:
        assert o["benefits"] == str(float(o["psi_median"]) < float(o["own_psi"]))


def test_replicated_run_files_follow_the_contract(tmp_path, capsys):
    path = tmp_path / "s.toml"
    path.write_text(tiny().to_toml())
    out = tmp_path / "out"
    assert main(["run", str(path), "--replications", "3", "--out", str(out), "--quiet",
                 "--executor", "serial"]) == 0
    metrics = read_csv(out / "metrics.csv")
    assert list(metrics[0]) == ["replication", "k", "time", "psi"]
    assert sorted({m["replication"] for m in metrics}) == ["0", "1", "2"]
    reps = read_csv(out / "replications.csv")
    assert [int(r["seed"]) for r in reps] == rng.replication_seeds(3, 3)
    assert all(r["psi_final"] == [m for m in metrics if m["replication"] == r["replication"]][-1]["psi"]
               for r in reps)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["replications"] == 3 and summary["data_seed"] == 3
    assert "3 replications" in capsys.readouterr().out


def test_cells_share_cached_data_only_when_the_data_stage_reads_the_same_keys():
    p = plan(grid=["privacy.epsilon=1,10", "learner.rho=1,2", "data.shift=0,0.5"], replications=1)
    keys = {c.values: data_key(c.scenario) for c in p.cells}
    assert len(set(keys.values())) == 2  # only data.shift changes the records
    assert keys[(1, 1, 0)] == keys[(10, 2, 0)] != keys[(1, 1, 0.5)]
    other = plan(grid=["model.regularization=1e-5,1e-3", "privacy.epsilon=1"], replications=1)
    assert data_key(other.cells[0].scenario) != data_key(other.cells[1].scenario)  # θ* changes


def dying_task(task):
    """A task whose worker process dies before any result exists."""
    os._exit(1)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="workers must fork to see the patched task")
def test_a_failure_before_any_result_leaves_no_directory(tmp_path, monkeypatch):
    monkeypatch.setattr(executors, "run_task", dying_task)
    with pytest.raises(ExecutorError):
        run_sweep(plan(replications=1), tmp_path / "out", Execution("process", 1))
    assert not (tmp_path / "out").exists()


def failing_task(task):
    """A task with a bug (or a user error found while running) in cell 1."""
    if task.cell == 1:
        raise ScenarioError("t.toml", "network.availability", "x.csv", "no such file")
    return run_task(task)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="workers must fork to see the patched task")
def test_an_error_inside_a_task_reaches_the_caller_as_itself(tmp_path, monkeypatch):
    monkeypatch.setattr(executors, "run_task", failing_task)
    with pytest.raises(ScenarioError, match="network.availability"):
        run_sweep(plan(replications=2), tmp_path / "out", Execution("process", 2))
    assert len(saved_replications(tmp_path / "out")) == 3 * 2  # the other cells' work


def test_cli_sweep_on_a_given_dask_scheduler(tmp_path, capsys, dask_address):
    path = tmp_path / "s.toml"
    path.write_text(tiny().to_toml())
    out = tmp_path / "out"
    assert main(["sweep", str(path), "--grid", "privacy.epsilon=1,10", "--replications", "2",
                 "--scheduler", dask_address, "--out", str(out), "--quiet"]) == 0
    assert f"the Dask cluster at {dask_address}" in capsys.readouterr().out
    meta = json.loads((out / "sweep.json").read_text())
    assert meta["executor"] == "dask" and meta["workers"] is None and meta["replications"] == 2
    reference = make_plan("sweep", tiny(), ["privacy.epsilon=1,10"], 2, str(path))
    run_sweep(reference, tmp_path / "serial", Execution("serial"))
    assert files(out) == files(tmp_path / "serial")


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


def test_an_interrupt_while_drawing_publishes_nothing_and_resume_redraws(tmp_path, monkeypatch):
    """Tables, figures and report appear together or not at all; tasks/ survives; a killed
    process's staging directory is cleared by the next run."""
    p = plan(grid=["privacy.epsilon=1,10"], replications=2, output={"plots": True})
    out, real = tmp_path / "out", sweep_plots.draw_sweep

    def interrupted(*args):
        real(*args)  # every figure drawn (into the staging directory) ...
        raise KeyboardInterrupt  # ... then Ctrl-C before the report

    monkeypatch.setattr(sweep_plots, "draw_sweep", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(p, out, Execution("serial"))
    assert sorted(f.name for f in out.iterdir()) == ["experiment.json", "tasks"]
    assert len(saved_replications(out)) == 4
    monkeypatch.setattr(sweep_plots, "draw_sweep", real)
    assert run_sweep(p, out, Execution("serial"))["reused_replications"] == 4
    before = published(out)
    assert {"psi_epsilon.png", "owner_benefit.png", "report.html", "sweep.csv"} <= set(before)
    monkeypatch.setattr(sweep_plots, "draw_sweep", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(p, out, Execution("serial"))
    assert published(out) == before and not list(out.glob(".*"))  # the earlier results stand
    monkeypatch.setattr(sweep_plots, "draw_sweep", real)
    (out / ".staging.killed.tmp").mkdir()
    (out / ".staging.killed.tmp" / "psi_epsilon.png").write_bytes(b"half")
    run_sweep(p, out, Execution("serial"))
    assert not list(out.glob(".*"))
    run_sweep(p, tmp_path / "clean", Execution("serial"))
    assert published(out) == published(tmp_path / "clean") == before


def test_without_plots_the_report_says_so_and_no_figure_is_drawn(tmp_path, capsys):
    path = tmp_path / "s.toml"
    path.write_text(tiny().to_toml())
    out = tmp_path / "out"
    assert main(["sweep", str(path), "--grid", "privacy.epsilon=1,10", "--replications", "2",
                 "--out", str(out), "--quiet", "--executor", "serial"]) == 0
    assert not list(out.glob("*.png")) and json.loads((out / "sweep.json").read_text())["figures"] == []
    page = (out / "report.html").read_text(encoding="utf-8")
    assert "output.plots = false" in page and "base64," not in page
    assert "figures       none (output.plots = false); report.html" in capsys.readouterr().out


def test_user_errors_cross_process_boundaries_intact():
    import pickle

    from dpmarket.errors import _MISSING, BudgetExhaustedError

    for err in (ScenarioError("a.toml", "x.y", _MISSING, "bad"), ScenarioError("a.toml", "x", 3, "bad"),
                BudgetExhaustedError(1, 0.5, 0.1, 0.55), ExperimentDirectoryError("d: other")):
        back = pickle.loads(pickle.dumps(err))
        assert type(back) is type(err) and str(back) == str(err)


def _blas_threads() -> int:
    """The most threads any BLAS library loaded in this process may use."""
    from threadpoolctl import threadpool_info

    return max(pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas")


def test_pool_workers_use_one_blas_thread_each():
    """Two workers on two cores with a multithreaded BLAS each would oversubscribe the machine."""
    from concurrent.futures import ProcessPoolExecutor

    np.ones((64, 64)) @ np.ones((64, 64))  # BLAS loaded in the parent, as before a sweep
    with ProcessPoolExecutor(1, initializer=executors._init_worker,
                             mp_context=executors._context()) as pool:
        assert pool.submit(_blas_threads).result() == 1
    with ProcessPoolExecutor(1, mp_context=executors._context()) as pool:  # without it
        assert pool.submit(_blas_threads).result() == _blas_threads()
