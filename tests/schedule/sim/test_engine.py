"""The SimPy engine: event order on hand-checked scenarios, determinism, availability traces (the
network keys' refusals are in tests/scenario/test_schema.py and test_checks.py).

Forced-timing tests make the timing certain with outage windows and fast clocks: an owner with
clock rate 50–1000 that comes back online at time t ticks within a few milliseconds, so its
request time is known to within far less than the transmission times used. Replay tests check
random runs against an independent re-derivation of the documented semantics (module docstring
of :mod:`dpmarket.schedule.sim.engine`) from the ticks and availability changes in ``events.csv``.
Statistical tests against closed-form theory are in ``test_engine_theory.py``.
"""

from __future__ import annotations

import bisect
import copy
import csv
import json
import os
import subprocess
import sys
from collections import Counter
from functools import partial
from itertools import islice
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest
import simpy
import tomli_w
from helpers import PAPER_PRIVACY

from dpmarket.errors import ScenarioError
from dpmarket.output.results import write_owners
from dpmarket.privacy import mechanisms as privacy
from dpmarket.rng import in_blocks, stream
from dpmarket.runs.run import execute
from dpmarket.scenario.loading import load, validate
from dpmarket.scenario.schema import Scenario
from dpmarket.schedule.events import COLUMNS
from dpmarket.schedule.sim import availability as avail
from dpmarket.schedule.sim import exchange

INF = float("inf")
# The papers' privacy set-up (every owner budgets T answers), which the hand-checked stories assume.
BASE = {"name": "engine", "seed": 11, "data": {"owners": 1, "records": 200, "features": 2},
        "privacy": PAPER_PRIVACY, "learner": {"iterations": 10**6},
        "output": {"metric_points": 1, "plots": False}}


def table(network: dict, owners: int = 1, iterations: int = 10**6, specs: list | None = None,
          seed: int = 11, **sections) -> dict:
    """A raw scenario table: tiny data, T large unless given, the network under test."""
    t = copy.deepcopy(BASE)
    t["seed"], t["network"] = seed, network
    t["data"]["owners"], t["learner"]["iterations"] = owners, iterations
    if specs is not None:
        t["owners"] = specs
    for key, value in sections.items():
        t[key] = {**t.get(key, {}), **value}
    return t


def build(network: dict, **kw) -> Scenario:
    return validate(table(network, **kw), "test")


class Row(NamedTuple):
    time: float
    kind: str
    owner: int
    k: int | None
    eps: float | None
    channel: int | None
    detail: str


def read_events(path: Path) -> list[Row]:
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        assert tuple(reader.fieldnames) == COLUMNS
        return [Row(float(r["time"]), r["kind"], int(r["owner"]), int(r["k"]) if r["k"] else None,
                    float(r["epsilon_spent"]) if r["epsilon_spent"] else None,
                    int(r["channel"]) if r["channel"] else None, r["detail"]) for r in reader]


def run(tmp_path: Path, scenario: Scenario, name: str = "events.csv"):
    path = tmp_path / name
    result = execute(scenario, path)
    return read_events(path), result


def story(rows: list[Row], owner: int | None = None, until: float = INF) -> list[tuple[str, int]]:
    """(kind, owner) of the rows that are not ticks, up to ``until`` (one owner's, if given)."""
    return [(r.kind, r.owner) for r in rows if r.kind != "tick" and r.time <= until
            and (owner is None or r.owner == owner)]


def first(rows: list[Row], kind: str, owner: int, after: float = -1.0) -> Row:
    return next(r for r in rows if r.kind == kind and r.owner == owner and r.time > after)


# -- an independent replay of the documented semantics ------------------------------------

class Presence:
    """Owners' online state over time, from the dropout/reconnect rows of a log."""

    def __init__(self, rows: list[Row], owners: int) -> None:
        self.times: list[list[float]] = [[] for _ in range(owners)]
        self.state: list[list[bool]] = [[] for _ in range(owners)]
        self.drops: list[list[float]] = [[] for _ in range(owners)]
        for r in rows:
            if r.kind in ("dropout", "reconnect"):
                self.times[r.owner].append(r.time)
                self.state[r.owner].append(r.kind == "reconnect")
                if r.kind == "dropout":
                    self.drops[r.owner].append(r.time)

    def online(self, i: int, t: float) -> bool:
        j = bisect.bisect_right(self.times[i], t)
        return True if j == 0 else self.state[i][j - 1]

    def dropped(self, i: int, a: float, b: float) -> bool:
        """Whether owner i went offline in (a, b]."""
        return bisect.bisect_right(self.drops[i], b) > bisect.bisect_right(self.drops[i], a)


def arrive(start: float, tau: float, lat: float) -> float:
    """When an uplink message sent at ``start`` reaches the learner (the engine's float sums)."""
    t = start + tau
    return t + lat if lat else t


def collided_starts(rows: list[Row], tau: float) -> set[tuple[int, float]]:
    """(owner, start) of uplink messages (requests, responses) overlapping another on their channel."""
    starts: dict[int, list[tuple[float, int]]] = {}
    for r in rows:
        if r.kind in ("request", "response"):
            starts.setdefault(r.channel, []).append((r.time, r.owner))
    hit = set()
    for lst in starts.values():
        lst.sort()
        for j in range(len(lst) - 1):
            if lst[j + 1][0] - lst[j][0] < tau:
                hit.update({(lst[j][1], lst[j][0]), (lst[j + 1][1], lst[j + 1][0])})
    return hit


def check_channels(rows: list[Row], scenario: Scenario) -> None:
    owners = scenario.data.owners
    channel_of = [scenario.owner_value(i, "channel") for i in range(owners)]
    for r in rows:
        if r.owner >= 0 and r.kind not in ("query", "response", "update"):
            assert r.channel == channel_of[r.owner], r
        if r.owner >= 0 and r.kind in ("query", "response", "update") and r.channel is not None:
            assert r.channel == channel_of[r.owner], r


