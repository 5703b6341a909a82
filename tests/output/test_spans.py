"""spans.csv agrees with events.csv and the engine: every update in one applied exchange, no owner in two
exchanges (or messages, or outages) at once, outages equal to the availability process, the channels'
counts; sorted by end, the same bytes whatever the block size or reader; the checks catch planted faults."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers import tiny

from dpmarket.output import spans
from dpmarket.output.results import run_and_write

REQUEST = {"mode": "request", "transmission_time": 0.02, "latency": 0.005, "loss_probability": 0.05,
           "dropout": {"mean_online": 4.0, "mean_offline": 1.0}}
NETWORKS = {
    "request": REQUEST,
    "two_channels": {**REQUEST, "channels": 2},
    "carrier_sense": {**REQUEST, "carrier_sense": True, "backoff": 0.05, "max_attempts": 3},
    "broadcast": {"mode": "broadcast", "broadcast_interval": 0.1, "transmission_time": 0.02, "latency": 0.01,
                  "clock_rate": 5.0, "loss_probability": 0.05,
                  "dropout": {"mean_online": 4.0, "mean_offline": 1.0}},
    "outages": {"mode": "request", "transmission_time": 0.01,
                "outages": [{"start": 1.0, "end": 2.5}, {"start": 6.0, "end": 7.0}]},
    "horizon": {**REQUEST, "horizon": 5.0},
    "ideal": {"mode": "ideal"},
}
OWNERS = [{"name": "alpha"}, {"name": "beta, with a comma"}, {"name": "gamma", "cap": 4}]


def run_dir(tmp_path_factory, network: str, **sections) -> Path:
    out = tmp_path_factory.mktemp(network) / "run"
    sections = {"learner": {"iterations": 150}, "privacy": {"split": "capped"}, **sections}
    scenario = tiny(network=NETWORKS[network], owners=OWNERS, **sections)
    run_and_write(scenario, out)
    return out


@pytest.fixture(scope="module", params=sorted(NETWORKS))
def run(request, tmp_path_factory):
    return run_dir(tmp_path_factory, request.param), request.param


def tables(out: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    events = pd.read_csv(out / "events.csv")
    table = pd.read_csv(out / "spans.csv", keep_default_na=False, na_values={
        c: [""] for c in ("k", "epsilon_spent", "price", "channel", "transmissions")})
    return events, table


def violations(events: pd.DataFrame, table: pd.DataFrame, owners: pd.DataFrame,
               channels: pd.DataFrame | None) -> list[str]:
    """What is wrong with ``table`` (spans.csv) against the run's own tables."""
    found = []
    exchanges = table[table["kind"] == "exchange"]
    applied = exchanges[exchanges["outcome"] == "applied"]
    updates = events[(events["kind"] == "update") & (events["owner"] >= 0)]
    for row in updates.itertuples():
        inside = applied[(applied["owner"] == row.owner) & (applied["start"] <= row.time)
                         & (applied["end"] >= row.time) & (applied["k"] == row.k)]
        if len(inside) != 1:
            found.append(f"update k={row.k} of owner {row.owner} at {row.time} "
                         f"lies in {len(inside)} applied exchanges")
    if len(applied) != len(updates):
        found.append(f"{len(applied)} applied exchanges for {len(updates)} updates")
    starts = "request" if (events["kind"] == "request").any() else "query"
    if len(exchanges) != (events["kind"] == starts).sum():
        found.append(f"{len(exchanges)} exchanges for {(events['kind'] == starts).sum()} {starts} rows")
    for kind in ("exchange", "transmission", "outage", "backoff"):  # one at a time per owner
        for owner, mine in table[table["kind"] == kind].groupby("owner"):
            mine = mine.sort_values(["start", "end"])
            if (mine["start"].to_numpy()[1:] < mine["end"].to_numpy()[:-1]).any():
                found.append(f"owner {owner}'s {kind} spans overlap")
    outages = table[table["kind"] == "outage"]
    down = outages.assign(length=outages["end"] - outages["start"]).groupby("owner")["length"].sum()
    expected = owners.set_index("owner")["downtime"] if "downtime" in owners else pd.Series(dtype=float)
    for owner, value in expected.items():
        if not np.isclose(down.get(owner, 0.0), value, rtol=1e-12, atol=1e-12):
            found.append(f"owner {owner}: outages last {down.get(owner, 0.0)}, downtime {value}")
    if channels is not None:
        sent = table[table["kind"] == "transmission"]
        for ch in channels.itertuples():
            mine = sent[sent["channel"] == ch.channel]
            if len(mine) != ch.transmissions or (mine["outcome"] == "lost_collision").sum() != ch.collided:
                found.append(f"channel {ch.channel}: {len(mine)} transmissions for {ch.transmissions}")
        windows = table[table["kind"] == "collision_window"]
        for row in sent[sent["outcome"] == "lost_collision"].itertuples():
            inside = windows[(windows["channel"] == row.channel) & (windows["start"] <= row.start)
                             & (windows["end"] >= row.end)]
            if len(inside) != 1:
                found.append(f"a collided transmission at {row.start} lies in {len(inside)} windows")
    if (np.diff(table["end"].to_numpy()) < 0).any():
        found.append("spans.csv is not sorted by end")
    return found


