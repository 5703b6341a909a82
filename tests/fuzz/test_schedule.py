"""Fuzzing the schedules (Hypothesis): random small consortia — 1 to 6 owners, budgets, horizon or
capped splits, clock rates, outages up to t = 10⁹, dropouts, the ideal network or the engine —
must finish with a bounded number of events, every owner within its budget and answer cap, and a
finite model; random markets where owners decline must run and tabulate every owner.

The channel is kept fast next to the clocks (transmission ≤ 10⁻³ at rates ≤ 10), so requests
collide now and then, not for ever: a request that never gets through charges no ε, and such a
run would only end at its horizon (the one schedule the engine does not cut short; not a
privacy matter)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
from helpers import EVERY_LEVER
from hypothesis import given
from hypothesis import strategies as st

from dpmarket.errors import MarketError
from dpmarket.experiment.tables import owner_rows as replicated_owner_rows
from dpmarket.experiment.task import Task, run_task
from dpmarket.output.results import write_run
from dpmarket.output.summary import owner_rows
from dpmarket.runs.run import execute
from dpmarket.scenario.loading import validate
from dpmarket.scenario.schema import POLICIES

EVENTS_PER_UPDATE = 400  # a generous bound on the events a finished run may log per planned update


def outages() -> st.SearchStrategy:
    """No outage, a short one, or one that lasts (up to t = 10⁹)."""
    window = st.tuples(st.floats(0.0, 50.0), st.sampled_from([0.5, 5.0, 1e3, 1e6, 1e9])).map(
        lambda sw: {"start": sw[0], "end": sw[0] + sw[1]})
    return st.lists(window, max_size=2)


@st.composite
def owner_spec(draw, engine: bool) -> dict:
    spec = {"epsilon": draw(st.sampled_from([0.1, 1.0, 10.0, 100.0])),
            "clock_rate": draw(st.sampled_from([0.1, 1.0, 10.0])),
            "cap": draw(st.one_of(st.none(), st.integers(1, 30)))}
    if engine:
        spec["outages"] = draw(outages())
        if draw(st.booleans()):
            spec["mean_online"], spec["mean_offline"] = draw(st.sampled_from([(5.0, 1.0), (1.0, 1e4)]))
    return {k: v for k, v in spec.items() if v is not None}


@st.composite
def scenarios(draw) -> dict:
    """A raw scenario table: tiny data, T ≤ 120, a random schedule."""
    owners = draw(st.integers(1, 6))
    mode = draw(st.sampled_from(["ideal", "request", "broadcast"]))
    engine = mode != "ideal"
    network: dict = {"mode": mode}
    if engine:
        network["transmission_time"] = draw(st.sampled_from([0.0, 1e-4, 1e-3]))
        network["horizon"] = draw(st.sampled_from([None, 50.0, 500.0, 2e9]))
    if mode == "broadcast":
        network["broadcast_interval"] = draw(st.sampled_from([0.1, 1.0]))
    split = draw(st.sampled_from(["horizon", "capped"]))
    specs = draw(st.lists(owner_spec(engine), min_size=owners, max_size=owners))
    if split == "horizon":  # caps are the capped split's
        specs = [{k: v for k, v in spec.items() if k != "cap"} for spec in specs]
    return {"name": "fuzz", "seed": draw(st.integers(0, 2**16)),
            "data": {"owners": owners, "records": 60, "features": 2},
            "learner": {"iterations": draw(st.integers(1, 120)), "rho": 1.0},
            "privacy": {"split": split}, "network": network, "owners": specs,
            "output": {"metric_points": 10, "plots": False}}


def check_invariants(result) -> None:
    """No owner past its budget or cap; a finite model and finite ψ at every recorded point."""
    for o in result.owners:
        assert o.ledger.spent <= o.ledger.budget and o.epsilon_spent <= o.epsilon
        assert o.ledger.answers <= o.answers_allowed
    assert np.all(np.isfinite(result.training.learner.model))
    assert np.all(np.isfinite(result.training.metrics.psi))


@given(scenarios())
def test_random_schedules_finish_within_budgets(table):
    scenario = validate(table, "fuzz")
    result = execute(scenario)
    check_invariants(result)
    counts = result.training.log.counts
    assert sum(counts.values()) <= EVENTS_PER_UPDATE * (scenario.learner.iterations + 10) * len(result.owners)
    assert result.training.k <= scenario.learner.iterations
    assert result.stop_reason in ("iterations", "budgets exhausted", "horizon", "no owner left",
                                  "no owner online before the horizon")
    if result.stop_reason == "iterations":
        assert result.training.k == scenario.learner.iterations
    # an owner that left logs one refusal, then nothing: nobody is asked past its budget
    assert counts["refusal"] <= len(result.owners)


COEFS = st.lists(st.sampled_from([0.05, 0.2, 0.5, 2.0, 10.0]), min_size=2, max_size=5)


@given(st.sampled_from(POLICIES), COEFS, st.sampled_from(["ideal", "request"]), st.integers(0, 2**16))
def test_markets_where_owners_decline_run_and_tabulate_every_owner(policy, coefs, mode, seed):
    network = {"mode": mode, **({"transmission_time": 1e-3} if mode == "request" else {})}
    table = {"name": "fuzz", "seed": seed, "data": {"owners": len(coefs), "records": 60, "features": 2},
             "learner": {"iterations": 30, "rho": 1.0}, "network": network,
             "owners": [{"cost_coef": c} for c in coefs], "market": {**EVERY_LEVER, "policy": policy},
             "output": {"metric_points": 5, "plots": False}}
    scenario = validate(table, "fuzz")
    try:
        result = execute(scenario)
    except MarketError:
        return  # nobody joins at these terms: a clear error, tested elsewhere
    check_invariants(result)
    members = result.market.outcome.participates
    rows = owner_rows(result)
    assert [r["participates"] for r in rows] == members.tolist()
    assert len({tuple(r) for r in rows}) == 1  # every row has the same columns
    for r in rows:
        assert (r["epsilon"] > 0) == r["participates"] and (r["answers"] == 0 or r["participates"])
    with tempfile.TemporaryDirectory() as directory:
        write_run(result, Path(directory), plots=False)
    records = run_task(Task(0, scenario, (0, 1), (seed, seed + 1), keep_metrics=False))
    assert records[0]["owners"]["participates"] == members.tolist()
    assert [row[3] for row in replicated_owner_rows(records)] == [r["epsilon"] for r in rows]