def replay_request(rows: list[Row], scenario: Scenario, horizon: float) -> Counter:
    """Re-derive every non-tick event of a request-mode log from its ticks and availability.

    Rules (engine docstring): an online owner not in an exchange requests at its tick; an uplink
    message is lost iff another overlaps it on its channel; a delivered request is an exchange iff
    the learner is free on that channel, else it is lost ("learner busy"); the query goes out on
    delivery, the answer (response) τ+L later, the update τ+L after that; an exchange whose owner
    went offline after its request is lost ("owner went offline") at the downlink check or at the
    update. Needs carrier_sense off and loss_probability 0. Returns the outcomes seen.
    """
    net, owners = scenario.network, scenario.data.owners
    tau, lat = net.transmission_time, net.latency
    presence = Presence(rows, owners)
    hit = collided_starts(rows, tau) if net.collisions else set()
    queries = {(r.owner, r.time) for r in rows if r.kind == "query"}
    expected: Counter = Counter()
    learner: dict[int, list[tuple[float, float]]] = {}
    checks: list[tuple[int, float, bool]] = []
    busy: list[list[tuple[float, float]]] = [[] for _ in range(owners)]

    def expect(kind: str, i: int, t: float, detail: str = "") -> float:
        if t <= horizon:
            expected[kind, i, t, detail] += 1
        return t

    for r in (r for r in rows if r.kind == "request"):
        i, s, c = r.owner, r.time, r.channel
        expect("request", i, s)
        end = INF
        if (i, s) in hit:
            end = expect("collision", i, s + tau)
        elif (d := arrive(s, tau, lat)) <= horizon:
            if (i, d) in queries:
                expect("query", i, d)
                checks.append((c, d, False))
                reply = d + (tau + lat)
                if reply <= horizon and presence.dropped(i, s, reply):
                    end = expect("loss", i, reply, "owner went offline")
                elif reply <= horizon:
                    expect("response", i, reply)
                    update = arrive(reply, tau, lat)
                    if (i, reply) in hit:
                        end = expect("collision", i, reply + tau)
                    elif presence.dropped(i, s, update):
                        end = expect("loss", i, update, "owner went offline")
                    else:
                        end = expect("update", i, update)
                learner.setdefault(c, []).append((d, end))
            else:
                checks.append((c, d, True))
                end = expect("loss", i, d, "learner busy")
        busy[i].append((s, end))

    actual = Counter((r.kind, r.owner, r.time, r.detail) for r in rows
                     if r.kind not in ("tick", "dropout", "reconnect"))
    assert actual == expected, (actual - expected, expected - actual)
    for c, d, was_busy in checks:  # learner busy ⇔ another exchange on c is in progress
        assert any(a < d < b for a, b in learner.get(c, [])) == was_busy, (c, d)
    requests = {(r.owner, r.time) for r in rows if r.kind == "request"}
    for r in (r for r in rows if r.kind == "tick"):  # a tick requests ⇔ online and not in an exchange
        free = presence.online(r.owner, r.time) and not any(a < r.time < b for a, b in busy[r.owner])
        assert ((r.owner, r.time) in requests) == free, r
    assert [r.k for r in rows if r.kind == "update"] == list(range(1, sum(k[0] == "update" for k in
                                                                          expected.elements()) + 1))
    check_channels(rows, scenario)
    return Counter((k[0], k[3]) for k in expected.elements())


def replay_broadcast(rows: list[Row], scenario: Scenario, horizon: float) -> Counter:
    """Re-derive every non-tick event of a broadcast-mode log from its ticks and availability.

    Rules: a broadcast every Δ on each channel, except at slots when every owner is offline (the
    engine sleeps then: nothing could answer); the responders are the owners of that channel
    that ticked while online since the previous broadcast and have not gone offline since; none:
    "idle"; one: its update τ+L later (or "owner went offline" if it dropped meanwhile); two or
    more: a "collision" per responder τ later. Each responder is queried and answers at the slot.
    """
    net, owners = scenario.network, scenario.data.owners
    tau, lat, delta = net.transmission_time, net.latency, net.broadcast_interval
    channel_of = [scenario.owner_value(i, "channel") for i in range(owners)]
    presence = Presence(rows, owners)
    ticks: list[list[float]] = [[] for _ in range(owners)]
    for r in rows:
        if r.kind == "tick":
            ticks[r.owner].append(r.time)
    expected: Counter = Counter()
    slots, now = [], 0.0
    while now + delta <= horizon:
        if any(presence.online(i, now + delta) for i in range(owners)):
            slots.append((slots[-1][1] if slots else 0.0, now + delta))
        now += delta
    for c in range(net.channels):
        assert [r.time for r in rows if r.kind == "broadcast" and r.channel == c] == [s for _, s in slots]
        for prev, s in slots:
            expected["broadcast", -1, s, ""] += 1
            ready = [i for i in range(owners) if channel_of[i] == c and any(
                prev < t <= s and presence.online(i, t) and not presence.dropped(i, t, s)
                for t in ticks[i])]
            if not ready:
                expected["idle", -1, s, ""] += 1
            for i in ready:
                expected["query", i, s, ""] += 1
                expected["response", i, s, ""] += 1
                if len(ready) > 1:
                    expected["collision", i, s + tau, ""] += 1
                else:
                    u = arrive(s, tau, lat)
                    lost = presence.dropped(i, s, u)
                    expected["loss" if lost else "update", i, u, "owner went offline" if lost else ""] += 1
    expected = Counter({k: v for k, v in expected.items() if k[2] <= horizon})
    actual = Counter((r.kind, r.owner, r.time, r.detail) for r in rows
                     if r.kind not in ("tick", "dropout", "reconnect"))
    assert actual == expected, (actual - expected, expected - actual)
    assert [r.k for r in rows if r.kind == "update"] == list(range(1, actual_updates(rows) + 1))
    check_channels(rows, scenario)
    return Counter((k[0], k[3]) for k in expected.elements())


def actual_updates(rows: list[Row]) -> int:
    return sum(r.kind == "update" for r in rows)


# -- request mode: hand-checked timing ------------------------------------------------------

