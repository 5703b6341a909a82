"""The SimPy engine against closed-form theory: shares of exchanges, pure and slotted ALOHA,
availability, and the ideal fast path against the SimPy reference.

Statistical checks derive their thresholds from the sample size (chi-square and binomial
standard errors at α = 1e-4 or 5 SE) and each is paired with a wrong parameter it must reject.
Event-order and replay tests are in ``test_engine.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
import simpy
from helpers import chi2_accepts, ks_accepts, mean_within, proportion_within, tiny
from scipy import stats

from dpmarket.runs.run import execute
from dpmarket.schedule.sim import availability as avail
from dpmarket.schedule.sim.channel import Channel


def exchange_counts(owners: list[dict], n_owners: int, updates: int, network: dict) -> np.ndarray:
    result = execute(tiny(data={"owners": n_owners, "records": 60, "features": 1}, owners=owners,
                          learner={"iterations": updates}, network=network,
                          output={"metric_points": 1, "plots": False}))
    return np.bincount(result.training.sequence, minlength=n_owners)


def test_equal_clock_rates_give_every_owner_an_equal_share_despite_collisions():
    network = {"mode": "request", "transmission_time": 0.02, "latency": 0.01}
    counts = exchange_counts([], 5, 8000, network)
    assert chi2_accepts(counts, np.full(5, 0.2))
    assert not chi2_accepts(counts, np.array([1.0, 1.0, 1.0, 1.0, 1.25]) / 5.25)  # one 25% faster


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
        avail.Alternating(av, i, m_on, m_off, np.random.default_rng(i))
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
