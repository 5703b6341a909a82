"""Runaway schedules: an owner that spent its budget leaves (ideal network and engine alike), a run
ends as soon as no owner can ever answer again, the engine sleeps through periods when no owner
that could answer is online, and a huge T costs memory in proportion to the recorded points."""

from __future__ import annotations

import json
import time
import tracemalloc
from collections import Counter

import numpy as np
import pytest
import simpy
from helpers import chi2_accepts, ks_accepts, proportion_within, tiny
from scipy import stats

from dpmarket.cli import main
from dpmarket.output.figures.run import RunFigures, _cell_counts
from dpmarket.rng import stream
from dpmarket.runs.run import execute
from dpmarket.schedule import sequence
from dpmarket.schedule.protocol import record_points
from tests.schedule.sim.test_engine import build, run

LEAVES = "budget spent: stops taking part"


# -- the ideal network -----------------------------------------------------------------------

def ideal(rates: list[float], caps: list[int | None], iterations: int, seed: int = 3):
    """Owners with these clock rates and answer caps (None: m_i = T, the owner never runs out)."""
    owners = [{"clock_rate": r, "cap": iterations if c is None else c}
              for r, c in zip(rates, caps, strict=True)]
    return tiny(seed=seed, data={"owners": len(rates)}, owners=owners, privacy={"split": "capped"},
                learner={"iterations": iterations, "rho": 1.0})


def test_an_exhausted_owner_with_a_fast_clock_leaves_the_ideal_network(tmp_path):
    """Owner 0 ticks 100 times as fast as the others and may answer 5 times: it refuses once and
    leaves; the others carry the run to T (before, it was asked ~100 times per update)."""
    s = ideal([100.0, 1.0, 1.0], [5, None, None], 400)
    rows, result = run(tmp_path, s)
    assert result.stop_reason == "iterations" and result.training.k == 400
    kinds = Counter((r.kind, r.owner) for r in rows)
    assert kinds["refusal", 0] == 1 and kinds["refusal", 1] == kinds["refusal", 2] == 0
    for i in range(3):  # nobody is asked past its budget: every query is answered
        assert kinds["query", i] == kinds["response", i] == result.owners[i].ledger.answers
    assert kinds["response", 0] == 5 and result.owners[0].epsilon_spent == result.owners[0].epsilon
    leave = next(r for r in rows if r.kind == "refusal")
    assert leave.detail == LEAVES and leave.eps == result.owners[0].epsilon
    assert not any(r.owner == 0 and r.time > leave.time for r in rows)
    assert len(rows) == 3 * 400 + 1  # query, response, update per update, and one leave


def test_after_an_owner_leaves_the_others_keep_the_law_of_their_clocks(tmp_path):
    """Once owner 0 (rate 50) has left, updates come at the ticks of the others' superposed clocks:
    gaps ~ Exp(1 + 3) and owner 2 serves 3/4 of them. The tests reject the rate with owner 0 in."""
    s = ideal([50.0, 1.0, 3.0], [3, None, None], 4000, seed=8)
    rows, _ = run(tmp_path, s)
    gone = next(r.time for r in rows if r.kind == "refusal")
    updates = [r for r in rows if r.kind == "update" and r.time > gone]
    gaps = np.diff([r.time for r in updates])
    assert len(gaps) > 3000
    assert ks_accepts(gaps, stats.expon(scale=1 / 4.0))
    assert not ks_accepts(gaps, stats.expon(scale=1 / 54.0))
    counts = Counter(r.owner for r in updates)
    assert chi2_accepts([counts[1], counts[2]], [0.25, 0.75])
    assert not chi2_accepts([counts[1], counts[2]], [1 / 3, 2 / 3])


