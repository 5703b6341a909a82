"""``timeline --trace``: a Chrome Trace Event Format file that keeps the format's rules (phases, required
fields, monotone timestamps per track, complete events nested, begin/end matched) and whose counts are
the run's; owners sampled and detail cut beyond the documented sizes, and the file says so."""

from __future__ import annotations

import json
import os
from collections import Counter, defaultdict
from pathlib import Path

import pandas as pd
import pytest
from helpers import tiny

from dpmarket.cli import main
from dpmarket.output import trace
from dpmarket.output.results import run_and_write

PHASES = {"X", "B", "E", "i", "I", "C", "M"}
REQUIRED = {
    "X": {"name", "ts", "dur", "pid", "tid"},
    "B": {"name", "ts", "pid", "tid"},
    "E": {"ts", "pid", "tid"},
    "i": {"name", "ts", "pid", "tid", "s"},
    "I": {"name", "ts", "pid", "tid"},
    "C": {"name", "ts", "pid", "args"},
    "M": {"name", "pid", "args"},
}
METADATA = {"process_name", "thread_name", "process_sort_index", "thread_sort_index"}


def format_problems(document: dict) -> list[str]:
    """Where ``document`` breaks the Trace Event Format's rules (an independent reading of the spec)."""
    problems = []
    events = document.get("traceEvents")
    if not isinstance(events, list):
        return ["no traceEvents list"]
    last: dict[tuple, float] = {}
    stacks: dict[tuple, list[float]] = defaultdict(list)  # open complete events' ends, per thread
    begun: dict[tuple, list[str]] = defaultdict(list)
    for n, e in enumerate(events):
        ph = e.get("ph")
        if ph not in PHASES:
            problems.append(f"event {n}: phase {ph!r}")
            continue
        missing = REQUIRED[ph] - set(e)
        if missing:
            problems.append(f"event {n} ({ph}): missing {sorted(missing)}")
            continue
        if ph == "M":
            if e["name"] not in METADATA:
                problems.append(f"event {n}: metadata {e['name']!r}")
            continue
        if not isinstance(e["ts"], int | float) or (
            ph == "X" and (not isinstance(e["dur"], int | float) or e["dur"] < 0)
        ):
            problems.append(f"event {n}: bad ts or dur")
            continue
        if ph == "C" and not all(isinstance(v, int | float) for v in e["args"].values()):
            problems.append(f"event {n}: a counter's values must be numbers")
        if ph in ("i", "I") and e.get("s", "t") not in ("t", "p", "g"):
            problems.append(f"event {n}: instant scope {e.get('s')!r}")
        track = (e["pid"], e["name"]) if ph == "C" else (e["pid"], e["tid"])
        if e["ts"] < last.get(track, float("-inf")):
            problems.append(f"event {n}: time goes back on track {track}")
        last[track] = e["ts"]
        thread = (e.get("pid"), e.get("tid"))
        if ph == "X":
            stack = stacks[thread]
            while stack and stack[-1] <= e["ts"] and not (stack[-1] == e["ts"] and e["dur"] == 0):
                stack.pop()
            end = e["ts"] + e["dur"]
            if stack and end > stack[-1] + 1e-9:
                problems.append(f"event {n}: ends after the event it starts in, on {thread}")
            stack.append(end)
        elif ph == "B":
            begun[thread].append(e["name"])
        elif ph == "E" and not begun[thread]:
            problems.append(f"event {n}: an end without a begin on {thread}")
        elif ph == "E":
            begun[thread].pop()
    problems += [f"{len(v)} begin events never ended on {k}" for k, v in begun.items() if v]
    return problems


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("trace") / "run"
    network = {
        "mode": "request",
        "transmission_time": 0.02,
        "latency": 0.005,
        "loss_probability": 0.05,
        "dropout": {"mean_online": 4.0, "mean_offline": 1.0},
    }
    run_and_write(
        tiny(
            network=network,
            owners=[{"name": "alpha"}, {"name": 'beta "b"'}, {"name": "gamma"}],
            learner={"iterations": 150},
        ),
        out,
    )
    return out


