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


# --- issue 43: the owners' state with what each keeps, owners' own records, answer caps, pilots -----------

@pytest.mark.parametrize("sets, needle", [
    (["data.owners=10000000", "data.records=10"],
     "data.owners = 10000000: the state of 10,000,000 owners keeping a 10 x 10 matrix each (X'X) would need "
     "at least 26.8 GiB"),
    (["owners=[{records=100000000000000}]"],
     "owners.0.records = 100000000000000: the largest owner's 100,000,000,000,000 records of 10 features, "
     "generated at once would need at least 8.53 PiB"),
    (["learner.iterations=9007199254740992", "privacy.split='capped'"],
     "learner.iterations = 9007199254740992: an answer cap from Binomial(9,007,199,254,740,992, share)'s pmf "
     "(3,579,139,413 terms) would need at least 80 GiB"),
    (["market.pilots.replications=1000000000"],
     "market.pilots.replications = 1000000000: a forecast calibrated by 15,000,000,000 pilot runs (5 budgets "
     "x 3 subsets x 1,000,000,000 replications) would need at least 2.05 TiB"),
])
def test_sizes_that_ran_for_hours_are_refused_when_validated(capsys, sets, needle):
    """10^7 owners of 10 records (57 GB at tracemalloc's 5.8 kB per owner) ran for over a minute before
    anything failed: the owners' state and the X'X each keeps are held together, so their sum is the
    bound. An owner's own records were left out of the largest owner (an OverflowError), the answer caps'
    pmf (80 GiB for 2^53 exchanges: numpy's MemoryError) and the pilots' plan were not counted."""
    scenario = "banks_market" if "pilots" in sets[0] else "lending_banks"
    args = ["validate", scenario, "--quiet"]
    for text in sets:
        args += ["--set", text]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert f": {needle} of memory; DPMARKET_MEMORY allows 16 GiB" in err and err.count("\n") == 1, err


def test_the_answer_caps_and_pilots_terms_are_lower_bounds_of_what_they_allocate():
    from dpmarket.privacy.mechanisms import binomial_quantile
    from dpmarket.runs.pilots import pilot_plan

    s = tiny(data={"owners": 3, "records": 50, "features": 3}, learner={"iterations": 10**11},
             privacy={"split": "capped"})
    (term,) = sizes.cap_terms(s, 3)
    tracemalloc.start()
    try:
        binomial_quantile(0.9, 10**11, 1 / 3)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert 0 < term[2] <= peak, (term, peak)
    s = tiny(data={"owners": 40, "records": 50, "features": 3},
             market={"policy": "posted_price", "price": 1.0, "pilots": {"levels": 10, "replications": 20}})
    term = sizes.pilot_term(s.market.pilots, 40)
    tracemalloc.start()
    try:
        pilot_plan(s, 40)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert 0 < term[2] <= peak, (term, peak)