def test_the_ideal_network_keeps_its_draws_until_an_owner_leaves(tmp_path):
    """Nobody leaves (m_i = T): every update is the papers' draw, Exp(Σλ) on the "clocks" stream
    and the owner from one uniform of the "selection" stream against the cumulative rates."""
    s = ideal([1.0, 2.0, 3.0], [None, None, None], 300)
    rows, result = run(tmp_path, s)
    clocks, selection = stream(s.seed, "clocks"), stream(s.seed, "selection")
    cumulative, now, expected = np.cumsum([1.0, 2.0, 3.0]) / 6.0, 0.0, []
    for _ in range(300):
        now += clocks.exponential(1.0 / 6.0)
        expected.append((now, int(np.searchsorted(cumulative, selection.random(), side="right"))))
    assert [(r.time, r.owner) for r in rows if r.kind == "update"] == expected
    assert result.stop_reason == "iterations"


# -- the engine --------------------------------------------------------------------------------

def capped_others(network: dict, outage_end: float):
    """Owner 0 offline from the start until ``outage_end``; each may answer 3 times (no collisions:
    every answer becomes an update)."""
    return build({**network, "collisions": False}, owners=3, iterations=1000, privacy={"split": "capped"},
                 specs=[{"outages": [{"start": 0.0, "end": outage_end}], "cap": 3},
                        {"cap": 3}, {"cap": 3, "clock_rate": 20.0}])


def test_a_run_stops_when_no_owner_can_answer_before_the_horizon(tmp_path):
    """Owner 0 is offline until 10⁶, past the horizon 10⁵: once 1 and 2 spent their budgets no owner
    can ever answer again, and the run stops there instead of ticking to the horizon (its reason
    names the owner that is away, not only the budgets)."""
    s = capped_others({"mode": "request", "transmission_time": 0.01, "horizon": 1e5}, 1e6)
    start = time.process_time()  # this process's CPU: other jobs' load does not count
    rows, result = run(tmp_path, s)
    assert time.process_time() - start < 5.0
    assert result.stop_reason == "no owner online before the horizon" and result.training.k == 6
    assert max(r.time for r in rows) < 100.0 and len(rows) < 2000
    assert not any(r.kind == "request" and r.owner == 0 for r in rows)
    assert sum(r.kind == "refusal" for r in rows) == 2 and all(
        r.detail == LEAVES for r in rows if r.kind == "refusal")


def test_the_stop_reason_names_an_owner_offline_past_the_horizon(tmp_path):
    s = build({"mode": "request", "transmission_time": 0.01, "horizon": 50.0}, owners=2,
              specs=[{"outages": [{"start": 3.0, "end": 80.0}]}, {"outages": [{"start": 4.0, "end": 60.0}]}])
    rows, result = run(tmp_path, s)
    assert result.stop_reason == "no owner online before the horizon"
    assert 4.0 <= max(r.time for r in rows) < 4.1  # at most the exchanges already under way
    out = tmp_path / "out"
    path = tmp_path / "s.toml"
    path.write_text(s.to_toml(), encoding="utf-8")
    assert main(["run", str(path), "--out", str(out), "--quiet"]) == 0
    reason = json.loads((out / "summary.json").read_text())["stop_reason"]
    assert reason == "no owner online before the horizon"


def test_without_a_horizon_the_engine_sleeps_until_an_owner_is_back(tmp_path):
    """The same owners with no horizon: owner 0 comes back at 10⁵ and answers. Nothing is logged
    while no owner that could answer is online (before, a tick per time unit: with 10⁹, 1.6 GB)."""
    s = capped_others({"mode": "request", "transmission_time": 0.01}, 1e5)
    start = time.process_time()  # this process's CPU: other jobs' load does not count
    rows, result = run(tmp_path, s)
    assert time.process_time() - start < 5.0 and len(rows) < 2000
    assert result.stop_reason == "budgets exhausted" and result.training.k == 9
    last = max(r.time for r in rows if r.kind == "refusal" and r.owner in (1, 2))
    assert not any(last < r.time < 1e5 for r in rows)
    assert [r.kind for r in rows if r.time >= 1e5][:2] == ["reconnect", "tick"]
    assert sum(r.kind == "response" and r.owner == 0 for r in rows) == 3


def fired_events(monkeypatch) -> list[float]:
    """The time of every event SimPy processes from now on (Environment.step, which run() calls)."""
    times: list[float] = []
    real = simpy.Environment.step

    def step(env: simpy.Environment) -> None:
        times.append(env.peek())
        real(env)

    monkeypatch.setattr(simpy.Environment, "step", step)
    return times


