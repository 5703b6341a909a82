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


@pytest.mark.parametrize("spec", ["١", "0-²", "1--2"])
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


# --- issue 43: selections, windows and half-written runs, each refused by name -------------------------

@pytest.mark.parametrize("spec, says", [
    ("5-2", "'5-2' is an empty range (from the smaller index: 2-5)"),  # was an IndexError
    ("", "--owners '': names no owner"), (" , ", "--owners ' , ': names no owner"),  # were: every owner
    ("0-", "'0-' is a range without its end"), ("-5", "'-5' is a range without its start"),  # 0- was owner 0
    ("0-1000000000", "range 0-1000000000 is beyond the run's 3 owners (0-2)"),
    ("1,99999999999999999999999", "index 99999999999999999999999 is beyond the run's 3 owners (0-2)"),
])
def test_a_selection_the_run_cannot_give_is_refused_before_it_is_expanded(spec, says):
    """0-1000000000 on a 3-owner run built a list of 10^9 indices (minutes) before saying so."""
    from helpers import deadline

    with deadline(5), pytest.raises(TimelineError) as caught:
        select_owners(spec, ["a", "b", "c"])
    assert says in str(caught.value)


@pytest.mark.parametrize("window, says", [
    (["--from", "nan"], "--from nan: not a finite time"),
    (["--from", "1e308", "--to", "1e309"], "--to inf: not a finite time"),
    (["--from", "1e307", "--to", "1.7e308"], "--from 1e+307 --to 1.7e+308: too large for 64-bit floats"),
    (["--from", "9"], "--from 9 (the run ends at t = 8): the window is empty"),
    (["--to", "-1"], "--to -1 (from 0): the window is empty"),
])
@pytest.mark.parametrize("trace", [False, True])
def test_a_window_no_axis_can_show_is_one_line(handmade, capsys, window, says, trace):
    """--from nan and --from 1e308 --to 1e309 reached matplotlib's axis error, with or without a trace."""
    (handmade / "summary.json").write_text('{"simulated_time": 8.0}')
    (handmade / "metrics.csv").write_text("k,time,psi\n0,0.0,1.0\n")
    extra = ["--trace", str(handmade / "t.json")] if trace else []
    assert main(["timeline", str(handmade), *window, *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"dpmarket: error: {says}") and err.count("\n") == 1, err
    assert not (handmade / "t.json").exists() and not list(handmade.glob("timeline-*"))


def test_a_trace_refuses_times_beyond_its_nanoseconds(handmade, capsys):
    """A Chrome trace writes whole nanoseconds in 64 bits: --to 1e300 wrote overflowed timestamps."""
    (handmade / "metrics.csv").write_text("k,time,psi\n0,0.0,1.0\n")
    assert main(["timeline", str(handmade), "--to", "1e300", "--trace", str(handmade / "t.json")]) == 2
    assert capsys.readouterr().err == ("dpmarket: error: --to 1e+300 (from 0): beyond t = ±9.22e+09, the "
                                       "times a trace holds (whole nanoseconds in 64 bits)\n")


def _damage(directory, how: str) -> None:
    """events.csv (and the spans.csv paired from it) as a run left half-written would have it."""
    events = directory / "events.csv"
    text = events.read_text()
    events.write_text({"empty": "", "garbage": "hello world\n\x00garbage,,,\n",
                       "truncated": text[:len(text) // 2 + 3], "header": text.splitlines()[0] + "\n",
                       "bad row": text.replace("1.5,query,0", "1.5,query,zero"),
                       "short row": text.replace("2.0,collision,2,,,0,", "2.0,collision")}[how])
    (directory / "spans.csv").unlink(missing_ok=True)


@pytest.mark.parametrize("how, says", [
    ("empty", "events.csv: empty: the run directory is damaged or was not written whole"),
    ("garbage", "events.csv: its first line is b'hello world\\n', not the header time,kind,owner,k,"
                "epsilon_spent,channel,detail: the run directory is damaged"),
    ("truncated", "events.csv: ends in the middle of a line (cut short): the run directory is damaged"),
    ("header", "events.csv: no events (only its header): nothing happened in the run, or it was not "
               "written whole; there is no timeline to show"),
    ("bad row", "events.csv: cannot be read ("),
    ("short row", "events.csv: cannot be read ("),
])
@pytest.mark.parametrize("trace", [False, True])
def test_a_half_written_run_is_refused_by_name(handmade, capsys, how, says, trace):
    """Each was a traceback (pandas' EmptyDataError or casting errors; with --trace "generator raised
    StopIteration" or zip's length error); a header-only log said "--from 0 --to 0: the window is
    empty" though no window was given."""
    (handmade / "metrics.csv").write_text("k,time,psi\n0,0.0,1.0\n")
    _damage(handmade, how)
    extra = ["--trace", str(handmade / "t.json")] if trace else []
    assert main(["timeline", str(handmade), *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"dpmarket: error: {handmade / 'events.csv'}") and says in err, err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not (handmade / "t.json").exists() and not list(handmade.glob("timeline-*"))


@pytest.mark.parametrize("name, text, says", [
    ("spans.csv", "start,end,kind\n1.0,2.0,exchange\n", "spans.csv: its first line is"),
    ("spans.csv", SPANS[:-20], "spans.csv: ends in the middle of a line"),
    ("owners.csv", "owner,label\n0,a\n", "owners.csv: no column 'name'"),
    ("scenario.toml", "name = \n", "scenario.toml: cannot be read (Invalid value"),
    ("summary.json", "{\"stop_reason\": ", "summary.json: cannot be read (Expecting value"),
    ("metrics.csv", "k,time\n0,0.0\n", "metrics.csv: no columns time and psi"),
])
def test_every_file_the_timeline_reads_is_refused_by_name_when_damaged(handmade, capsys, name, text, says):
    (handmade / "metrics.csv").write_text("k,time,psi\n0,0.0,1.0\n")
    (handmade / "summary.json").write_text("{}")
    (handmade / name).write_text(text)
    extra = [] if name in ("owners.csv", "scenario.toml") else ["--trace", str(handmade / "t.json")]
    assert main(["timeline", str(handmade), *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"dpmarket: error: {handmade / name}") and says in err and err.count("\n") == 1, err