def test_spans_agree_with_the_events_and_the_engine(run):
    out, network = run
    events, table = tables(out)
    channels = pd.read_csv(out / "channels.csv") if (out / "channels.csv").exists() else None
    assert violations(events, table, pd.read_csv(out / "owners.csv"), channels) == []
    assert set(table["name"]) - {""} <= {o["name"] for o in OWNERS}
    if network != "ideal":
        assert {"exchange", "transmission", "outage"} <= set(table["kind"]), network
    if network in ("request", "broadcast"):  # the scenarios are busy enough for every outcome
        outcomes = set(table.loc[table["kind"] == "exchange", "outcome"])
        assert {"applied", "lost_collision", "lost_loss"} <= outcomes, outcomes
        assert (table["kind"] == "collision_window").any()
    if network == "carrier_sense":
        assert (table["kind"] == "backoff").any()


def test_the_checks_catch_planted_faults(run):
    """Each check on a deliberately wrong table: a moved update, overlapping exchanges, a shortened
    outage, a dropped transmission, a shuffled file."""
    out, network = run
    if network == "ideal":
        pytest.skip("the ideal network has no outages or transmissions to corrupt")
    events, table = tables(out)
    owners, channels = pd.read_csv(out / "owners.csv"), pd.read_csv(out / "channels.csv")
    applied = table.index[(table["kind"] == "exchange") & (table["outcome"] == "applied")]
    wrong = table.copy()
    wrong.loc[applied[0], "end"] -= 1e-3
    assert any("lies in 0 applied" in v for v in violations(events, wrong, owners, channels))
    wrong = table.copy()
    owner = wrong.loc[applied[0], "owner"]
    mine = wrong.index[(wrong["kind"] == "exchange") & (wrong["owner"] == owner)]
    wrong.loc[mine[1], "start"] = wrong.loc[mine[0], "start"]
    assert any("exchange spans overlap" in v for v in violations(events, wrong, owners, channels))
    wrong = table.copy()
    outage = wrong.index[wrong["kind"] == "outage"][0]
    wrong.loc[outage, "end"] = (wrong.loc[outage, "start"] + wrong.loc[outage, "end"]) / 2
    assert any("outages last" in v for v in violations(events, wrong, owners, channels))
    wrong = table.drop(index=table.index[table["kind"] == "transmission"][0])
    assert any("transmissions for" in v for v in violations(events, wrong, owners, channels))
    assert "spans.csv is not sorted by end" in violations(events, table[::-1], owners, channels)