def test_exchange_is_tick_request_query_response_update_three_hops_apart(tmp_path):
    tau, lat = 0.25, 0.125
    rows, result = run(tmp_path, build({"mode": "request", "transmission_time": tau, "latency": lat,
                                        "clock_rate": 2.0}, iterations=6))
    hop = tau + lat
    requests = [j for j, r in enumerate(rows) if r.kind == "request"]
    assert len(requests) == 6 and result.stop_reason == "iterations" and result.training.k == 6
    ticks_inside = 0
    for n, j in enumerate(requests, start=1):
        s = rows[j].time
        assert rows[j - 1][:3] == (s, "tick", 0)  # the tick that caused it, just before
        steps = [r for r in rows[j:] if r.kind != "tick"][:4]
        assert [r.kind for r in steps] == ["request", "query", "response", "update"]
        assert [r.time for r in steps] == pytest.approx([s, s + hop, s + 2 * hop, s + 3 * hop],
                                                        abs=1e-12)
        assert steps[3].k == n and steps[2].eps > 0
        ticks_inside += sum(r.kind == "tick" and s < r.time < steps[3].time for r in rows)
    assert ticks_inside > 0  # the clock keeps ticking during an exchange, without requesting
    assert sum(r.kind == "request" for r in rows) == 6


def test_offline_owners_tick_but_never_request(tmp_path):
    # network.outages apply to owner 0; owner 1's [[owners]] windows replace them
    windows = {0: [(0.0, 20.0)], 1: [(5.0, 10.0), (30.0, 40.0)]}
    scenario = build({"mode": "request", "clock_rate": 3.0, "horizon": 50.0,
                      "outages": [{"start": 0.0, "end": 20.0}]}, owners=2,
                     specs=[{}, {"outages": [{"start": 5.0, "end": 10.0}, {"start": 30.0, "end": 40.0}]}])
    rows, _ = run(tmp_path, scenario)
    for i, spans in windows.items():
        changes = [(r.time, r.kind) for r in rows if r.owner == i and r.kind in ("dropout", "reconnect")]
        assert changes == [x for a, b in spans for x in ((a, "dropout"), (b, "reconnect"))]
        inside = [r for r in rows if r.owner == i and any(a <= r.time < b for a, b in spans)]
        assert any(r.kind == "tick" for r in inside)
        assert {r.kind for r in inside} <= {"tick", "dropout", "loss", "query"}
        assert not any(r.kind == "request" for r in inside)
        assert any(r.kind == "request" for r in rows if r.owner == i and r.time >= spans[-1][1])


@pytest.mark.parametrize("window,before_loss", [
    ((10.6, 10.7), ["request", "query"]),              # offline while the query travels
    ((11.2, 11.3), ["request", "query", "response"]),  # offline while the answer travels
])
def test_going_offline_during_an_exchange_loses_it(tmp_path, window, before_loss):
    tau, lat = 0.25, 0.25  # request at s ≈ 10.00x: query s+0.5, answer s+1, update s+1.5
    scenario = build({"mode": "request", "clock_rate": 1000.0, "transmission_time": tau, "latency": lat,
                      "horizon": 11.9}, specs=[{"outages": [{"start": 0.0, "end": 10.0},
                                                            {"start": window[0], "end": window[1]}]}])
    rows, result = run(tmp_path, scenario)
    s = first(rows, "request", 0).time
    assert 10.0 < s < 10.05
    loss = first(rows, "loss", 0)
    assert loss.detail == "owner went offline"
    assert loss.time == pytest.approx(s + (len(before_loss) - 1) * (tau + lat) + tau + lat, abs=1e-12)
    between = [r for r in rows if s <= r.time <= loss.time and r.owner == 0]
    kinds = [r.kind for r in between if r.kind not in ("tick", "dropout", "reconnect")]
    assert kinds == before_loss + ["loss"]
    assert [(r.time, r.kind) for r in between if r.kind in ("dropout", "reconnect")] == [
        (window[0], "dropout"), (window[1], "reconnect")]
    assert result.training.k == 0 and not any(r.kind == "update" for r in rows)
    # ε is spent iff the answer was released (transmitted)
    assert result.owners[0].epsilon_spent == (pytest.approx(1e-6) if "response" in before_loss else 0.0)


def test_overlapping_requests_both_collide_and_start_no_exchange(tmp_path):
    tau = 1.0
    scenario = build({"mode": "request", "clock_rate": 1000.0, "transmission_time": tau, "horizon": 10.0,
                      "outages": [{"start": 0.0, "end": 5.0}, {"start": 5.5, "end": 100.0}]}, owners=2)
    rows, result = run(tmp_path, scenario)
    req = {i: first(rows, "request", i).time for i in (0, 1)}
    assert all(5.0 < t < 5.05 for t in req.values())
    assert sorted(story(rows)) == sorted([("dropout", 0), ("dropout", 1), ("reconnect", 0), ("reconnect", 1),
                                          ("request", 0), ("request", 1), ("collision", 0), ("collision", 1),
                                          ("dropout", 0), ("dropout", 1)])
    for i in (0, 1):
        assert first(rows, "collision", i).time == req[i] + tau
    channel = result.network.channels[0]
    assert (channel.transmissions, channel.collided, result.training.k) == (2, 2, 0)


def test_collisions_come_in_overlapping_pairs(tmp_path):
    tau = 0.2
    scenario = build({"mode": "request", "clock_rate": 8.0, "transmission_time": tau, "horizon": 60.0},
                     owners=2)
    rows, result = run(tmp_path, scenario)
    ends = {i: [r.time for r in rows if r.kind == "collision" and r.owner == i] for i in (0, 1)}
    assert len(ends[0]) > 20
    for i in (0, 1):  # a collided message [e−τ, e) overlaps one of the other owner's collided ones
        for e in ends[i]:
            assert any(abs(e - f) < tau for f in ends[1 - i])
    assert result.network.channels[0].collided == len(ends[0]) + len(ends[1])


