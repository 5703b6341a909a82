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