@pytest.mark.parametrize("outage_end", [1e4, 1e9])
def test_nothing_ticks_while_every_owner_is_offline(tmp_path, monkeypatch, outage_end):
    """The runaway of issue 24: owner 0 has exponential dropout periods (20 on, 2 off) and an outage
    from 0 to ``outage_end``; the others spend their budgets early. While no owner can answer, no
    clock ticks and the periods of owner 0, which its outage makes invisible, do not alternate
    through it: a handful of events (each sleeping clock's last tick, the periods' pause) whatever
    the outage's length (before: one event per period, 10⁸ for 10⁹, 148 s)."""
    s = capped_others({"mode": "request", "transmission_time": 0.01,
                       "dropout": {"mean_online": 20.0, "mean_offline": 2.0}}, outage_end)
    times = fired_events(monkeypatch)
    start = time.process_time()
    rows, result = run(tmp_path, s)
    assert time.process_time() - start < 5.0
    assert result.training.k == 9 and sum(r.kind == "response" and r.owner == 0 for r in rows) == 3
    asleep = max(r.time for r in rows if r.kind == "refusal" and r.owner in (1, 2))
    assert asleep < 1000.0
    during = [t for t in times if asleep < t < outage_end]
    assert len(during) <= 4, during
    assert not any(asleep < r.time < outage_end for r in rows)  # nothing logged, no tick row


@pytest.mark.slow
def test_periods_paused_by_an_outage_resume_with_their_law(tmp_path):
    """2,000 owners with periods 2 on, 1 off (offline a third of the time) and an outage [0, w): at
    w each is offline with the periods' stationary probability 1/3 (the chain is stationary from
    0 on, and the pause must keep it so), then comes back after Exp(1) (memoryless). Resuming in
    the state of the pause instead would leave 2/3 offline; both tests reject that and Exp(1/2)."""
    owners, w = 2000, 50.0
    s = build({"mode": "request", "clock_rate": 1e-6, "horizon": w + 200.0,
               "dropout": {"mean_online": 2.0, "mean_offline": 1.0},
               "outages": [{"start": 0.0, "end": w}]}, owners=owners, seed=5)
    rows, _ = run(tmp_path, s)
    back = {r.owner for r in rows if r.kind == "reconnect" and r.time == w}
    offline = owners - len(back)
    assert proportion_within(offline, owners, 1 / 3)
    assert not proportion_within(offline, owners, 2 / 3)
    later = {}
    for r in rows:
        if r.kind == "reconnect" and r.owner not in back and r.time > w:
            later.setdefault(r.owner, r.time - w)
    waits = np.array(list(later.values()))
    assert len(waits) > 0.95 * offline
    assert ks_accepts(waits, stats.expon(scale=1.0))
    assert not ks_accepts(waits, stats.expon(scale=2.0))