def test_busy_learner_loses_a_request_that_got_through(tmp_path):
    tau, lat = 0.1, 0.2  # owner 0's exchange occupies the learner from s0+0.3 to s0+0.9
    scenario = build({"mode": "request", "clock_rate": 1000.0, "transmission_time": tau, "latency": lat,
                      "horizon": 5.95}, owners=2,
                     specs=[{"outages": [{"start": 0.0, "end": 5.0}]},
                            {"outages": [{"start": 0.0, "end": 5.35}, {"start": 5.5, "end": 100.0}]}])
    rows, _ = run(tmp_path, scenario)
    s0, s1 = first(rows, "request", 0).time, first(rows, "request", 1).time
    assert 5.0 < s0 < 5.02 and 5.35 < s1 < 5.37
    update = first(rows, "update", 0)
    assert update.time == pytest.approx(s0 + 3 * (tau + lat), abs=1e-12)
    assert [x for x in story(rows, until=update.time) if x[0] not in ("dropout", "reconnect")] == [
        ("request", 0), ("query", 0), ("request", 1), ("response", 0), ("loss", 1), ("update", 0)]
    loss = first(rows, "loss", 1)
    assert loss.detail == "learner busy" and loss.time == s1 + tau + lat


@pytest.mark.parametrize("attempts,back_online,outcome", [
    (16, 100.0, "query"),   # waits until owner 0's request has left the air, then gets through
    (1, 100.0, "loss"),     # one attempt only: gives up after its first back-off
    (16, 5.7, "offline"),   # goes offline while waiting: loses the exchange, never transmits
])
def test_carrier_sense_backs_off_from_a_busy_channel(tmp_path, attempts, back_online, outcome):
    tau = 1.0  # owner 0 transmits over [s0, s0+1), s0 ≈ 5.0; owner 1 senses it at s1 ≈ 5.5
    scenario = build({"mode": "request", "clock_rate": 1000.0, "transmission_time": tau,
                      "carrier_sense": True, "backoff": 0.05, "max_attempts": attempts, "horizon": 7.5},
                     owners=2, specs=[{"outages": [{"start": 0.0, "end": 5.0}, {"start": 5.2, "end": 100.0}]},
                                      {"outages": [{"start": 0.0, "end": 5.5},
                                                   {"start": back_online, "end": 200.0}]}])
    rows, result = run(tmp_path, scenario)
    s0, s1 = first(rows, "request", 0).time, first(rows, "request", 1).time
    assert 5.0 < s0 < 5.02 and 5.5 < s1 < 5.52
    mine = [r for r in rows if r.owner == 1 and r.kind not in ("tick", "dropout", "reconnect")]
    ends = [j for j, r in enumerate(mine) if r.kind == "request"] + [len(mine)]
    first_request = mine[:ends[1]]  # owner 1's first request and what became of it
    assert first_request[0].kind == "request" and first_request[1][:2] == (s1, "backoff")
    backoffs = [r.time for r in first_request if r.kind == "backoff"]
    assert all(s0 <= t < s0 + tau for t in backoffs)  # only while owner 0 is on the air
    assert 1 <= len(backoffs) <= attempts and not any(r.kind == "collision" for r in rows)
    after = first_request[len(backoffs) + 1]
    assert first_request[len(backoffs) + 1:] == [after] or outcome == "query"
    if outcome == "loss":
        assert (after.kind, after.detail) == ("loss", "channel busy: gave up") and len(backoffs) == 1
        assert after.time > backoffs[0]
    elif outcome == "offline":  # lost at the first attempt after the dropout at 5.7, untransmitted
        assert (after.kind, after.detail) == ("loss", "owner went offline")
        assert backoffs[-1] < 5.7 < after.time
        assert result.network.channels[0].transmissions == 1  # owner 0's request only
    else:  # transmitted once the channel was free, delivered τ later: the learner is free again,
        # because owner 0 (offline since 5.2) lost its exchange at s0 + 2τ, when its query arrived
        assert after.kind == "query" and after.time > s0 + tau + tau
        assert first(rows, "loss", 0).time == pytest.approx(s0 + 2 * tau, abs=1e-12)
        assert result.network.channels[0].transmissions == 2


def test_carrier_sense_prevents_every_collision_in_request_mode(tmp_path):
    scenario = build({"mode": "request", "clock_rate": 4.0, "transmission_time": 0.2, "latency": 0.05,
                      "carrier_sense": True, "backoff": 0.3, "horizon": 60.0}, owners=4)
    rows, result = run(tmp_path, scenario)
    kinds = Counter(r.kind for r in rows)
    assert kinds["backoff"] > 20 and kinds["update"] > 20 and kinds["collision"] == 0
    assert result.network.channels[0].collided == 0


def test_owners_on_different_channels_never_collide(tmp_path):
    tau = 1.0  # both request at ≈ 5.00x with overlapping messages, but on channels 0 and 1
    scenario = build({"mode": "request", "clock_rate": 1000.0, "transmission_time": tau, "channels": 2,
                      "horizon": 7.0, "outages": [{"start": 0.0, "end": 5.0}, {"start": 5.5, "end": 100.0}]},
                     owners=2, specs=[{"channel": 1}, {"channel": 0}])
    rows, result = run(tmp_path, scenario)
    assert not any(r.kind == "collision" for r in rows)
    for i, c in ((0, 1), (1, 0)):
        req, query = first(rows, "request", i), first(rows, "query", i)
        assert req.channel == c and query.channel == c and query.time == req.time + tau
    assert [ch.transmissions for ch in result.network.channels] == [1, 1]


