"""The SimPy engine: event order on hand-checked cases, and its statistics against closed-form theory.

Statistical checks derive their thresholds from the sample size (chi-square and binomial
standard errors at α = 1e-4 or 5 SE) and each is paired with a wrong parameter it must reject.
"""

from __future__ import annotations

import csv

import numpy as np
import pytest
import simpy
from helpers import chi2_accepts, ks_accepts, mean_within, proportion_within, tiny
from scipy import stats

from dpmarket.errors import ScenarioError
from dpmarket.run import execute
from dpmarket.sim import availability as avail
from dpmarket.sim.channel import Channel


def events(tmp_path, scenario) -> tuple[list[dict], object]:
    path = tmp_path / "events.csv"
    result = execute(scenario, path)
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh)), result


def small(network: dict, owners: int = 1, iterations: int = 3, **extra):
    return tiny(data={"owners": owners, "records": 100, "features": 2},
                learner={"iterations": iterations}, network=network, **extra)


def test_one_exchange_takes_three_hops(tmp_path):
    tau, lat = 0.01, 0.002
    rows, result = events(tmp_path, small({"mode": "request", "transmission_time": tau, "latency": lat}))
    first = [r["kind"] for r in rows].index("request")
    assert rows[first - 1]["kind"] == "tick" and rows[first - 1]["time"] == rows[first]["time"]
    steps = [r for r in rows[first:] if r["kind"] != "tick"][:4]  # the clock keeps ticking meanwhile
    assert [r["kind"] for r in steps] == ["request", "query", "response", "update"]
    t = [float(r["time"]) for r in steps]
    hop = tau + lat
    assert t[1] == pytest.approx(t[0] + hop) and t[2] == pytest.approx(t[1] + hop)
    assert t[3] == pytest.approx(t[2] + hop)
    assert [int(r["k"]) for r in rows if r["kind"] == "update"] == [1, 2, 3]
    assert result.stop_reason == "iterations"


def test_offline_owners_tick_but_never_request(tmp_path):
    scenario = small({"mode": "request", "outages": [{"start": 0.0, "end": 50.0}]})
    rows, _ = events(tmp_path, scenario)
    assert [r["kind"] for r in rows[:1]] == ["dropout"]
    early = [r for r in rows if float(r["time"]) < 50.0]
    assert {r["kind"] for r in early} <= {"dropout", "tick"} and any(r["kind"] == "tick" for r in early)


def test_going_offline_during_an_exchange_loses_it(tmp_path):
    # every hop takes 1.0, so an outage starting 0.5 after a request always hits an exchange
    outages = [{"start": t + 0.5, "end": t + 0.6} for t in range(0, 12)]
    scenario = tiny(data={"owners": 1, "records": 100, "features": 2}, owners=[{"outages": outages}],
                    network={"mode": "request", "transmission_time": 0.25, "latency": 0.25,
                             "horizon": 12.0})
    rows, result = events(tmp_path, scenario)
    losses = [r for r in rows if r["kind"] == "loss"]
    assert losses and all(r["detail"] == "owner went offline" for r in losses)
    assert result.training.k == 0 and result.stop_reason == "horizon"


def test_overlapping_requests_collide_in_pairs(tmp_path):
    scenario = small({"mode": "request", "transmission_time": 0.3, "horizon": 30.0}, owners=2,
                     iterations=10_000)
    rows, result = events(tmp_path, scenario)
    collisions = [r for r in rows if r["kind"] == "collision"]
    assert collisions
    for r in collisions:  # each collided message overlapped one from the other owner
        t, other = float(r["time"]), 1 - int(r["owner"])
        assert any(abs(float(c["time"]) - t) < 0.3 + 1e-12 for c in collisions if int(c["owner"]) == other)
    assert result.network.channels[0].collided == len(collisions)


def test_owners_on_different_channels_never_collide(tmp_path):
    scenario = small({"mode": "request", "transmission_time": 0.3, "channels": 2, "horizon": 30.0},
                     owners=2, iterations=10_000)
    rows, _ = events(tmp_path, scenario)
    assert not [r for r in rows if r["kind"] == "collision"]
    assert {r["channel"] for r in rows if r["kind"] == "request"} == {"0", "1"}


def test_carrier_sense_backs_off_and_busy_learner_drops_requests(tmp_path):
    sensed = small({"mode": "request", "transmission_time": 0.3, "carrier_sense": True, "horizon": 30.0},
                   owners=3, iterations=10_000)
    rows, _ = events(tmp_path, sensed)
    assert any(r["kind"] == "backoff" for r in rows)
    assert any(r["kind"] == "loss" and r["detail"] == "learner busy" for r in rows)


