"""One run with a market (dpmarket/runs/run.py): owners that decline answer nothing while ψ is judged on
everyone, events name owners by their scenario index, and a market nobody joins is a clear error."""

from __future__ import annotations

import csv

import pytest
from helpers import OFFERED_MARKET, market_scenario, tiny

from dpmarket.output.summary import owner_rows, summary
from dpmarket.runs import run


def test_owners_that_decline_answer_nothing_and_psi_is_judged_on_everyone(tmp_path):
    s = market_scenario(epsilon_min=0.5, price=1.0)  # owner 2: ε = clip(1/10) = 0.5, pays 0.5 < cost 1.25
    result = run.execute(s, tmp_path / "events.csv")
    outcome = result.market.outcome
    assert outcome.participates.tolist() == [True, True, False]
    assert [o.index for o in result.owners] == [0, 1]
    rows = owner_rows(result)
    assert rows[2]["queries"] == 0 and rows[2]["epsilon"] == 0.0 and rows[2]["participates"] is False
    for row, o in zip(rows[:2], result.owners, strict=True):
        assert row["epsilon"] == pytest.approx(2.0) and row["epsilon_spent"] <= o.epsilon
        assert row["payment"] == pytest.approx(2.0) and row["cost"] == pytest.approx(1.0)
        assert row["utility"] == pytest.approx(1.0)
    plain = run.execute(tiny())
    assert result.objective.f_star == plain.objective.f_star  # ψ against the whole consortium
    info = summary(result)
    assert info["participants"] == 2 and info["total_payment"] == pytest.approx(4.0)
    assert info["psi_simulated"] == result.psi_final
    assert info["psi_forecast"] == pytest.approx(0.01 + 2e4 * 2 / 4 / 600**2)
    assert info["learner_surplus"] == pytest.approx(10 * (1 - info["psi_forecast"]) - 4.0)


def test_events_name_owners_by_their_scenario_index_in_a_network_run(tmp_path):
    """Owner 1 (of 0, 1, 2) declines; the engine runs owners 0 and 2 under their own settings."""
    network = {"mode": "request", "transmission_time": 0.01, "loss_probability": 0.05,
               "dropout": {"mean_online": 5.0, "mean_offline": 1.0}}
    s = tiny(market=OFFERED_MARKET, owners=[{}, {"cost_coef": 10.0}, {"clock_rate": 3.0}], network=network)
    result = run.execute(s, tmp_path / "events.csv")
    assert result.market.outcome.participates.tolist() == [True, False, True]
    with (tmp_path / "events.csv").open() as fh:
        events = [(r["kind"], int(r["owner"])) for r in csv.DictReader(fh)]
    assert {owner for _, owner in events} - {-1} == {0, 2}
    rows = owner_rows(result)
    assert [r["queries"] for r in rows] == [events.count(("query", i)) for i in range(3)]
    assert rows[1]["queries"] == 0 and rows[0]["queries"] > 0
    assert rows[2]["clock_rate"] == 3.0 and rows[2]["ticks"] > 2 * rows[0]["ticks"]  # its own clock
    assert sum(r["exchanges"] for r in rows if r["participates"]) == result.training.k


def test_a_market_nobody_joins_is_a_clear_error():
    from dpmarket.errors import MarketError

    with pytest.raises(MarketError, match="no owner takes part"):
        run.execute(market_scenario(price=1e-3))