def test_random_request_runs_replay_exactly(tmp_path):
    """Collisions, busy learner, dropouts mid-exchange, two channels: every event re-derived."""
    one = build({"mode": "request", "clock_rate": 1.0, "transmission_time": 0.3, "latency": 0.1,
                 "horizon": 150.0}, owners=3, seed=5)
    rows, _ = run(tmp_path, one)
    seen = replay_request(rows, one, 150.0)
    assert seen["collision", ""] > 10 and seen["loss", "learner busy"] > 10 and seen["update", ""] > 10
    many = build({"mode": "request", "clock_rate": 1.5, "transmission_time": 0.3, "latency": 0.1,
                  "channels": 2, "horizon": 150.0, "dropout": {"mean_online": 4.0, "mean_offline": 1.0}},
                 owners=5, seed=6, specs=[{"channel": 0}, {"channel": 0}, {"channel": 1}, {"channel": 1},
                                          {"channel": 1}])
    rows, _ = run(tmp_path, many, "many.csv")
    seen = replay_request(rows, many, 150.0)
    assert seen["loss", "owner went offline"] > 5 and seen["collision", ""] > 10
    # messages overlapped across the two channels without colliding
    tx = sorted((r.time, r.channel) for r in rows if r.kind in ("request", "response"))
    assert any(b[0] - a[0] < 0.3 and a[1] != b[1] for a, b in zip(tx, tx[1:], strict=False))


def test_replay_catches_a_wrong_transmission_time(tmp_path):
    """The replay is a real check: told the wrong τ, it disagrees with the log."""
    scenario = build({"mode": "request", "clock_rate": 1.5, "transmission_time": 0.3, "latency": 0.1,
                      "horizon": 40.0}, owners=3, seed=5)
    rows, _ = run(tmp_path, scenario)
    wrong = build({"mode": "request", "clock_rate": 1.5, "transmission_time": 0.25, "latency": 0.15,
                   "horizon": 40.0}, owners=3, seed=5)
    with pytest.raises(AssertionError):
        replay_request(rows, wrong, 40.0)


# -- budgets and stopping ------------------------------------------------------------------

def test_spent_budgets_refuse_once_stop_the_owner_and_end_the_run(tmp_path):
    caps, eps = {0: 2, 1: 4}, {0: 1.0, 1: 0.5}
    scenario = build({"mode": "request", "clock_rate": 2.0}, owners=2, iterations=100,
                     privacy={"split": "capped"}, specs=[{"cap": 2}, {"cap": 4, "epsilon": 0.5}])
    rows, result = run(tmp_path, scenario)
    assert result.stop_reason == "budgets exhausted" and result.training.k == 6
    for i in (0, 1):
        mine = [r for r in rows if r.owner == i]
        refusals = [r for r in mine if r.kind == "refusal"]
        assert len(refusals) == 1 and refusals[0].detail == "budget spent: stops taking part"
        assert mine[-1] == refusals[0]  # nothing after it: not even a tick
        assert refusals[0].eps == eps[i]
        spent = [r.eps for r in mine if r.kind == "response"]
        assert spent == pytest.approx([eps[i] * j / caps[i] for j in range(1, caps[i] + 1)], rel=1e-15)
    write_owners(result, tmp_path / "owners.csv")
    with open(tmp_path / "owners.csv", newline="") as fh:
        table_rows = list(csv.DictReader(fh))
    assert [(int(r["refusals"]), int(r["answers"]), float(r["epsilon_spent"])) for r in table_rows] == [
        (1, 2, 1.0), (1, 4, 0.5)]


def test_horizon_stops_the_run_and_only_truncates_it(tmp_path):
    net = {"mode": "request", "clock_rate": 20.0, "transmission_time": 0.01, "latency": 0.002}
    short, result = run(tmp_path, build({**net, "horizon": 7.5}, owners=3), "short.csv")
    assert result.stop_reason == "horizon"
    assert max(r.time for r in short) <= 7.5 < max(r.time for r in short) + 0.2
    long, _ = run(tmp_path, build({**net, "horizon": 15.0}, owners=3), "long.csv")
    assert short == [r for r in long if r.time <= 7.5]
    _, stopped = run(tmp_path, build(net, owners=3, iterations=25), "t.csv")
    assert stopped.stop_reason == "iterations" and stopped.training.k == 25


JAMMED = {"mode": "request", "clock_rate": 1.0, "transmission_time": 2.0}  # with 30 owners: every
# owner transmits two thirds of the time, so a request overlaps another with probability 1 - 3⁻²⁹


@pytest.mark.slow
def test_a_channel_that_loses_every_request_stalls_instead_of_running_for_ever(tmp_path):
    """Thirty owners whose requests last 2 time units against clocks of rate 1: each request overlaps
    another, so none is served and no ε is spent; without a horizon the run never ended. Now it stops
    ("stalled") at STALL_REQUESTS requests lost in a row. The CLI as a user runs it, with a timeout."""
    raw = table(JAMMED, owners=30, iterations=100)
    path = tmp_path / "jammed.toml"
    path.write_text(tomli_w.dumps(raw))
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "dpmarket", "run", str(path), "--out", str(out), "--quiet"],
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["stop_reason"], summary["iterations"], summary["collisions"]) == (
        "stalled", 0, exchange.STALL_REQUESTS)
    with open(out / "owners.csv", newline="") as fh:
        assert [float(r["epsilon_spent"]) for r in csv.DictReader(fh)] == [0.0] * 30


def test_the_stall_count_is_of_requests_lost_in_a_row(tmp_path, monkeypatch):
    """With the limit at 30: a jammed channel stops after exactly 30 lost requests; a lossy but
    workable channel loses far more than 30 requests in all, but never 30 in a row, and runs to T."""
    monkeypatch.setattr(exchange, "STALL_REQUESTS", 30)
    rows, result = run(tmp_path, build(JAMMED, owners=30, iterations=100), "jammed.csv")
    assert result.stop_reason == "stalled"
    assert Counter(r.kind for r in rows)["collision"] == 30 and not any(r.kind == "query" for r in rows)
    lossy = {"mode": "request", "clock_rate": 1.0, "transmission_time": 0.001, "loss_probability": 0.3}
    rows, result = run(tmp_path, build(lossy, owners=3, iterations=200), "lossy.csv")
    assert result.stop_reason == "iterations" and result.training.k == 200
    served = Counter(r.kind for r in rows)["query"]
    assert Counter(r.kind for r in rows)["request"] - served > 30


# -- broadcast mode ------------------------------------------------------------------------