def test_spent_budgets_end_the_run(tmp_path):
    scenario = small({"mode": "request", "transmission_time": 0.01}, owners=2, iterations=100,
                     privacy={"split": "capped", "cap": 3})
    rows, result = events(tmp_path, scenario)
    refusals = [r for r in rows if r["kind"] == "refusal"]
    assert len(refusals) == 2 and result.stop_reason == "budgets exhausted"
    assert result.training.k <= 6
    assert all(float(r["epsilon_spent"]) == 1.0 for r in refusals)


def test_broadcast_slots_idle_collide_and_charge_every_transmitted_answer(tmp_path):
    scenario = small({"mode": "broadcast", "clock_rate": 0.7, "broadcast_interval": 1.0,
                      "transmission_time": 0.1}, owners=3, iterations=40)
    rows, result = events(tmp_path, scenario)
    slots = [float(r["time"]) for r in rows if r["kind"] == "broadcast"]
    assert slots == pytest.approx(np.arange(1, len(slots) + 1))
    assert any(r["kind"] == "idle" for r in rows) and any(r["kind"] == "collision" for r in rows)
    responses = np.bincount([int(r["owner"]) for r in rows if r["kind"] == "response"], minlength=3)
    for o in result.owners:  # collided answers were transmitted: their ε is spent too
        assert o.ledger.answers == responses[o.index]


def test_broadcast_without_collisions_applies_every_response(tmp_path):
    scenario = small({"mode": "broadcast", "clock_rate": 0.7, "broadcast_interval": 1.0,
                      "transmission_time": 0.1, "collisions": False}, owners=3, iterations=40)
    rows, result = events(tmp_path, scenario)
    assert not any(r["kind"] == "collision" for r in rows)
    assert result.training.k == 40
    last = max(float(r["time"]) for r in rows if r["kind"] == "broadcast")
    before = [r for r in rows if float(r["time"]) < last]  # the last slot may stop at T midway
    assert sum(r["kind"] == "response" for r in before) == sum(r["kind"] == "update" for r in before)


def test_same_seed_same_events_and_noise_independent_of_the_network(tmp_path):
    net = {"mode": "request", "transmission_time": 0.05, "latency": 0.01, "loss_probability": 0.1,
           "carrier_sense": True, "channels": 2, "dropout": {"mean_online": 3.0, "mean_offline": 1.0}}
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    execute(small(net, owners=4, iterations=200), a)
    execute(small(net, owners=4, iterations=200), b)
    assert a.read_bytes() == b.read_bytes()
    other = execute(small({**net, "channels": 1}, owners=4, iterations=50))
    base = execute(small(net, owners=4, iterations=50))
    # the first standard Laplace block of each owner does not depend on the channel layout
    for x, y in zip(base.owners, other.owners, strict=True):
        assert np.array_equal(x.noise._buf[0], y.noise._buf[0])


@pytest.mark.parametrize("network,owners,message", [
    ({"mode": "request", "clock_rate": 0.0}, None, "network.clock_rate"),
    ({"mode": "request", "loss_probability": 1.0}, None, "network.loss_probability"),
    ({"mode": "request", "channels": 0}, None, "network.channels"),
    ({"mode": "request", "dropout": {"mean_online": 2.0}}, None, "network.dropout"),
    ({"mode": "request", "outages": [{"start": 5.0, "end": 1.0}]}, None, "network.outages.0.end"),
    ({"mode": "broadcast", "broadcast_interval": 0.1, "transmission_time": 0.2}, None,
     "network.broadcast_interval"),
    ({"latency": 0.1}, None, "network.latency"),
    ({"mode": "request"}, [{"channel": 3}], "owners.0.channel"),
])
def test_bad_network_settings_are_rejected(network, owners, message):
    with pytest.raises(ScenarioError) as err:
        tiny(network=network, **({"owners": owners} if owners else {}))
    assert message in str(err.value)


def test_malformed_trace_names_file_and_line(tmp_path):
    trace = tmp_path / "trace.csv"
    trace.write_text("owner,start,end\n0,0,5\n0,abc,9\n")
    with pytest.raises(ScenarioError, match=r"trace.csv:3: time = 'abc'"):
        avail.read_trace(str(trace), ["a", "b"])


# -- statistics against theory ------------------------------------------------------------

def exchange_counts(owners: list[dict], n_owners: int, updates: int, network: dict) -> np.ndarray:
    result = execute(tiny(data={"owners": n_owners, "records": 60, "features": 1}, owners=owners,
                          learner={"iterations": updates}, network=network,
                          output={"metric_points": 1, "plots": False}))
    return np.bincount(result.training.sequence, minlength=n_owners)


