"""The experiment's tables (dpmarket/experiment/tables.py): sweep.csv's statistics are numpy's on the saved
replications, one replication leaves the spread blank, and a replicated run's files follow the contract."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import plan, read_csv, saved_replications, tiny

from dpmarket import rng
from dpmarket.cli import main
from dpmarket.experiment.study import Execution, run_replications, run_sweep
from dpmarket.markets.forecast import calibrate


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