def test_broadcast_slots_hand_checked(tmp_path):
    """Fast clocks: both owners are ready at every slot while online. Slots 1-2 collide,
    3-5 are owner 0's alone (update τ+L later); at 5.5 the last owner goes offline past the
    horizon, so no owner can ever answer again and the run stops there."""
    tau, lat = 0.25, 0.125
    scenario = build({"mode": "broadcast", "clock_rate": 50.0, "broadcast_interval": 1.0,
                      "transmission_time": tau, "latency": lat, "horizon": 6.5}, owners=2,
                     specs=[{"outages": [{"start": 5.5, "end": 100.0}]},
                            {"outages": [{"start": 2.5, "end": 100.0}]}])
    rows, result = run(tmp_path, scenario)
    got = [(r.time, r.kind, r.owner, r.k) for r in rows if r.kind not in ("tick", "dropout")]
    want = []
    for s in (1.0, 2.0):
        want += [(s, "broadcast", -1, None), (s, "query", 0, None), (s, "query", 1, None),
                 (s, "response", 0, None), (s, "response", 1, None),
                 (s + tau, "collision", 0, None), (s + tau, "collision", 1, None)]
    for k, s in enumerate((3.0, 4.0, 5.0), start=1):
        want += [(s, "broadcast", -1, None), (s, "query", 0, None), (s, "response", 0, None),
                 (s + tau + lat, "update", 0, k)]
    assert got == want
    assert result.stop_reason == "no owner online before the horizon" and result.training.k == 3
    assert result.training.time == 5.0 + tau + lat and max(r.time for r in rows) == 5.5
    # every transmitted answer was charged, collided ones included (T = 10^6 answers of ε/T each)
    assert [o.ledger.answers for o in result.owners] == [5, 2]
    assert result.owners[0].epsilon_spent == pytest.approx(5e-6, rel=1e-12)


@pytest.mark.parametrize("extra,owners,specs", [
    ({}, 3, None),
    ({"dropout": {"mean_online": 3.0, "mean_offline": 1.0}}, 4, None),
    ({"channels": 2}, 5, None),
])
def test_random_broadcast_runs_replay_exactly(tmp_path, extra, owners, specs):
    scenario = build({"mode": "broadcast", "clock_rate": 0.6, "broadcast_interval": 1.0,
                      "transmission_time": 0.25, "latency": 0.5, "horizon": 300.5, **extra},
                     owners=owners, specs=specs, seed=9)
    rows, _ = run(tmp_path, scenario)
    seen = replay_broadcast(rows, scenario, 300.5)
    assert seen["idle", ""] > 10 and seen["collision", ""] > 10 and seen["update", ""] > 10
    if "dropout" in extra:
        assert seen["loss", "owner went offline"] > 0


def test_broadcast_charges_epsilon_for_every_transmitted_answer(tmp_path):
    scenario = build({"mode": "broadcast", "clock_rate": 0.7, "broadcast_interval": 1.0,
                      "transmission_time": 0.1, "horizon": 200.5}, owners=3, iterations=500)
    rows, result = run(tmp_path, scenario)
    charge = 1.0 / 500
    write_owners(result, tmp_path / "owners.csv")
    with open(tmp_path / "owners.csv", newline="") as fh:
        table_rows = {int(r["owner"]): r for r in csv.DictReader(fh)}
    collided = 0
    for i in range(3):
        spent = [r.eps for r in rows if r.kind == "response" and r.owner == i]
        assert spent == pytest.approx(charge * np.arange(1, len(spent) + 1), rel=1e-12)
        updates = sum(r.kind == "update" and r.owner == i for r in rows)
        collisions = sum(r.kind == "collision" and r.owner == i for r in rows)
        assert len(spent) == updates + collisions  # every response either updated or collided
        assert float(table_rows[i]["epsilon_spent"]) == spent[-1] == result.owners[i].epsilon_spent
        assert int(table_rows[i]["answers"]) == len(spent)
        assert int(table_rows[i]["exchanges"]) == updates
        assert int(table_rows[i]["collisions"]) == collisions
        collided += collisions
    assert collided > 10


def test_broadcast_without_collisions_applies_every_response(tmp_path):
    scenario = build({"mode": "broadcast", "clock_rate": 0.7, "broadcast_interval": 1.0,
                      "transmission_time": 0.1, "collisions": False, "horizon": 100.5}, owners=3)
    rows, result = run(tmp_path, scenario)
    kinds = Counter(r.kind for r in rows)
    assert kinds["collision"] == 0 and kinds["response"] == kinds["update"] == result.training.k
    multi = Counter(r.time for r in rows if r.kind == "response")
    assert max(multi.values()) >= 2  # some slots had several responders, all applied


# -- availability: windows and traces ------------------------------------------------------

def test_overlapping_outage_windows_are_one_offline_period(tmp_path):
    scenario = build({"mode": "request", "horizon": 8.0,
                      "outages": [{"start": 2.0, "end": 5.0}, {"start": 1.0, "end": 3.0},
                                  {"start": 5.0, "end": 6.0}]})
    rows, result = run(tmp_path, scenario)
    assert [(r.time, r.kind) for r in rows if r.kind in ("dropout", "reconnect")] == [
        (1.0, "dropout"), (6.0, "reconnect")]
    assert result.network.downtime[0] == 5.0


def trace_file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "trace.csv"
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_availability_trace_drives_owners_and_its_end_retires_them(tmp_path):
    trace = trace_file(tmp_path, "owner,start,end\nalpha,2,4\n1,0,3\nalpha,6,8\n")
    scenario = build({"mode": "request", "clock_rate": 5.0, "availability": trace}, owners=2,
                     specs=[{"name": "alpha"}])
    rows, result = run(tmp_path, scenario)
    changes = {i: [(r.time, r.kind) for r in rows if r.owner == i and r.kind in ("dropout", "reconnect")]
               for i in (0, 1)}
    assert changes[0] == [(0.0, "dropout"), (2.0, "reconnect"), (4.0, "dropout"), (6.0, "reconnect"),
                          (8.0, "dropout")]
    assert changes[1] == [(3.0, "dropout")]
    online = {0: [(2.0, 4.0), (6.0, 8.0)], 1: [(0.0, 3.0)]}
    for r in rows:
        if r.kind == "request":
            assert any(a < r.time < b for a, b in online[r.owner])
    assert result.stop_reason == "no owner left" and max(r.time for r in rows) <= 8.0 + 1e-9