def test_share_of_exchanges_follows_clock_rates():
    rates = np.array([1.0, 1.0, 2.0, 4.0])
    counts = exchange_counts([{"clock_rate": r} for r in rates], 4, 8000, {"mode": "request"})
    assert chi2_accepts(counts, rates / rates.sum())
    assert not chi2_accepts(counts, np.full(4, 0.25))


def test_share_of_exchanges_with_dropouts_follows_rate_times_availability():
    on = np.array([1.0, 3.0, 1.0])
    off = np.array([1.0, 1.0, 3.0])
    owners = [{"mean_online": a, "mean_offline": b} for a, b in zip(on, off, strict=True)]
    counts = exchange_counts(owners, 3, 8000, {"mode": "request"})
    share = on / (on + off)
    assert chi2_accepts(counts, share / share.sum())
    assert not chi2_accepts(counts, np.full(3, 1 / 3))


def pure_aloha(rate: float, tau: float, horizon: float, seed: int = 0) -> tuple[int, int, float]:
    """Poisson transmissions of length τ on one Channel: (successes, total, busy fraction)."""
    env, gen = simpy.Environment(), np.random.default_rng(seed)
    channel, outcomes = Channel(env, 0), []

    def send():
        outcomes.append((yield from channel.transmit(tau)))

    def source():
        while True:
            yield env.timeout(gen.exponential(1 / rate))
            env.process(send())

    env.process(source())
    env.run(until=horizon)
    return sum(outcomes), len(outcomes), channel.utilisation(horizon)


@pytest.mark.parametrize("load", [0.25, 0.5])
def test_pure_aloha_success_probability(load):
    ok, total, busy = pure_aloha(rate=10.0, tau=load / 10.0, horizon=4000.0)
    assert proportion_within(ok, total, np.exp(-2 * load))  # vulnerable window 2τ
    assert not proportion_within(ok, total, np.exp(-load))  # the slotted formula is wrong here
    assert abs(busy - (1 - np.exp(-load))) < 0.01  # M/D/∞: P(at least one on the air)


def slot_outcomes(n: int, rate: float, slots: int) -> np.ndarray:
    result = execute(tiny(data={"owners": n, "records": 60, "features": 1},
                          learner={"iterations": 10**6},
                          network={"mode": "broadcast", "clock_rate": rate, "broadcast_interval": 1.0,
                                   "transmission_time": 0.01, "horizon": slots + 0.5},
                          output={"metric_points": 1, "plots": False}))
    counts = result.training.log.counts
    idle, success = counts["idle"], result.training.k
    return np.array([idle, success, counts["broadcast"] - idle - success])


def test_slotted_aloha_in_broadcast_mode():
    n, rate = 5, 0.25
    outcomes = slot_outcomes(n, rate, 6000)
    p = 1 - np.exp(-rate)  # ready iff the clock ticked during the last slot

    def theory(p):
        idle, success = (1 - p) ** n, n * p * (1 - p) ** (n - 1)
        return np.array([idle, success, 1 - idle - success])

    assert chi2_accepts(outcomes, theory(p))
    assert not chi2_accepts(outcomes, theory(rate))  # the small-Δ approximation p = λΔ


def test_long_run_fraction_online_and_period_lengths():
    m_on, m_off, horizon, owners = 2.0, 1.0, 400.0, 60
    env = simpy.Environment()
    periods: list[float] = []
    last = {}

    def changed(i, online):
        if online:
            last[i] = env.now
        elif i in last:
            periods.append(env.now - last.pop(i))

    av = avail.Availability(env, owners, changed, lambda i: None)
    for i in range(owners):
        env.process(avail.alternating(av, i, m_on, m_off, np.random.default_rng(i)))
    env.run(until=horizon)
    online = 1 - np.array([av.downtime(i) for i in range(owners)]) / horizon
    assert mean_within(online, m_on / (m_on + m_off))
    assert not mean_within(online, 0.9 * m_on / (m_on + m_off))
    assert ks_accepts(np.array(periods), stats.expon(scale=m_on))
    assert not ks_accepts(np.array(periods), stats.expon(scale=1.2 * m_on))


def test_ideal_fast_path_matches_the_engine():
    """Design §9: the fast path is checked against the SimPy reference (same distribution)."""
    rates = [{"clock_rate": r} for r in (1.0, 2.0, 3.0)]
    fast = exchange_counts(rates, 3, 6000, {"mode": "ideal"})
    engine = exchange_counts(rates, 3, 6000, {"mode": "request"})
    table = np.array([fast, engine])
    assert stats.chi2_contingency(table).pvalue > 1e-4
    skewed = exchange_counts([{"clock_rate": r} for r in (1.0, 1.0, 3.0)], 3, 6000, {"mode": "ideal"})
    assert stats.chi2_contingency(np.array([skewed, engine])).pvalue < 1e-4
