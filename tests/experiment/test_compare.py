"""Policy comparisons (dpmarket/experiment/compare.py): the policies share seeds and match single runs;
the market command writes the comparison and refuses bad policies in one line; its property table
(``market --properties``): what it writes, that it leaves the comparison itself unchanged to the byte,
and that the notebook API returns the same tables."""

from __future__ import annotations

import csv
import json

import pandas as pd
import pytest
from helpers import budgeted_market_toml, market_scenario

import dpmarket
from dpmarket.cli import main
from dpmarket.experiment import compare
from dpmarket.runs import run

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


def test_the_comparison_shares_seeds_and_matches_single_runs():
    s = market_scenario(budget=3.0)
    c = compare.compare(s, ["posted_price", "take_it_or_leave_it", "auction"], replications=1)
    assert c.seeds == [s.seed]
    for r in c.results:
        single = run.execute(s.model_copy(update={"market": s.market.model_copy(
            update={"policy": r.outcome.policy})}))
        assert r.psi[0] == single.psi_final  # same seed, same members, same ε: the same run
    many = compare.compare(s, ["posted_price", "auction"], replications=3)
    assert len(set(many.seeds)) == 3 and all(len(r.psi) == 3 for r in many.results)


SCENARIO = budgeted_market_toml()


def test_market_command_writes_the_comparison(tmp_path, capsys):
    path = tmp_path / "m.toml"
    path.write_text(SCENARIO)
    out = tmp_path / "cmp"
    policies = "posted_price,take_it_or_leave_it,procurement,stackelberg,auction,marginal"
    assert main(["market", str(path), "--policies", policies, "--replications", "2", "--out", str(out)]) == 0
    assert {"policies.csv", "market.csv", "psi_payment.png", "epsilons.png", "summary.json",
            "scenario.toml", "report.html"} <= {p.name for p in out.iterdir()}
    page = (out / "report.html").read_text(encoding="utf-8")
    assert page.count("base64,") == 2 and "src=\"http" not in page
    assert all(f"<td class=\"text\">{name}</td>" in page for name in policies.split(","))
    assert "market.csv: every owner under every policy" in page
    rows = list(csv.DictReader((out / "policies.csv").open()))
    assert [r["policy"] for r in rows] == policies.split(",")
    assert all(float(r["total_payment"]) <= 3.0 + 1e-9 for r in rows)
    assert len(list(csv.DictReader((out / "market.csv").open()))) == 6 * 3
    assert "posted_price" in capsys.readouterr().out


@pytest.mark.parametrize("args, needle", [
    (["--policies", "posted_price,bogus"], "bogus"),
    (["--policies", "record_price"], "market.price_per_record"),
])
def test_market_command_errors_are_one_line_and_write_nothing(tmp_path, capsys, args, needle):
    path = tmp_path / "m.toml"
    path.write_text(SCENARIO)
    assert main(["market", str(path), "--out", str(tmp_path / "cmp"), *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err and "Traceback" not in err
    assert not (tmp_path / "cmp").exists()