def test_trace_and_outage_overlap_without_a_spurious_reconnect(tmp_path):
    trace = trace_file(tmp_path, "owner,start,end\n0,0,8\n")
    scenario = build({"mode": "request", "availability": trace,
                      "outages": [{"start": 5.0, "end": 10.0}]})
    rows, result = run(tmp_path, scenario)
    assert [(r.time, r.kind) for r in rows if r.kind in ("dropout", "reconnect")] == [(5.0, "dropout")]
    assert result.stop_reason == "no owner left"


@pytest.mark.parametrize("text,where,message", [
    ("owner,start,end\n0,0,5\n0,abc,9\n", ":3", "time = 'abc': is not a number"),
    ("owner,start,end\n0,-1,5\n", ":2", "must be a finite time >= 0"),
    ("owner,start,end\n0,1,inf\n", ":2", "must be a finite time >= 0"),
    ("owner,start,end\n0,1,nan\n", ":2", "must be a finite time >= 0"),
    ("owner,start,end\n0,5,5\n", ":2", "end = 5.0: must be after start = 5.0"),
    ("owner,start,end\n0,1,2\nzeta,1,2\n", ":3", "owner = 'zeta': is neither an owner name nor an index"),
    ("owner,start,end\n2,1,2\n", ":2", "owner = '2'"),
    ("owner,start,end\n0,1\n", ":2", "needs owner,start,end"),
    ("owner,start,end\n0,1,2\n\n\n1,x,3\n", ":5", "is not a number"),  # blank lines still counted
    ("who,start,end\n0,1,2\n", "", "needs columns owner,start,end"),
    ("", "", "needs columns owner,start,end"),
])
def test_malformed_trace_names_file_and_line(tmp_path, text, where, message):
    path = trace_file(tmp_path, text)
    with pytest.raises(ScenarioError) as err:
        avail.read_trace(path, ["a", "b"])
    assert f"{path}{where}: " in str(err.value) and message in str(err.value)


def test_unreadable_or_missing_trace_is_a_scenario_error(tmp_path):
    binary = tmp_path / "binary.csv"
    binary.write_bytes(b"\xff\xfe\x00o")
    for path in (str(binary), str(tmp_path / "absent.csv")):
        with pytest.raises(ScenarioError, match="network.availability"):
            avail.read_trace(path, ["a"])
    with pytest.raises(ScenarioError, match="network.availability"):  # found at run time
        execute(build({"mode": "request", "availability": str(tmp_path / "absent.csv")}))
    toml = tmp_path / "s.toml"
    toml.write_text('name = "s"\n[network]\nmode = "request"\navailability = "absent.csv"\n')
    with pytest.raises(ScenarioError, match=r"s\.toml: network\.availability = 'absent.csv': no such file"):
        load(toml)
    (tmp_path / "present.csv").write_text("owner,start,end\n0,0,1\n")
    toml.write_text('name = "s"\n[network]\nmode = "request"\navailability = "present.csv"\n')
    assert load(toml).network.availability == str((tmp_path / "present.csv").resolve())


# -- determinism ---------------------------------------------------------------------------

DETERMINISM = [
    ({"mode": "request", "clock_rate": 2.0, "transmission_time": 0.05, "latency": 0.02,
      "loss_probability": 0.15, "carrier_sense": True, "backoff": 0.1, "channels": 2,
      "dropout": {"mean_online": 3.0, "mean_offline": 1.0}, "horizon": 120.0}, 5),
    ({"mode": "broadcast", "clock_rate": 0.6, "broadcast_interval": 0.5, "transmission_time": 0.1,
      "latency": 0.05, "loss_probability": 0.1, "channels": 2,
      "dropout": {"mean_online": 3.0, "mean_offline": 1.0}, "horizon": 120.0}, 5),
]


@pytest.mark.parametrize("network,owners", DETERMINISM, ids=["request", "broadcast"])
def test_same_seed_same_event_bytes(tmp_path, network, owners):
    scenario = build(network, owners=owners, specs=[{"clock_rate": 0.5}])
    a, b, c = tmp_path / "a.csv", tmp_path / "b.csv", tmp_path / "c.csv"
    execute(scenario, a)
    execute(build(network, owners=owners, specs=[{"clock_rate": 0.5}]), b)
    assert a.read_bytes() == b.read_bytes()
    kinds = Counter(r.kind for r in read_events(a))
    assert kinds["dropout"] and kinds["loss"] and kinds["update"] and kinds["collision"] + kinds["backoff"]
    execute(build(network, owners=owners, specs=[{"clock_rate": 0.5}], seed=12), c)
    assert a.read_bytes() != c.read_bytes()


def test_same_seed_same_bytes_in_another_process(tmp_path):
    """No dependence on Python's per-process hash salt (sets of owners, dict order)."""
    raw = table(DETERMINISM[0][0], owners=DETERMINISM[0][1])
    here, there = tmp_path / "here.csv", tmp_path / "there.csv"
    execute(validate(raw, "test"), here)
    code = ("import json, sys; from dpmarket.scenario import validate; "
            "from dpmarket.runs.run import execute; "
            "execute(validate(json.loads(sys.argv[1]), 'test'), sys.argv[2])")
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    subprocess.run([sys.executable, "-c", code, json.dumps(raw), str(there)], check=True, env=env)
    assert here.read_bytes() == there.read_bytes()


def record_noise(monkeypatch) -> dict[int, list[np.ndarray]]:
    """Capture every Laplace draw, keyed by the id of the owner's noise object."""
    draws: dict[int, list[np.ndarray]] = {}
    original = privacy.LaplaceNoise.draw

    def draw(self):
        w = original(self)
        draws.setdefault(id(self), []).append(w.copy())
        return w

    monkeypatch.setattr(privacy.LaplaceNoise, "draw", draw)
    return draws