def test_scheduled_outages_are_the_outage_spans(tmp_path_factory):
    out = run_dir(tmp_path_factory, "outages")
    _, table = tables(out)
    outages, left = table[table["kind"] == "outage"], table[table["kind"] == "budget_exhausted"]
    for owner in range(3):  # an owner that left (its budget spent) is no longer taken offline
        gone = left.loc[left["owner"] == owner, "start"].min()
        windows = [(a, b) for a, b in [(1.0, 2.5), (6.0, 7.0)] if not a > gone]
        mine = outages[outages["owner"] == owner]
        assert list(zip(mine["start"], mine["end"], strict=True)) == windows
    assert left["owner"].iloc[0] == 2  # gamma, capped at 4 answers, leaves first


def test_a_run_stopped_by_its_horizon_closes_outages_there(tmp_path_factory):
    out = run_dir(tmp_path_factory, "horizon", learner={"iterations": 100_000},
                  privacy={"split": "capped", "cap": 10_000})
    events, table = tables(out)
    assert table["end"].max() <= 5.0 and spans.timing_of(*_settings(out)).end == 5.0
    assert violations(events, table, pd.read_csv(out / "owners.csv"), pd.read_csv(out / "channels.csv")) == []


def test_the_same_bytes_whatever_the_block_size_or_reader(run, tmp_path, monkeypatch):
    out, network = run
    names, timing = _names(out), spans.timing_of(*_settings(out))
    spans.write(out / "events.csv", tmp_path / "tiny_blocks.csv", names, timing, block_bytes=400)
    assert (tmp_path / "tiny_blocks.csv").read_bytes() == (out / "spans.csv").read_bytes()
    monkeypatch.setattr(spans, "SMALL_BYTES", 0)  # pyarrow's reader, in blocks of at least 4 KiB
    spans.write(out / "events.csv", tmp_path / "arrow.csv", names, timing, block_bytes=4096)
    assert (tmp_path / "arrow.csv").read_bytes() == (out / "spans.csv").read_bytes()


def test_reading_spans_back_gives_the_blocks_the_sinks_got(run, tmp_path):
    out, _ = run
    got: list[dict] = []
    result_timing = spans.timing_of(*_settings(out))
    spans.write(out / "events.csv", tmp_path / "spans.csv", _names(out), result_timing, [got.append])
    back = list(spans.read(tmp_path / "spans.csv"))
    for name in got[0]:
        mine = np.concatenate([g[name] for g in got])
        theirs = np.concatenate([b[name] for b in back])
        np.testing.assert_array_equal(mine, theirs, err_msg=name)


def _settings(out: Path) -> tuple[dict, dict]:
    import json
    import tomllib

    return tomllib.loads((out / "scenario.toml").read_text()), json.loads((out / "summary.json").read_text())


def _names(out: Path) -> list[str]:
    return pd.read_csv(out / "owners.csv")["name"].tolist()


