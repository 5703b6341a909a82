"""The market command's property table (``market --properties``): what it writes, that it leaves the
comparison itself unchanged to the byte, and that the notebook API returns the same tables."""

from __future__ import annotations

import csv
import json

import pandas as pd
from helpers import budgeted_market_toml

import dpmarket
from dpmarket.cli import main

POLICIES = "posted_price,record_price,take_it_or_leave_it,procurement,stackelberg,auction,marginal"


def scenario_file(tmp_path):
    path = tmp_path / "m.toml"
    path.write_text(budgeted_market_toml().replace("budget = 3.0", "budget = 3.0\nprice_per_record = 0.01"))
    return path


def test_properties_are_written_beside_an_unchanged_comparison(tmp_path, capsys):
    path = scenario_file(tmp_path)
    plain, lab = tmp_path / "plain", tmp_path / "lab"
    args = ["market", str(path), "--policies", POLICIES, "--replications", "2"]
    assert main([*args, "--out", str(plain)]) == 0
    assert main([*args, "--out", str(lab), "--properties"]) == 0
    out = capsys.readouterr().out
    assert "efficiency" in out and "r(pay,Shap)" in out
    for name in ("policies.csv", "market.csv", "scenario.toml", "psi_payment.png", "epsilons.png"):
        assert (plain / name).read_bytes() == (lab / name).read_bytes(), name  # the comparison itself
    assert not {"properties.csv", "owner_properties.csv"} & {p.name for p in plain.iterdir()}
    assert "properties" not in json.loads((plain / "summary.json").read_text())
    rows = list(csv.DictReader((lab / "properties.csv").open()))
    assert [r["policy"] for r in rows] == POLICIES.split(",")
    assert all(r["within_budget"] == "True" and float(r["ir_violation_share"]) == 0.0 for r in rows)
    assert float(next(r for r in rows if r["policy"] == "auction")["misreport_gain_max"]) <= 1e-6
    owners = list(csv.DictReader((lab / "owner_properties.csv").open()))
    assert len(owners) == 7 * 3
    page = (lab / "report.html").read_text(encoding="utf-8")
    assert "<h2>Properties</h2>" in page and page.count("base64,") == 5
    summary = json.loads((lab / "summary.json").read_text())
    assert summary["properties"] is True and summary["best_welfare"]["method"].startswith("exhaustive")


def test_a_properties_directory_is_not_taken_for_a_plain_comparison(tmp_path, capsys):
    """The default directory of `market --properties` is another than a plain comparison's."""
    path = scenario_file(tmp_path)
    out = tmp_path / "cmp"
    assert main(["market", str(path), "--policies", "posted_price", "--out", str(out)]) == 0
    assert main(["market", str(path), "--policies", "posted_price", "--out", str(out), "--properties"]) == 2
    assert "other settings" in capsys.readouterr().err


def test_the_api_returns_the_commands_property_tables(tmp_path):
    path = scenario_file(tmp_path)
    out = tmp_path / "cmp"
    written = dpmarket.market(path, "posted_price,auction,marginal", replications=2, out=out, properties=True)
    memory = dpmarket.market(path, ["posted_price", "auction", "marginal"], replications=2, properties=True)
    pd.testing.assert_frame_equal(memory.properties, written.properties)
    on_disk = pd.read_csv(out / "properties.csv")
    assert on_disk["efficiency"].tolist() == memory.properties["efficiency"].tolist()
    assert len(memory.owner_properties) == 3 * 3 and (memory.owner_properties["seed"] == 5).all()
    assert dpmarket.market(path, "auction").properties is None