def test_a_clock_restarts_with_its_law_after_the_engine_slept(tmp_path):
    """One owner, offline 9 of every 10 time units: the engine sleeps through each outage and the
    first tick after the owner is back comes Exp(λ) later (memoryless); Exp(λ/2) is rejected."""
    rate, outages = 2.0, [{"start": 10.0 * k + 1.0, "end": 10.0 * (k + 1)} for k in range(600)]
    s = build({"mode": "request", "clock_rate": rate, "transmission_time": 1e-4, "horizon": 6000.0},
              specs=[{"outages": outages}])
    rows, _ = run(tmp_path, s)
    backs = [r.time for r in rows if r.kind == "reconnect"]
    ticks = np.array([r.time for r in rows if r.kind == "tick"])
    delays = []
    for t in backs:
        after = ticks[ticks > t]
        if len(after) and after[0] < t + 1.0:  # the owner is online until t + 1
            delays.append(after[0] - t)
    assert len(delays) > 500
    # censored at 1: compare to Exp(λ) given < 1, i.e. a truncated exponential
    assert ks_accepts(np.array(delays), stats.truncexpon(b=rate * 1.0, scale=1 / rate))
    assert not ks_accepts(np.array(delays), stats.truncexpon(b=rate / 2, scale=2 / rate))
    assert not any(10.0 * k + 1.0 < r.time < 10.0 * (k + 1) for r in rows if r.kind == "tick"
                   for k in [int(r.time // 10)])


def test_an_owner_that_left_stops_going_offline_and_back(tmp_path):
    """A departed owner's availability no longer matters: no dropout or reconnect rows after it left."""
    s = build({"mode": "request", "clock_rate": 3.0, "transmission_time": 0.01, "horizon": 200.0,
               "dropout": {"mean_online": 2.0, "mean_offline": 1.0}}, owners=2, iterations=10_000,
              privacy={"split": "capped"}, specs=[{"cap": 2}, {}])
    rows, result = run(tmp_path, s)
    left = next(r.time for r in rows if r.kind == "refusal" and r.owner == 0)
    assert not any(r.owner == 0 and r.time > left for r in rows)
    assert any(r.kind == "dropout" and r.owner == 1 and r.time > left for r in rows)
    assert result.network.downtime[0] <= left


# -- a huge T ----------------------------------------------------------------------------------

def test_the_recorded_points_do_not_grow_with_t():
    assert len(record_points(10**12, 200)) == 201


@pytest.mark.parametrize("network, privacy", [
    ({"mode": "request", "horizon": 300.0}, {"split": "horizon"}),
    ({"mode": "request", "horizon": 300.0}, {"split": "capped"}),
    ({}, {"split": "capped", "cap": 300}),  # the ideal network, until the budgets are spent
])
def test_a_huge_t_costs_memory_in_proportion_to_the_recorded_points(network, privacy):
    """T = 2·10⁷ (a 10⁹ works alike, but a regression would then allocate gigabytes): nothing is
    allocated per planned iteration (before: a T-entry list of flags, a T-term binomial pmf for
    the capped split, and i_k of every update). Some hundred updates stay far under 50 MB."""
    s = tiny(learner={"iterations": 2 * 10**7, "rho": 1.0}, privacy=privacy, network=network,
             output={"metric_points": 200, "plots": False})
    tracemalloc.start()
    try:
        result = execute(s)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert 100 < result.training.k < 10**4 and result.stop_reason in ("horizon", "budgets exhausted")
    assert peak < 50e6, peak
    assert not result.training.sequence.exact and len(result.training.sequence) == result.training.k
    assert result.training.metrics.k[0] == 0 and result.training.metrics.k[-1] == result.training.k


def test_counted_updates_match_the_exact_sequence(monkeypatch):
    """Beyond EXACT planned updates i_k is counted per (row, block of k): the counts are those of the
    exact sequence, row by row and block by block, and the figure's cells keep every update."""
    rng = np.random.default_rng(4)
    ids, owners, T = [0, 2, 5, 7, 9], 10, 5_000
    slots = rng.integers(0, len(ids), 3_001).tolist()
    monkeypatch.setattr(sequence, "CHUNK", 97)
    exact = sequence.OwnerSequence(ids, owners, T)
    monkeypatch.setattr(sequence, "EXACT", 1_000)
    counted = sequence.OwnerSequence(ids, owners, T)
    for s in slots:
        exact.append(s)
        counted.append(s)
    assert exact.exact and not counted.exact and len(counted) == len(exact) == 3_001
    density = counted.figure()["density"]
    block = density["block"]
    want = np.zeros((owners, -(-3_001 // block)), int)
    for k, s in enumerate(slots):
        want[ids[s], k // block] += 1
    assert np.array_equal(np.array(density["counts"]), want)  # 10 owners: one row each
    dots = RunFigures("t", [0], [1.0], 1.0, 1.0, exact.figure()["sequence"], owners)
    cells, last = _cell_counts(RunFigures("t", [0], [1.0], 1.0, 1.0, [], owners, density))
    reference, _ = _cell_counts(dots)
    assert 3_001 <= last < 3_001 + last / cells.shape[1]  # the last cell ends within its width
    assert cells.sum() == reference.sum() == 3_001
    assert np.array_equal(cells.sum(axis=1), reference.sum(axis=1))
    with pytest.raises(ValueError, match="counted"):
        np.asarray(counted)