def test_hand_written_log_pairs_as_the_protocol_says(tmp_path):
    """Request mode, τ = 0.1, latency 0.05: an applied exchange, a request that collides with another
    owner's answer, a drop while offline, a random loss, a learner-busy loss, a refusal, a leave."""
    (tmp_path / "events.csv").write_text(
        "time,kind,owner,k,epsilon_spent,channel,detail\n"
        "0,dropout,2,,,0,\n"
        "1.0,tick,0,,,0,\n1.0,request,0,,,0,\n1.15,query,0,,,0,\n1.3,response,0,,0.5,0,\n"
        "1.35,request,1,,,0,\n1.4,collision,0,,,0,\n1.45,collision,1,,,0,\n"
        "2.0,reconnect,2,,,0,\n"
        "3.0,request,0,,,0,\n3.15,query,0,,,0,\n3.2,dropout,0,,,0,\n3.3,loss,0,,,0,owner went offline\n"
        "3.5,reconnect,0,,,0,\n"
        "4.0,request,2,,,0,\n4.1,loss,2,,,0,random\n"
        "5.0,request,1,,,0,\n5.15,query,1,,,0,\n5.2,request,2,,,0,\n5.3,response,1,,1.0,0,\n"
        "5.35,loss,2,,,0,learner busy\n5.45,update,1,1,,0,\n"
        "6.0,request,2,,,0,\n6.15,query,2,,,0,\n6.3,refusal,2,,1.0,0,budget spent\n"
        "7.0,refusal,2,,1.0,0,budget spent: stops taking part\n")
    timing = spans.Timing("request", 0.1, 0.05, end=8.0)
    spans.write(tmp_path / "events.csv", tmp_path / "spans.csv", ["a", "b", "c"], timing)
    _, table = tables(tmp_path)
    got = {(r.kind, r.owner, round(r.start, 9), round(r.end, 9), r.outcome) for r in table.itertuples()
           if r.kind in ("exchange", "outage", "budget_exhausted", "collision_window")}
    assert got == {
        ("outage", 2, 0.0, 2.0, ""), ("outage", 0, 3.2, 3.5, ""),
        ("exchange", 0, 1.0, 1.4, "lost_collision"), ("exchange", 1, 1.35, 1.45, "lost_collision"),
        ("collision_window", -1, 1.3, 1.45, ""),
        ("exchange", 0, 3.0, 3.3, "dropped_offline"), ("exchange", 2, 4.0, 4.1, "lost_loss"),
        ("exchange", 1, 5.0, 5.45, "applied"), ("exchange", 2, 5.2, 5.35, "lost_loss"),
        ("exchange", 2, 6.0, 6.3, "refused"), ("budget_exhausted", 2, 7.0, 8.0, "")}
    sent = table[table["kind"] == "transmission"]
    assert len(sent) == 9 and sorted(sent["outcome"]) == ["delivered"] * 6 + ["lost_collision"] * 2 + [
        "lost_loss"]
    assert table.loc[table["kind"] == "collision_window", "transmissions"].tolist() == [2]
    assert table.loc[(table["kind"] == "exchange") & (table["outcome"] == "applied"), "k"].tolist() == [1]


def test_a_market_in_time_has_memberships_and_price_periods(tmp_path):
    from tests.markets.test_dynamic import REQUEST as MARKET_NETWORK
    from tests.markets.test_dynamic import WILLING, scenario

    out = tmp_path / "run"
    run_and_write(scenario(MARKET_NETWORK, WILLING, mode="dynamic", rule="progress", period=0.5,
                           iterations=200, value=1.0), out)
    events, table = tables(out)
    assert violations(events, table, pd.read_csv(out / "owners.csv"), pd.read_csv(out / "channels.csv")) == []
    prices = events[events["kind"] == "price"]
    periods = table[table["kind"] == "price_period"].sort_values("start")
    assert periods["start"].tolist() == prices["time"].tolist()
    assert periods["price"].tolist() == prices["amount"].tolist()
    assert periods["end"].tolist()[:-1] == periods["start"].tolist()[1:]  # one after another, to the end
    joins = events[events["kind"] == "join"].groupby("owner").size()
    members = table[table["kind"] == "membership"].groupby("owner").size()
    assert members.to_dict() == joins.to_dict() and len(members) > 0


def test_synchronous_rounds_apply_every_owners_answer(tmp_path):
    out = tmp_path / "run"
    run_and_write(tiny(learner={"algorithm": "sync", "iterations": 20}), out)
    events, table = tables(out)
    rounds = events[(events["kind"] == "update") & (events["owner"] < 0)]
    applied = table[(table["kind"] == "exchange") & (table["outcome"] == "applied")]
    assert len(applied) == 3 * len(rounds) and sorted(set(applied["k"])) == sorted(rounds["k"])
    assert (applied["start"] == applied["end"]).all()
