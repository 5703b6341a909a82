"""The bundled example scenarios: shipped in the package, listed by ``dpmarket scenarios``, run by
name from any directory; a file always wins over a name, and an unknown name is one line."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from helpers import ROOT, answers_outside_membership

from dpmarket.cli import main
from dpmarket.errors import ScenarioError
from dpmarket.scenario import bundled
from dpmarket.scenario.loading import load


def test_the_package_holds_exactly_the_repositorys_scenarios():
    repo = sorted(p.relative_to(ROOT / "scenarios").with_suffix("").as_posix()
                  for p in (ROOT / "scenarios").rglob("*.toml"))
    assert [e.name for e in bundled.examples()] == repo and "ny_hospitals" in repo
    assert (bundled.directory() / "ny_hospitals.toml").read_bytes() == (
        ROOT / "scenarios" / "ny_hospitals.toml").read_bytes()


@pytest.mark.parametrize("example", bundled.examples(), ids=lambda e: e.name)
def test_every_bundled_scenario_validates_or_names_its_missing_records(example):
    assert example.description  # the listing shows one line for each
    try:
        load(example.path)
    except ScenarioError as err:  # a real-data example whose records are not on this machine
        assert example.data is not None and err.key == "data.path" and "--set data.path" in str(err)


def test_a_name_finds_the_bundled_file_and_a_file_wins_over_a_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert bundled.find("ny_hospitals") == bundled.directory() / "ny_hospitals.toml"
    assert bundled.find("paper/many_banks.toml") == bundled.directory() / "paper" / "many_banks.toml"
    (tmp_path / "ny_hospitals").write_text("name = 'mine'\n")
    assert bundled.find("ny_hospitals") == Path("ny_hospitals")


def test_an_unknown_name_lists_the_bundled_ones(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["run", "ny_hospital"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "ny_hospital: no such file, nor a bundled scenario" in err
    assert all(e.name in err for e in bundled.examples())
    assert not (tmp_path / "outputs").exists()


def test_a_repository_path_used_elsewhere_points_to_the_name(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["validate", "scenarios/paper/ny_hospitals.toml"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "dpmarket run paper/ny_hospitals" in err


def test_commands_take_a_name_from_any_directory(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["validate", "fraud_svm", "--quiet", "--set", "learner.iterations=5"]) == 0
    assert capsys.readouterr().out == ""
    assert main(["run", "lending_banks", "--quiet", "--set", "data.records=500",
                 "--set", "learner.iterations=20", "--set", "output.plots=false"]) == 0
    assert (tmp_path / "outputs" / "lending_banks-seed2018" / "summary.json").is_file()


def test_missing_records_are_one_line_saying_how_to_point_to_them(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["validate", "lending_grades", "--set", "data.path=absent.csv"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "data.path" in err and "absent.csv" in err
    assert "point to the records with --set data.path=FILE" in err


def test_the_listing_describes_each_example_and_flags_unbundled_records(capsys):
    assert main(["scenarios"]) == 0
    out = capsys.readouterr().out
    for e in bundled.examples():
        assert f"  {e.name} " in out and e.description in out
    assert out.count("not bundled") == sum(e.data is not None for e in bundled.examples()) > 0


# --- bundled scenarios crossed with options (issue 24) ------------------------------------------------

def mobile_market(tmp_path: Path, **market) -> Path:
    """mobile_devices with a [market] (its privacy.epsilon removed: the market sets the budgets)."""
    text = (bundled.directory() / "mobile_devices.toml").read_text(encoding="utf-8")
    lines = [line for line in text.splitlines() if not line.startswith("epsilon = ")]
    terms = {"price": 1.0, "value": 1000.0, "budget": 100.0, "epsilon_min": 1.0, "epsilon_max": 100.0,
             "forecast": "law", **market}
    body = "\n".join(f"{k} = {v!r}".replace("'", '"') for k, v in terms.items())
    path = tmp_path / "mobile_market.toml"
    costs = 'costs = { kind = "quadratic", coef = 0.1 }'
    path.write_text("\n".join(lines) + f"\n\n[market]\n{body}\n{costs}\n", encoding="utf-8")
    return path


PROCUREMENT = ["--set", "privacy.mechanism='gaussian'", "--set", "privacy.accountant='basic'", "--set",
               "privacy.delta=1e-6"]
DYNAMIC = ["--set", "privacy.mechanism='laplace'", "--set", "privacy.accountant='pld'", "--set",
           "privacy.delta=1e-6"]


@pytest.mark.parametrize("market, options, memory, what", [
    ({"policy": "procurement"}, PROCUREMENT, "2G", "procurement on 10,000 owners"),
    ({"policy": "stackelberg", "mode": "dynamic", "rule": "progress", "payment": "on_compute"}, DYNAMIC,
     "512M", "the forecast's check of 10,000 owners"),
])
def test_mobile_devices_with_a_market_that_cannot_fit_is_one_line(tmp_path, monkeypatch, capsys, market,
                                                                  options, memory, what):
    """Full size, where its arrays cannot fit (DPMARKET_MEMORY: the same answer on every machine): a
    traceback (MemoryError) or no result before; now refused at once with the size it needs."""
    monkeypatch.setenv("DPMARKET_MEMORY", memory)
    path = mobile_market(tmp_path, **market)
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet", *options]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and what in err and "would need at least" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_mobile_devices_with_procurement_and_gaussian_basic_answers_gives_a_result(tmp_path, capsys):
    """The same options on 200 phones (on this machine the 10,000 of the red team's case ran 39 min of
    wall time under load, 11.6 GB at peak, with no traceback)."""
    path = mobile_market(tmp_path, policy="procurement")
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out), "--quiet", *PROCUREMENT, "--set", "data.owners=200",
                 "--set", "learner.iterations=300", "--set", "output.plots=false"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["policy"] == "procurement" and summary["participants"] > 0 and summary["iterations"] > 0


@pytest.mark.slow
def test_mobile_devices_in_a_dynamic_progress_market_ends(tmp_path):
    """The dynamic options on 200 phones, pay on compute, Laplace + PLD: the run ends (its T, or the
    stall rule), and every answer is a member's."""
    path = mobile_market(tmp_path, policy="posted_price", mode="dynamic", rule="progress",
                         payment="on_compute", value=100.0)
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out), "--quiet", *DYNAMIC, "--set", "data.owners=200",
                 "--set", "learner.iterations=100", "--set", "output.plots=false"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stop_reason"] in ("iterations", "budgets exhausted") or summary["stop_reason"].startswith(
        "stalled")
    with open(out / "events.csv", newline="") as f:
        assert answers_outside_membership(csv.DictReader(f)) == []


def test_market_scenarios_validate():
    from dpmarket.scenario.loading import load

    root = ROOT / "scenarios"
    banks = load(root / "banks_market.toml")
    ny = load(root / "ny_hospitals.toml")
    assert banks.market.policy == "stackelberg" and ny.market.forecast is not None
