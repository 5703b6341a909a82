"""market_timeline.png: drawn for a market in time only, from series that match events.csv."""

from __future__ import annotations

import csv

import pytest
from helpers import answers_outside_membership

from dpmarket.cli import main
from dpmarket.output.results import market_timeline_data, run_and_write
from tests.markets.test_dynamic import REQUEST, WILLING, scenario


def market_rows(path):
    """The market's rows of events.csv, read with the csv module (independently of pandas)."""
    with open(path / "events.csv", newline="") as f:
        return [r for r in csv.DictReader(f) if r["kind"] in {"price", "payment", "join", "leave"}]


@pytest.fixture(scope="module")
def dynamic_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("dyn") / "run"
    s = scenario(REQUEST, WILLING, mode="dynamic", rule="progress", period=0.5, iterations=200, value=1.0)
    run_and_write(s.model_copy(update={"output": s.output.model_copy(update={"plots": True})}), out)
    with open(out / "events.csv", newline="") as f:
        assert answers_outside_membership(csv.DictReader(f)) == []  # every answer a member's
    return out


def test_the_figure_is_drawn_for_a_dynamic_run_and_shown_in_the_report(dynamic_run):
    assert (dynamic_run / "market_timeline.png").read_bytes().startswith(b"\x89PNG")
    assert "The market in time" in (dynamic_run / "report.html").read_text(encoding="utf-8")


def test_a_static_run_draws_no_market_timeline(tmp_path):
    s = scenario(REQUEST, WILLING)
    out = tmp_path / "run"
    run_and_write(s.model_copy(update={"output": s.output.model_copy(update={"plots": True})}), out)
    assert (out / "psi.png").exists() and not (out / "market_timeline.png").exists()
    assert "The market in time" not in (out / "report.html").read_text(encoding="utf-8")


def test_the_drawn_series_match_events_csv(dynamic_run):
    rows, data = market_rows(dynamic_run), market_timeline_data(dynamic_run, "t")
    paid = sum(float(r["amount"]) for r in rows if r["kind"] == "payment")
    prices = [float(r["amount"]) for r in rows if r["kind"] == "price"]
    joined = sum(r["kind"] == "join" for r in rows) - sum(r["kind"] == "leave" for r in rows)
    assert paid > 0 and len(set(prices)) > 1  # a run where the price moves and money flows
    assert data["spend"][-1] == pytest.approx(paid, rel=1e-12)
    assert data["price"][-1] == prices[-1] and data["participants"][-1] == joined
    assert data["time"] == [float(r["time"]) for r in rows]
    with open(dynamic_run / "metrics.csv", newline="") as f:
        assert data["psi"] == [float(r["psi"]) for r in csv.DictReader(f)]


def test_the_timeline_command_draws_and_reports_the_market(dynamic_run, capsys):
    assert main(["timeline", str(dynamic_run), "--to", "5"]) == 0
    printed = capsys.readouterr().out
    rows = [r for r in market_rows(dynamic_run) if float(r["time"]) <= 5]
    paid = sum(float(r["amount"]) for r in rows if r["kind"] == "payment")
    assert f"paid {paid:.4g}" in printed and "market_timeline-to-5.png" in printed
    assert (dynamic_run / "market_timeline-to-5.png").exists()
