"""The timeline command: exact figures on a hand-written event log, selections, windows, errors."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
from helpers import tiny

from dpmarket.cli import main
from dpmarket.output.figures.timeline import write as report
from dpmarket.output.results import run_and_write
from dpmarket.output.timeline import TimelineError, load_run, output_name, owner_table, select_owners

EVENTS = """time,kind,owner,k,epsilon_spent,channel,detail
0.5,tick,0,,,0,
0.5,request,0,,,0,
1.0,dropout,1,,,0,
1.5,query,0,,,0,
1.6,response,0,,0.25,0,
1.7,update,0,1,,0,
2.0,collision,2,,,0,
3.0,reconnect,1,,,0,
4.0,dropout,1,,,0,
5.0,response,2,,0.5,0,
5.1,update,2,2,,0,
6.0,tick,1,,,0,
7.0,reconnect,1,,,0,
8.0,update,0,3,,0,
"""


@pytest.fixture
def handmade(tmp_path):
    (tmp_path / "events.csv").write_text(EVENTS)
    pd.DataFrame({"owner": [0, 1, 2], "name": ["a", "b", "c"], "epsilon": [1.0, 1.0, 2.0]}).to_csv(
        tmp_path / "owners.csv", index=False)
    (tmp_path / "scenario.toml").write_text('name = "h"\n[network]\ntransmission_time = 0.1\n')
    pd.DataFrame({"channel": [0], "owners": [3], "transmissions": [5], "collided": [1],
                  "busy_time": [0.5], "utilisation": [0.0625]}).to_csv(tmp_path / "channels.csv", index=False)
    return tmp_path


def test_exact_figures_on_a_hand_written_log(handmade):
    run = load_run(handmade)
    table = owner_table(run, np.arange(3), 0.0, 8.0)
    assert table["exchanges"].tolist() == [2, 0, 1] and table["collisions"].tolist() == [0, 0, 1]
    assert table["ticks"].tolist() == [1, 1, 0]
    assert table["downtime"].tolist() == pytest.approx([0.0, 2.0 + 3.0, 0.0])
    assert table["share"].tolist() == pytest.approx([2 / 3, 0.0, 1 / 3])
    assert table["epsilon_spent"].tolist() == [0.25, 0.0, 0.5]


def test_a_window_counts_an_outage_running_at_its_start(handmade):
    table = owner_table(load_run(handmade), np.arange(3), 4.5, 6.5)
    assert table["downtime"].tolist() == pytest.approx([0.0, 2.0, 0.0])  # offline since 4.0
    assert table["exchanges"].tolist() == [0, 0, 1] and table["share"].tolist() == [0, 0, 1]
    early = owner_table(load_run(handmade), np.arange(3), 0.0, 2.0)
    assert early["epsilon_spent"].tolist() == [0.25, 0.0, 0.0]


def test_selection_by_index_name_and_range():
    names = ["a", "b", "c", "d", "e"]
    assert select_owners("0,c,3-4", names).tolist() == [0, 2, 3, 4]
    assert select_owners(None, names).tolist() == [0, 1, 2, 3, 4]
    for bad in ("zed", "9", "1-7"):
        with pytest.raises(TimelineError):
            select_owners(bad, names)


def test_report_writes_the_table_and_the_picture(handmade):
    text = report(handmade, "a,b", 0.0, 8.0)
    assert "owners in [0, 8] (2 selected)" in text and "utilisation" in text
    assert (handmade / "timeline-owners-a,b-from-0-to-8.png").read_bytes()[:4] == b"\x89PNG"
    assert text.endswith("timeline-owners-a,b-from-0-to-8.png and timeline-owners-a,b-from-0-to-8.csv")
    written = pd.read_csv(handmade / "timeline-owners-a,b-from-0-to-8.csv")
    assert written["name"].tolist() == ["a", "b"] and written["exchanges"].tolist() == [2, 0]
    assert not [p for p in handmade.iterdir() if p.name.startswith(".")]


def test_many_owners_switch_to_heat_maps(tmp_path):
    gen = np.random.default_rng(0)
    n = 200
    rows = pd.DataFrame({"time": np.sort(gen.uniform(0, 50, 3000)), "kind": "update",
                         "owner": gen.integers(0, n, 3000), "k": np.arange(1, 3001),
                         "epsilon_spent": np.nan, "channel": 0, "detail": ""})
    rows.to_csv(tmp_path / "events.csv", index=False)
    pd.DataFrame({"owner": range(n), "name": [f"o{i}" for i in range(n)], "epsilon": 1.0}).to_csv(
        tmp_path / "owners.csv", index=False)
    (tmp_path / "scenario.toml").write_text('name = "many"\n')
    text = report(tmp_path)
    assert "and 160 more owners" in text and "(all rows in timeline-all.csv)" in text
    assert (tmp_path / "timeline-all.png").stat().st_size > 1000


def test_cli_on_a_real_run_and_bad_inputs(tmp_path, capsys):
    out = tmp_path / "run"
    run_and_write(tiny(network={"mode": "request", "transmission_time": 0.01,
                                "dropout": {"mean_online": 3.0, "mean_offline": 1.0}}), out)
    assert main(["timeline", str(out), "--owners", "0-1", "--from", "1", "--to", "5"]) == 0
    assert "owners in [1, 5] (2 selected)" in capsys.readouterr().out
    for args in (["timeline", str(tmp_path / "nope")], ["timeline", str(out), "--owners", "x"],
                 ["timeline", str(out), "--from", "5", "--to", "1"]):
        assert main(args) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("dpmarket: error:")


def test_many_owners_are_grouped_into_lanes_never_dropped(tmp_path):
    """300 owners on one channel → 40 lanes of consecutive owners; a lane's offline share averages
    all its owners (owners 4 and 5 of the 8 in lane 0 offline for the whole and half of [0, 10])."""
    from dpmarket.output import spans as sp
    from dpmarket.output import views
    from dpmarket.output.figures.lanes import draw_lanes

    n = 300
    lanes = views.Lanes([f"o{i}" for i in range(n)], [0] * n, 0.0, 10.0, exchanges=1, iterations=1)
    assert lanes.by == "group" and len(lanes.labels) == 40 and lanes.members.sum() == n
    assert lanes.labels[0] == "o0 … o7 (8)"
    lanes.add(sp._spans(3, start=np.array([0.0, 0.0, 2.0]), end=np.array([10.0, 5.0, 2.5]),
                        kind=np.array([sp.OUTAGE, sp.OUTAGE, sp.EXCHANGE]), owner=np.array([4, 5, 0]),
                        outcome=np.array([0, 0, sp.APPLIED]), k=np.array([np.nan, np.nan, 1.0])))
    share = np.asarray(lanes.data("t")["offline"]) / np.asarray(1.0)
    half = views.BINS // 2
    assert np.allclose(share[0], [2 / 8] * half + [1 / 8] * half) and not share[1:].any()
    assert np.asarray(lanes.counts)[0, sp.APPLIED].sum() == 1
    draw_lanes(lanes.data("t"), tmp_path / "t.png")
    assert (tmp_path / "t.png").stat().st_size > 1000


def test_the_command_never_replaces_the_runs_own_timeline(tmp_path, capsys):
    """report.html shows the run's timeline.png: selections get files of their own, one per
    selection, so neither the run's picture nor an earlier selection's is replaced."""
    out = tmp_path / "run"
    run_and_write(tiny(output={"plots": True}), out)
    own = (out / "timeline.png").read_bytes()
    assert main(["timeline", str(out), "--owners", "0-1"]) == 0
    assert main(["timeline", str(out), "--owners", "2"]) == 0
    assert main(["timeline", str(out)]) == 0
    assert (out / "timeline.png").read_bytes() == own
    drawn = sorted(p.name for p in out.glob("timeline-*"))
    assert drawn == ["timeline-all.csv", "timeline-all.png", "timeline-owners-0-1.csv",
                     "timeline-owners-0-1.png", "timeline-owners-2.csv", "timeline-owners-2.png"]
    assert pd.read_csv(out / "timeline-owners-2.csv")["owner"].tolist() == [2]


def test_selection_names_are_safe_file_names_and_distinct():
    assert output_name(None, None, None) == "timeline-all"
    assert output_name("0-9,crouse", 1.0, 5.5) == "timeline-owners-0-9,crouse-from-1-to-5.5"
    odd = [output_name(s, None, None) for s in ("a b", "a_b", "x/y", "é" * 300)]
    assert len(set(odd)) == 4 and odd[1] == "timeline-owners-a_b"
    assert all(re.fullmatch(r"timeline-[A-Za-z0-9.,_-]{1,60}", name) for name in odd)


@pytest.mark.parametrize("spec", ["-5", "١", "0-²", "1--2"])
def test_odd_ranges_are_one_error_not_a_crash(spec):
    with pytest.raises(TimelineError, match="neither an owner name"):
        select_owners(spec, ["a", "b", "c"])


SPANS = """start,end,kind,owner,name,channel,k,outcome,detail,epsilon_spent,price,transmissions
1.0,2.0,exchange,0,a,0,1,applied,,0.5,,
0.0,5.0,outage,1,b,0,,,,,,
4.0,5.0,exchange,0,a,0,2,applied,,1.0,,
6.5,7.0,transmission,1,b,0,,lost_collision,,,,
6.5,7.0,collision_window,-1,,0,,,,,,2
6.0,7.0,exchange,1,b,0,,lost_collision,,0.5,,
"""


@pytest.fixture
def answered(handmade):
    (handmade / "spans.csv").write_text(SPANS)
    return handmade


def test_the_answers_on_hand_written_spans(answered):
    from dpmarket.output.timeline import questions

    run = load_run(answered)
    got = questions(run, np.arange(3), 0.0, 10.0)
    shares = got["shares"].set_index("name")
    assert shares["online"].tolist() == [1.0, 0.5, 1.0]
    assert shares["in_exchange"].tolist() == pytest.approx([0.2, 0.1, 0.0])
    assert shares["colliding"].tolist() == pytest.approx([0.0, 0.05, 0.0])
    assert shares["applied"].tolist() == [2, 0, 0] and shares["lost_collision"].tolist() == [0, 1, 0]
    assert got["channels"]["colliding"].tolist() == pytest.approx([0.05])
    gap = got["gaps"].iloc[0]
    assert gap[["from", "to", "length", "owner_before", "k_after"]].tolist() == [2.0, 5.0, 3.0, "a", 2]
    waits = got["waits"]
    assert waits["name"].tolist() == ["b", "c", "a"] and waits["longest_wait"].tolist() == [10.0, 10.0, 5.0]
    assert waits.iloc[2][["from", "to", "updates"]].tolist() == [5.0, 10.0, 2]
    window = questions(run, np.arange(3), 4.5, 6.6)
    assert window["happened"].to_dict("list") == {
        "kind": ["collision_window", "exchange", "exchange", "outage", "transmission"],
        "outcome": ["", "applied", "lost_collision", "", "lost_collision"], "spans": [1, 1, 1, 1, 1]}
    assert window["spans"]["start"].tolist() == [0.0, 4.0, 6.0, 6.5, 6.5]
    assert window["shares"]["online"].tolist() == pytest.approx([1.0, 1 - 0.5 / 2.1, 1.0])


def test_answers_print_as_csv_or_markdown(answered, capsys):
    assert main(["timeline", str(answered), "--format", "csv", "--table", "waits"]) == 0
    out = capsys.readouterr().out
    assert out == ("owner,name,longest_wait,from,to,updates\n"
                   "1,b,8.0,0.0,8.0,0\n2,c,8.0,0.0,8.0,0\n0,a,3.0,2.0,5.0,2\n")
    assert main(["timeline", str(answered), "--format", "markdown"]) == 0
    out = capsys.readouterr().out
    assert [line for line in out.splitlines() if line.startswith("### ")] == [
        "### shares", "### channels", "### gaps", "### waits", "### happened", "### spans"]
    assert "| 0 | a | 0 | 1 | 0.25 | 0 | 2 |" in out  # the log ends at t = 8
    assert main(["timeline", str(answered)]) == 0
    assert "waited longest: b, 8 without an update" in capsys.readouterr().out