def written(run: Path, target: Path, *extra: str) -> dict:
    assert main(["timeline", str(run), "--trace", str(target), *extra]) == 0
    return json.loads(target.read_text(encoding="utf-8"))


def test_the_trace_keeps_the_formats_rules_and_the_runs_counts(run, tmp_path, capsys):
    document = written(run, tmp_path / "t.json")
    assert "ui.perfetto.dev" in capsys.readouterr().out
    assert format_problems(document) == []
    events = document["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    owners = pd.read_csv(run / "owners.csv")
    assert [names[trace.OWNER_BASE + i] for i in range(3)] == owners["name"].tolist()  # named after them
    log = pd.read_csv(run / "events.csv")
    kinds = Counter(log["kind"])
    channels = pd.read_csv(run / "channels.csv")
    cats = Counter((e["ph"], e.get("cat")) for e in events)
    assert cats[("X", "exchange")] == kinds["request"]
    assert cats[("X", "transmission")] == channels["transmissions"].sum()
    assert cats[("i", "collision")] == kinds["collision"] == channels["collided"].sum()
    assert (
        cats[("i", "update")]
        == kinds["update"]
        == json.loads((run / "summary.json").read_text())["iterations"]
    )
    assert cats[("i", "loss")] == kinds["loss"]
    assert cats[("X", "outage")] == kinds["dropout"]
    eps = [e for e in events if e["ph"] == "C" and e["name"] == "epsilon spent"]
    assert len(eps) == kinds["response"] + kinds["refusal"]
    assert len([e for e in events if e["ph"] == "C" and e["name"] == "psi"]) == len(
        pd.read_csv(run / "metrics.csv")
    )
    assert document["otherData"]["detail"] == "complete" and document["otherData"]["owners"] == "all 3 owners"


def test_the_check_finds_broken_traces(run, tmp_path):
    """The validator on deliberately broken copies: a step back in time, a child outliving its parent,
    a missing field, an unknown phase, an unmatched begin."""
    document = written(run, tmp_path / "t.json")
    events = document["traceEvents"]
    exchanges = [n for n, e in enumerate(events) if e.get("cat") == "exchange" and e["dur"] > 0]
    first, second = exchanges[0], [n for n in exchanges if events[n]["pid"] == events[exchanges[0]]["pid"]][1]

    def broken(change) -> list[str]:
        copy = json.loads(json.dumps(document))
        change(copy["traceEvents"])
        return format_problems(copy)

    assert any("time goes back" in p for p in broken(lambda ev: ev.insert(first, ev.pop(second))))
    child = next(
        n
        for n in range(first + 1, len(events))
        if events[n].get("cat") == "transmission" and events[n]["pid"] == events[first]["pid"]
    )

    def outlive(ev):
        ev[child]["dur"] = ev[first]["dur"] * 3

    assert any("ends after" in p for p in broken(outlive))
    assert any("missing" in p for p in broken(lambda ev: ev[first].pop("dur")))
    assert any("phase" in p for p in broken(lambda ev: ev[first].update(ph="Q")))
    assert any(
        "never ended" in p
        for p in broken(lambda ev: ev.append({"ph": "B", "name": "x", "ts": 1e12, "pid": 1, "tid": 1}))
    )


def test_big_runs_are_sampled_and_cut_and_say_so(run, tmp_path, monkeypatch):
    monkeypatch.setattr(trace, "MAX_OWNER_TRACKS", 2)
    monkeypatch.setattr(trace, "MAX_EVENTS", 200)
    document = written(run, tmp_path / "t.json")
    assert format_problems(document) == []
    other, events = document["otherData"], document["traceEvents"]
    assert other["owners"].startswith("2 of 3 owners") and "MAX_EVENTS = 200" in other["detail"]
    owner_pids = {e["pid"] for e in events if e["pid"] >= trace.OWNER_BASE}
    assert len(owner_pids) == 2
    assert any(e["name"] == "detail ends here" for e in events)
    detail = [e for e in events if e["ph"] != "M" and e["pid"] != trace.OVERVIEW]
    assert len(detail) < 200 + 250  # the budget, plus the ε and ψ counters read after the spans
    overview = [
        e for e in events if e["ph"] == "C" and e["pid"] == trace.OVERVIEW and e["name"] == "updates per bin"
    ]
    assert sum(e["args"]["updates per bin"] for e in overview) == 150  # the whole run, whatever the cut


def test_owners_and_window_choose_the_tracks(run, tmp_path):
    document = written(run, tmp_path / "t.json", "--owners", "gamma", "--from", "1", "--to", "3")
    assert format_problems(document) == []
    events = document["traceEvents"]
    assert {e["pid"] for e in events if e["pid"] >= trace.OWNER_BASE} == {trace.OWNER_BASE + 2}
    spans = [e for e in events if e["ph"] == "X"]
    assert spans and all(e["ts"] >= 1e6 - 1e-3 and e["ts"] + e["dur"] <= 3e6 + 1e-3 for e in spans)
    assert main(["timeline", str(run), "--trace", str(tmp_path / "u.json"), "--from", "3", "--to", "1"]) == 2
    assert not (tmp_path / "u.json").exists()


def test_a_market_in_time_has_its_counters(tmp_path):
    from tests.markets.test_dynamic import REQUEST as MARKET_NETWORK
    from tests.markets.test_dynamic import WILLING, scenario

    out = tmp_path / "run"
    market = scenario(MARKET_NETWORK, WILLING, mode="dynamic", rule="progress", period=0.5, iterations=200,
                      value=1.0)
    run_and_write(market, out)
    document = written(out, tmp_path / "t.json")
    assert format_problems(document) == []
    log = pd.read_csv(out / "events.csv")
    events = document["traceEvents"]
    counters = Counter(e["name"] for e in events if e["ph"] == "C" and e["pid"] == trace.MARKET)
    assert counters["price"] == (log["kind"] == "price").sum() > 1
    assert counters["payments"] == (log["kind"] == "payment").sum() > 0
    assert counters["participants"] == log["kind"].isin(["join", "leave"]).sum()
    paid = [e["args"]["payments"] for e in document["traceEvents"] if e.get("name") == "payments"]
    assert paid[-1] == pytest.approx(log.loc[log["kind"] == "payment", "amount"].sum())


def test_the_trace_is_written_through_a_link_and_refused_on_what_is_not_a_file(run, tmp_path, capsys):
    """``--trace LINK`` writes the file the link points to (the old command replaced the link by a
    regular file); a FIFO, a directory or a device (``/dev/null`` through a link, so that the old
    command could only have replaced the link) is one line, exit 2, left as it was."""
    target = tmp_path / "kept" / "t.json"
    target.parent.mkdir()
    target.write_text("old")
    (tmp_path / "link.json").symlink_to(target)
    document = written(run, tmp_path / "link.json")
    assert (tmp_path / "link.json").is_symlink() and format_problems(document) == []
    capsys.readouterr()
    os.mkfifo(tmp_path / "fifo.json")
    (tmp_path / "null.json").symlink_to("/dev/null")
    for name in ("fifo.json", "kept", "null.json"):
        before = os.lstat(tmp_path / name)
        assert main(["timeline", str(run), "--trace", str(tmp_path / name)]) == 2
        captured = capsys.readouterr()
        assert captured.out == "" and captured.err.count("\n") == 1
        assert captured.err.startswith(f"dpmarket: error: {tmp_path / name}: is ")
        assert "not a regular file" in captured.err
        after = os.lstat(tmp_path / name)
        assert (after.st_mode, after.st_ino) == (before.st_mode, before.st_ino)
    assert sorted(p.name for p in (tmp_path / "kept").iterdir()) == ["t.json"]
