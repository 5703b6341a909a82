"""Outputs other tools read: owner names that join across N, tick counts that mean ticks, and the market
table's surplus and sd columns (that every events.csv kind and detail is documented is checked against
the docs' outputs page, tests/docs/test_docs_outputs.py)."""

from __future__ import annotations

import csv

import pandas as pd
from helpers import budgeted_market_toml, tiny

from dpmarket.cli import main
from dpmarket.data import build_consortium
from dpmarket.output.results import run_and_write
from dpmarket.output.timeline import load_run, owner_table


def test_owner_names_do_not_change_with_the_number_of_owners():
    """bank-1 at N = 9 must still be bank-1 at N = 10 (zero-padding renamed it bank-01)."""
    names = {n: build_consortium(tiny(data={"kind": "interest_rate", "owners": n, "records": 50})).names
             for n in (9, 10, 11)}
    assert names[10][:9] == names[9] and names[11][:10] == names[10]
    assert names[10][0] == "bank-1" and names[10][9] == "bank-10"


def test_timeline_counts_ticks_in_the_ideal_network(tmp_path):
    """The ideal network logs no tick events: every tick is an exchange begun by a query."""
    out = tmp_path / "ideal"
    run_and_write(tiny(), out)
    run = load_run(out)
    table = owner_table(run, range(3), 0.0, run.end)
    queries = run.events[run.events["kind"] == "query"].groupby("owner").size()
    assert table["ticks"].tolist() == queries.tolist() and (table["ticks"] >= table["exchanges"]).all()
    assert pd.read_csv(out / "owners.csv")["ticks"].tolist() == queries.tolist()


def test_timeline_counts_tick_events_in_a_network_run(tmp_path):
    out = tmp_path / "request"
    run_and_write(tiny(network={"mode": "request", "loss_probability": 0.3}), out)  # lost requests: ticks
    run = load_run(out)
    ticks = run.events[run.events["kind"] == "tick"].groupby("owner").size()
    assert owner_table(run, range(3), 0.0, run.end)["ticks"].tolist() == ticks.tolist()
    assert (ticks > run.events[run.events["kind"] == "query"].groupby("owner").size()).any()


def test_market_table_names_both_surpluses_and_leaves_sd_blank_for_one_run(tmp_path, capsys):
    path = tmp_path / "m.toml"
    path.write_text(budgeted_market_toml())
    assert main(["market", str(path), "--policies", "posted_price", "--out", str(tmp_path / "m")]) == 0
    header, line = capsys.readouterr().out.splitlines()[:2]
    assert "surplus fcst" in header and "surplus sim" in header and "nan" not in line
    row = next(csv.DictReader((tmp_path / "m" / "policies.csv").open()))
    assert row["psi_sd"] == "" and float(row["psi_mean"]) > 0
    cells = line.split()
    surpluses = (row["learner_surplus"], row["learner_surplus_simulated"])
    assert cells[-2:] == [f"{float(v):.4g}" for v in surpluses]


# --- oracle measurements: labelled in every file, and none written with --no-oracle (issue 28, F2) -----

def test_every_oracle_figure_is_named_and_none_is_written_without_oracle(tmp_path, capsys):
    """An oracle run's summary.json names, file by file, every figure computed from the private records
    without noise, each of which is there, and report.html says so; the same run with --no-oracle writes
    none of them: no listed key or column, no psi.png, and not one of the oracle run's ψ values, θ* or
    own-data ψ anywhere in its files (the oracle run's own files, a wrong input, hold them all)."""
    import json

    from helpers import MARKET, small_toml

    path = tmp_path / "m.toml"
    path.write_text(small_toml(name="m", seed=4, learner={"iterations": 60}, market=MARKET,
                               output={"plots": True, "metric_points": 10}), encoding="utf-8")
    with_oracle, without = tmp_path / "yes", tmp_path / "no"
    assert main(["run", str(path), "--out", str(with_oracle), "--quiet"]) == 0
    assert main(["run", str(path), "--out", str(without), "--quiet", "--no-oracle"]) == 0
    out = capsys.readouterr().out
    assert "psi           not written (--no-oracle" in out and "oracle measurements)" in out
    full, public = (json.loads((d / "summary.json").read_text()) for d in (with_oracle, without))
    listed = full["oracle"]
    assert listed["written"] and not public["oracle"]["written"]
    assert {"psi_final", "theta_star", "own_psi_median", "owners_benefiting", "psi_simulated"} <= set(
        listed["summary.json"])
    assert all(k in full for k in listed["summary.json"])
    assert not any(k in public for k in listed["summary.json"])
    rows = {d: list(csv.DictReader((d / "owners.csv").open())) for d in (with_oracle, without)}
    assert {"own_psi", "benefits"} <= set(rows[with_oracle][0])
    assert not {"own_psi", "benefits"} & set(rows[without][0])
    assert (without / "metrics.csv").read_text().splitlines()[0] == "k,time"
    assert (with_oracle / "psi.png").exists() and not (without / "psi.png").exists()
    report = (with_oracle / "report.html").read_text()
    assert "Oracle measurements (computed from the owners&#x27; private records" in report
    secrets = [repr(full["psi_final"]), repr(full["psi_zero"]), repr(full["theta_star"][0]),
               rows[with_oracle][0]["own_psi"], repr(full["f_star"])]
    for directory, present in ((with_oracle, True), (without, False)):
        text = "".join(p.read_text(errors="replace") for p in directory.iterdir() if p.suffix != ".png")
        assert all((s in text) == present for s in secrets), directory


def test_no_oracle_refuses_what_it_cannot_honour(tmp_path, capsys):
    """A market fitted on pilot runs over the private records is itself an oracle; --no-oracle is a
    single run's: both are one line, exit 2, nothing written."""
    from helpers import MARKET, small_toml

    market = {**{k: v for k, v in MARKET.items() if k != "forecast"},
              "pilots": {"data": "owners", "levels": 2, "subsets": 1, "replications": 1}}
    path = tmp_path / "m.toml"
    path.write_text(small_toml(name="m", seed=4, learner={"iterations": 60}, market=market,
                               output={"plots": False}), encoding="utf-8")
    assert main(["run", str(path), "--out", str(tmp_path / "a"), "--quiet", "--no-oracle"]) == 2
    assert "market.pilots.data = 'owners'" in capsys.readouterr().err
    assert main(["run", str(path), "--out", str(tmp_path / "b"), "--no-oracle", "--replications", "2"]) == 2
    assert "--no-oracle writes a single run" in capsys.readouterr().err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
