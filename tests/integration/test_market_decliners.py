"""Markets where some owners decline, through every command that trains: run, run --replications,
sweep and market. An owner that declines appears in every owner table with participates = false,
ε = 0 and no answers; the others train on the deal the market settled under the scenario's seed,
the same deal in every command."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from helpers import EVERY_LEVER, tiny

from dpmarket.cli import main
from dpmarket.scenario.schema import POLICIES
from dpmarket.schedule.roster import Roster

# Four owners from privacy-indifferent (c = 0.05) to very averse (c = 10), a budget of 5 and
# constant forecast terms (no pilots): each policy leaves one to three of them out.
OWNERS = [{"cost_coef": 0.05}, {"cost_coef": 0.5}, {"cost_coef": 10.0}, {"cost_coef": 0.2}]


def scenario_file(tmp_path: Path, policy: str, **sections) -> Path:
    s = tiny(market={**EVERY_LEVER, "policy": policy}, owners=OWNERS, data={"owners": 4}, **sections)
    path = tmp_path / f"{policy}.toml"
    path.write_text(s.to_toml(), encoding="utf-8")
    return path


def read(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def cli(*args) -> None:
    quiet = ["--quiet"] if args[0] in ("run", "sweep") else []
    assert main([*map(str, args), *quiet]) == 0


def deal(rows: list[dict]) -> list[tuple[bool, float]]:
    """(participates, ε) per owner, from any of the owner tables."""
    return [(r["participates"] == "True", float(r["epsilon"])) for r in rows]


def check_run(out: Path) -> list[tuple[bool, float]]:
    """A run directory: decliners answer nothing and have ε = 0; members stay within budget."""
    owners = read(out / "owners.csv")
    assert [int(r["owner"]) for r in owners] == [0, 1, 2, 3]
    summary = json.loads((out / "summary.json").read_text())
    joined = [r for r in owners if r["participates"] == "True"]
    assert 0 < summary["participants"] == len(joined) < 4  # someone declines, someone joins
    for r in owners:
        if r["participates"] == "False":
            assert float(r["epsilon"]) == 0.0 and r["queries"] == r["answers"] == "0"
            assert float(r["epsilon_spent"]) == 0.0 and r["benefits"] == "False"
        else:
            assert 0 < float(r["epsilon_spent"]) <= float(r["epsilon"])
            assert int(r["answers"]) <= int(r["answer_cap"])
    events = read(out / "events.csv")
    talking = {int(e["owner"]) for e in events if int(e["owner"]) >= 0}
    assert talking == {int(r["owner"]) for r in joined}  # events name owners by scenario index
    assert summary["owners_benefiting"] == sum(r["benefits"] == "True" for r in owners)
    assert (out / "report.html").stat().st_size > 0
    return deal(owners)


@pytest.mark.parametrize("policy", POLICIES)
def test_every_policy_with_decliners_runs_replicates_and_sweeps(tmp_path, policy):
    path = scenario_file(tmp_path, policy)
    cli("run", path, "--out", tmp_path / "run")
    settled = check_run(tmp_path / "run")

    cli("run", path, "--replications", "2", "--executor", "serial", "--out", tmp_path / "reps")
    owners = read(tmp_path / "reps" / "owners.csv")
    assert deal(owners) == settled  # the replications train on the run's deal
    assert all(float(r["benefit_share"]) == 0.0 for r in owners if r["participates"] == "False")
    reps = read(tmp_path / "reps" / "replications.csv")
    assert len(reps) == 2 and all(int(r["owners_benefiting"]) <= len([p for p, _ in settled if p])
                                  for r in reps)

    cli("sweep", path, "--grid", "learner.rho=2.0,3.0", "--executor", "serial", "--out", tmp_path / "sweep")
    rows = read(tmp_path / "sweep" / "sweep_owners.csv")
    for cell in ("0", "1"):
        assert deal([r for r in rows if r["cell"] == cell]) == settled
    members = [e for p, e in settled if p]
    for row in read(tmp_path / "sweep" / "sweep.csv"):  # ε's harmonic mean is the participants'
        assert float(row["epsilon_harmonic"]) == pytest.approx((len(members) / sum(e**-2 for e in members))
                                                               ** 0.5)
        assert row["forecast"] not in ("", "nan", "inf")


def test_the_market_command_settles_the_same_deals(tmp_path):
    path = scenario_file(tmp_path, "posted_price")
    cli("market", path, "--policies", ",".join(POLICIES), "--out", tmp_path / "market")
    table = read(tmp_path / "market" / "market.csv")
    for policy in ("posted_price", "auction"):
        cli("run", scenario_file(tmp_path, policy), "--out", tmp_path / policy)
        assert deal([r for r in table if r["policy"] == policy]) == check_run(tmp_path / policy)


def test_a_network_run_with_decliners_writes_uniform_owner_rows(tmp_path):
    """The report reads owners.csv's rows by the first row's keys: a decliner first must not break it."""
    network = {"mode": "request", "transmission_time": 0.01,
               "dropout": {"mean_online": 5.0, "mean_offline": 1.0}}
    owners = [{"cost_coef": 10.0}, {"cost_coef": 0.05}, {"cost_coef": 0.5}, {"cost_coef": 0.2}]
    s = tiny(market={**EVERY_LEVER, "policy": "auction"}, owners=owners, data={"owners": 4}, network=network)
    path = tmp_path / "net.toml"
    path.write_text(s.to_toml(), encoding="utf-8")
    cli("run", path, "--out", tmp_path / "net")
    check_run(tmp_path / "net")
    rows = read(tmp_path / "net" / "owners.csv")
    assert rows[0]["participates"] == "False" and rows[0]["ticks"] == rows[0]["downtime"] == ""
    assert all(r["ticks"] != "" for r in rows if r["participates"] == "True")
    cli("timeline", tmp_path / "net")


def test_the_roster_maps_scenario_owners_to_participant_slots():
    roster = Roster(5, (1, 3, 4))
    assert [roster.slot(i) for i in range(5)] == [None, 0, None, 1, 2]
    assert roster.participates.tolist() == [False, True, False, True, True]
    assert roster.spread([2.0, 3.0, 4.0], 0.0) == [0.0, 2.0, 0.0, 3.0, 4.0]
    with pytest.raises(ValueError, match="2 values for 3 participants"):
        roster.spread([1.0, 2.0], 0.0)
    for members in [(3, 1), (1, 1), (5,), (-1,)]:
        with pytest.raises(ValueError, match="not increasing indices"):
            Roster(5, members)
