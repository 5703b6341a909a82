"""Sizes that cannot fit (issue 24): refused when the scenario is validated, in one line naming the key,
its value and the memory it would need, before any data is built — and never a size that fits: each
term is a lower bound of what a run really allocates (checked against tracemalloc's peak)."""

from __future__ import annotations

import time
import tracemalloc

import pytest
from helpers import tiny

from dpmarket.cli import main
from dpmarket.experiment import compare
from dpmarket.runs.run import execute
from dpmarket.scenario import sizes
from dpmarket.scenario.bundled import examples, find
from dpmarket.scenario.loading import load


@pytest.fixture(autouse=True)
def sixteen_gigabytes(monkeypatch):
    """The same answers on every machine: 16 GiB to fit in."""
    monkeypatch.setenv("DPMARKET_MEMORY", "16G")


@pytest.mark.parametrize("command, sets, key, value", [
    ("run", ["data.records=1000000000000"], "data.records", "1000000000000"),
    ("run", ["data.features=1000000"], "data.features", "1000000"),
    ("run", ["network.channels=1000000000"], "network.channels", "1000000000"),
    ("run", ["data.owners=10000000", "owners=[]"], "data.owners", "10000000"),
    ("market", ["data.owners=30", "market.shapley_samples=1000000000"], "market.shapley_samples",
     "1000000000"),
    ("market", ["data.owners=40000"], "data.owners", "40000"),
])
def test_an_impossible_size_is_one_line_naming_the_key_and_the_size_it_needs(tmp_path, capsys, command, sets,
                                                                              key, value):
    """Each was a MemoryError traceback deep inside numpy (or hours of swapping for 10⁷ owners)."""
    scenario = "banks_market" if command == "market" else "ny_hospitals"
    args = [command, scenario, "--out", str(tmp_path / "out"), "--quiet"]
    if command == "market":
        args += ["--policies", "marginal" if "shapley" in key else "procurement"]
    for text in sets:
        args += ["--set", text]
    start = time.process_time()
    assert main(args) == 2
    assert time.process_time() - start < 2.0  # refused before any data is built
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f": {key} = {value}: " in err and "would need at least" in err
    assert "DPMARKET_MEMORY allows 16 GiB" in err
    assert not (tmp_path / "out").exists()


def test_twenty_thousand_owners_in_a_dynamic_market_are_refused_where_they_cannot_fit(monkeypatch):
    monkeypatch.setenv("DPMARKET_MEMORY", "2G")
    with pytest.raises(ValueError, match=r"data.owners = 20000: the forecast's check of 20,000 owners"):
        load(find("ny_hospitals"), ["data.owners=20000", "owners=[]", 'market.mode="dynamic"'])


def test_every_bundled_scenario_fits():
    for example in examples():
        if "lending_grades" in example.name or "sparcs" in example.name:
            continue  # their tables are read from ../shared/data (a table's owners count only once read)
        load(str(example.path))


@pytest.mark.parametrize("case", [
    {"data": {"owners": 2000, "records": 50, "features": 3}},
    {"data": {"owners": 1, "records": 400_000, "features": 2}},
    {"data": {"owners": 2, "records": 500, "features": 150}},
    {"data": {"owners": 3, "records": 200, "features": 3},
     "network": {"mode": "request", "channels": 20_000, "transmission_time": 0.01}},
], ids=["owners", "records", "features", "channels"])
def test_the_terms_are_lower_bounds_of_what_a_run_allocates(case):
    """tracemalloc's peak of the whole run (data, owners, training) is above every term: a
    scenario that fits is never refused."""
    s = tiny(learner={"iterations": 50}, output={"plots": False, "metric_points": 5}, **case)
    estimate = max(term[2] for term in sizes.size_terms(s))
    tracemalloc.start()
    try:
        execute(s)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert estimate <= peak, (estimate, peak)


def test_procurement_and_shapley_terms_are_lower_bounds_of_what_settling_allocates():
    s = tiny(data={"owners": 300, "records": 50, "features": 3}, learner={"iterations": 50},
             market={"policy": "procurement", "budget": 50.0, "price": 1.0, "epsilon_min": 0.5,
                     "shapley_samples": 400, "costs": {"kind": "quadratic", "coef": 0.5},
                     "offer_epsilon": 2.0, "forecast": "law"})
    for policy in ("procurement", "marginal"):
        estimate = max(t[2] for t in sizes.market_terms(s, 300, [policy]))
        tracemalloc.start()
        try:
            compare.compare(s, [policy])
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert estimate <= peak, (policy, estimate, peak)