@pytest.mark.parametrize("network", [
    {"mode": "request", "transmission_time": 0.2, "latency": 0.1, "channels": 2, "loss_probability": 0.2,
     "carrier_sense": True, "dropout": {"mean_online": 2.0, "mean_offline": 1.0}},
    {"mode": "broadcast", "broadcast_interval": 0.5, "transmission_time": 0.1, "clock_rate": 3.0},
    {"mode": "ideal"},
], ids=["request", "broadcast", "ideal"])
def test_network_settings_change_neither_data_nor_the_noise_of_each_answer(monkeypatch, network):
    # the runs exchange by exchange, whose owners draw their own noise (a network run is replayed
    # by default, with the same draws: tests/test_replay.py)
    monkeypatch.setattr("dpmarket.runs.run.batched", lambda scenario, replications: False)
    draws = record_noise(monkeypatch)
    base = execute(build({"mode": "request"}, owners=4, iterations=300))
    other = execute(build(network, owners=4, iterations=300))
    assert np.array_equal(base.consortium.sizes, other.consortium.sizes)
    for x, y in zip(base.objective.owners, other.objective.owners, strict=True):
        assert np.array_equal(x.stats.A, y.stats.A) and np.array_equal(x.stats.b, y.stats.b)
    assert np.array_equal(base.objective.theta_star, other.objective.theta_star)
    compared = 0
    for x, y in zip(base.owners, other.owners, strict=True):
        a, b = draws[id(x.noise)], draws[id(y.noise)]
        n = min(len(a), len(b))
        assert n > 20 and x.scale == y.scale
        assert all(np.array_equal(u, v) for u, v in zip(a[:n], b[:n], strict=True))  # j-th answer, j-th draw
        compared += n
    assert compared > 100


# -- validation ----------------------------------------------------------------------------


def test_good_network_settings_are_accepted():
    scenario = build({"mode": "broadcast", "broadcast_interval": 0.31, "transmission_time": 0.2,
                      "latency": 0.1, "channels": 2, "dropout": {"mean_online": 1.0, "mean_offline": 2.0}},
                     owners=3,
                     specs=[{"channel": 1, "clock_rate": 2.0, "mean_online": 3.0, "mean_offline": 1.0}])
    assert [scenario.owner_value(i, "channel") for i in range(3)] == [1, 1, 0]
    assert [scenario.owner_value(i, "mean_online") for i in range(3)] == [3.0, 1.0, 1.0]
    assert [scenario.owner_value(i, "clock_rate") for i in range(3)] == [2.0, 1.0, 1.0]


@pytest.mark.parametrize("block", [1, 7, 64])
def test_block_draws_give_exactly_the_scalar_sequences(block):
    """Clocks, losses and availability draw ahead in blocks; the values must be those of
    one scalar call per variate, so the block size can never change a run."""
    def fresh():
        return stream(5, "clocks", 3)

    scalar = fresh()
    assert list(islice(in_blocks(partial(fresh().exponential, 0.25), block), 200)) == [
        scalar.exponential(0.25) for _ in range(200)]
    scalar = fresh()
    assert list(islice(in_blocks(fresh().random, block), 200)) == [scalar.random() for _ in range(200)]
    scalar, blocks = fresh(), in_blocks(fresh().standard_exponential, block)
    means = [20.0, 2.0] * 100  # availability: alternating online and offline means
    assert [m * next(blocks) for m in means] == [scalar.exponential(m) for m in means]


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_broadcast_answers_paid_for_reach_the_learner_when_the_last_owner_leaves(tmp_path, seed):
    """The budget runs out with no horizon: the owner answers its last slot and leaves at its next
    tick, which comes before that answer arrives (fast clock, long transmission). The answer was
    paid for in ε, so the run waits for it: every response is resolved (applied or lost), none is
    dropped at the stop."""
    scenario = build({"mode": "broadcast", "clock_rate": 20.0, "broadcast_interval": 1.0,
                      "transmission_time": 0.5, "loss_probability": 0.3}, owners=1, iterations=40,
                      seed=seed)
    rows, result = run(tmp_path, scenario)
    kinds = Counter(r.kind for r in rows)
    assert result.stop_reason == "budgets exhausted" and kinds["response"] == 40
    assert kinds["update"] + kinds["loss"] == kinds["response"]
    assert kinds["update"] == result.training.k


def _pausing_model(env, log: list, pauses: list) -> None:
    """Processes with timeouts and shared events, and events that stop the loop with callbacks left."""
    def worker(k):
        for step in range(4):
            yield env.timeout(0.5 * k + step % 2)
            log.append((env.now, k, step))
    for k in range(5):
        env.process(worker(k))
    for at in (1.0, 2.5):
        pause = env.event()
        pause._ok, pause._value = True, None  # triggered by hand, as run(until=t) makes its own
        pause.callbacks += [lambda e: (_ for _ in ()).throw(simpy.core.StopSimulation(None)),
                            lambda e, at=at: log.append(("after pause", at, env.now))]
        env.schedule(pause, 1, at)
        pauses.append(pause)


def test_drain_processes_events_as_simpy_run_does():
    """stage.drain is SimPy's run()/step() loop: the same events in the same order, the same clock,
    a stop between two events leaving the stopping event's other callbacks for the next call, a
    failed event raising; a drain that did nothing different from run() cannot fail here."""
    from dpmarket.schedule.sim.queue import drain

    runs = []
    for loop in (lambda env: env.run(), drain):
        env, log, pauses = simpy.Environment(), [], []
        _pausing_model(env, log, pauses)
        for _ in range(4):  # two pauses, then the end of the queue; once more on an empty queue
            loop(env)
            log.append(("stopped", env.now, len(env._queue)))
        runs.append(log)
    assert runs[0] == runs[1]
    assert sum(1 for row in runs[0] if row[0] == "after pause") == 2
    env = simpy.Environment()
    env.event().fail(ValueError("bad"))
    with pytest.raises(ValueError, match="bad"):
        drain(env)
    defused = env.event().fail(ValueError("ignored"))
    defused.defused = True
    drain(env)  # a defused failure does not raise
