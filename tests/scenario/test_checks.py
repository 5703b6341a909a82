"""Rules that tie several scenario keys together (dpmarket/scenario/checks.py), each refusal a
ScenarioError naming the key to change (every key alone: tests/scenario/test_schema.py).

Budgets in market scenarios: the market sets each owner's ε, so a budget the user gives (in the
file or with --set) is refused with one line saying so, while defaults and written scenario.toml
files (which leave privacy.epsilon out) keep working, byte for byte. Then a market's keys against its
policy, the network's against its mode, δ against the accountant, a table's options against
data.source, and automatic settings against the learner."""

from __future__ import annotations

import filecmp
import re
import shlex
from pathlib import Path

import numpy as np
import pytest
from helpers import MARKET, OFFERED_MARKET, ROOT, market_toml, refusal, tiny

from dpmarket.cli import main
from dpmarket.data.problem import prepare
from dpmarket.errors import ScenarioError
from dpmarket.output.results import run_and_write
from dpmarket.scenario.loading import load, validate
from tests.data.test_table import records, write
from tests.schedule.sim.test_engine import build

NY = ROOT / "scenarios" / "ny_hospitals.toml"
MARKET_TOML = market_toml()


@pytest.mark.parametrize("sections, key", [
    ({"privacy": {"epsilon": 100.0}}, "privacy.epsilon"),
    ({"privacy": {"epsilon": 1.0}}, "privacy.epsilon"),  # given, even if equal to the default
    ({"owners": [{}, {"epsilon": 3.0}]}, "owners.1.epsilon"),
])
def test_a_budget_given_beside_a_market_is_refused_naming_the_key(sections, key):
    with pytest.raises(ScenarioError) as err:
        tiny(market=MARKET, **sections)
    assert err.value.key == key
    assert "market.price" in str(err.value) and "[market]" in str(err.value)


def test_budgets_without_a_market_are_untouched():
    s = tiny(privacy={"epsilon": 100.0}, owners=[{"epsilon": 3.0}])
    assert s.owner_value(0, "epsilon") == 3.0 and s.owner_value(1, "epsilon") == 100.0
    assert "epsilon = 100.0" in s.to_toml()  # written as before


def test_the_resolved_market_scenario_leaves_out_the_unused_budget_and_reloads_equal():
    s = tiny(market=MARKET)
    text = s.to_toml()
    assert re.search(r"^epsilon\s*=", text, re.M) is None
    assert validate(s.resolved_table(), "again") == s


def test_the_refusal_names_the_policys_own_lever():
    with pytest.raises(ScenarioError, match="market.offer_epsilon"):
        tiny(market={**MARKET, "policy": "auction", "offer_epsilon": 2.0}, privacy={"epsilon": 2.0})


def test_cli_override_is_one_line_exit_2_and_writes_nothing(tmp_path, capsys):
    path = tmp_path / "m.toml"
    path.write_text(MARKET_TOML)
    out = tmp_path / "run"
    assert main(["run", str(path), "--out", str(out), "--set", "privacy.epsilon=100"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "(with --set privacy.epsilon=100): privacy.epsilon = 100.0: not used with a [market]" in err
    assert not out.exists()


def test_a_grid_over_the_budget_of_a_market_scenario_is_refused(tmp_path, capsys):
    path = tmp_path / "m.toml"
    path.write_text(MARKET_TOML)
    assert main(["sweep", str(path), "--grid", "privacy.epsilon=1,10", "--out", str(tmp_path / "s"),
                 "--executor", "serial", "--quiet"]) == 2
    assert "(with --grid privacy.epsilon=1): privacy.epsilon" in capsys.readouterr().err


def test_rerunning_a_written_market_scenario_gives_identical_bytes(tmp_path, capsys):
    path = tmp_path / "m.toml"
    path.write_text(MARKET_TOML)
    first, second = tmp_path / "a", tmp_path / "b"
    assert main(["run", str(path), "--out", str(first), "--quiet"]) == 0
    assert main(["run", str(first / "scenario.toml"), "--out", str(second), "--quiet"]) == 0
    names = sorted(p.name for p in first.iterdir())
    assert names == sorted(p.name for p in second.iterdir())
    _, mismatch, errors = filecmp.cmpfiles(first, second, [n for n in names if n != "summary.json"],
                                           shallow=False)
    assert mismatch == [] and errors == []


def header_commands(path: Path) -> list[list[str]]:
    """The arguments of every ``python -m dpmarket ...`` command in a scenario's header comment."""
    commands = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        found = re.search(r"python -m dpmarket ([^;(]*)", line)
        if found:
            commands.append(shlex.split(found.group(1)))
    return commands


def test_the_quickstart_header_suggests_only_commands_that_do_what_they_say():
    commands = header_commands(NY)
    assert [c[0] for c in commands] == ["run", "timeline", "run"]
    for args in commands:
        if args[0] == "run":  # every suggested run is a valid scenario with its overrides
            load(ROOT / args[1], args[3::2])
    raised = [c for c in commands if "--set" in c][0]
    assert raised[raised.index("--set") + 1] == "market.price=10"
    # "buys eps = 100 (50 for the two cautious hospitals)": the market, settled, says so too
    from dpmarket.runs.pilots import market_stage

    s = load(NY, ["market.price=10"])
    eps = market_stage(s, prepare(s)).outcome.epsilon
    assert np.allclose(eps[:2], 50.0) and np.allclose(eps[2:], 100.0)
    with pytest.raises(ScenarioError, match="privacy.epsilon"):  # and what the header says is refused is
        load(NY, ["privacy.epsilon=100"])


def test_a_market_runs_topology_carries_the_budgets_sold(tmp_path):
    import networkx as nx


    s = tiny(market={**MARKET, "price": 2.0}, owners=[{}, {}, {"cost_coef": 1.0}],
             network={"mode": "request"})
    result = run_and_write(s, tmp_path / "run")
    graph = nx.read_graphml(tmp_path / "run" / "topology.graphml")
    drawn = {name: d["epsilon"] for name, d in graph.nodes(data=True) if d["kind"] == "owner"}
    sold = dict(zip(result.consortium.names, result.market.outcome.epsilon.tolist(), strict=True))
    assert drawn == pytest.approx(sold) and sorted(set(sold.values())) == [2.0, 4.0]


# --- the other keys of a section, and of other sections ---------------------------------------

@pytest.mark.parametrize("change, key", [
    ({"market": {**OFFERED_MARKET, "epsilon_min": 30.0}}, "market.epsilon_min"),
    ({"market": {**OFFERED_MARKET, "policy": "take_it_or_leave_it", "offer_epsilon": None}},
     "market.offer_epsilon"),
    ({"market": {**OFFERED_MARKET, "policy": "procurement"}}, "market.budget"),
    ({"market": {**OFFERED_MARKET, "costs": {"distribution": "uniform", "low": 2.0}}}, "market.costs.low"),
    ({"owners": [{"cost_coef": 1.0}]}, "owners.0.cost_coef"),
])
def test_bad_market_keys_are_scenario_errors_naming_the_key(change, key):
    table = {k: v for k, v in change.items()}
    if "market" in table:
        table["market"] = {k: v for k, v in table["market"].items() if v is not None}
    with pytest.raises(ScenarioError) as err:
        tiny(**table)
    assert err.value.key == key


@pytest.mark.parametrize("network,specs,key", [
    ({"mode": "request", "channels": 2}, [{}, {"channel": 2}], "owners.1.channel"),
    ({"mode": "request"}, [{"channel": 1}], "owners.0.channel"),
    ({"mode": "request", "dropout": {"mean_online": 2.0}}, None, "network.dropout"),
    ({"mode": "request", "dropout": {"mean_offline": 2.0}}, None, "network.dropout"),
    ({"mode": "request"}, [{"mean_online": 1.0}], "owners.0.mean_online"),
    ({"mode": "request"}, [{"mean_offline": 1.0}], "owners.0.mean_online"),
    ({"mode": "request", "outages": [{"start": 5.0, "end": 1.0}]}, None, "network.outages.0.end"),
    ({"mode": "request", "outages": [{"start": 0.0, "end": 1.0}, {"start": 2.0, "end": 2.0}]}, None,
     "network.outages.1.end"),
    ({"mode": "request"}, [{"outages": [{"start": 3.0, "end": 3.0}]}], "owners.0.outages.0.end"),
    ({"mode": "broadcast", "broadcast_interval": 0.1, "transmission_time": 0.2}, None,
     "network.broadcast_interval"),
    ({"mode": "broadcast", "broadcast_interval": 0.3, "transmission_time": 0.2, "latency": 0.1}, None,
     "network.broadcast_interval"),
    # carrier sensing cannot separate a slot's responders (they all start at the slot boundary)
    ({"mode": "broadcast", "carrier_sense": True}, None, "network.carrier_sense"),
    ({"transmission_time": 0.1}, None, "network.transmission_time"),
    ({"latency": 0.1}, None, "network.latency"),
    ({"loss_probability": 0.1}, None, "network.loss_probability"),
    ({"carrier_sense": True}, None, "network.carrier_sense"),
    ({"channels": 2}, None, "network.channels"),
    ({"horizon": 10.0}, None, "network.horizon"),
    ({"dropout": {"mean_online": 1.0, "mean_offline": 1.0}}, None, "network.mode"),
    ({"outages": [{"start": 0.0, "end": 1.0}]}, None, "network.mode"),
    ({"availability": "trace.csv"}, None, "network.mode"),
    ({}, [{"channel": 0}], "owners.0"),
    ({}, [{"mean_online": 1.0, "mean_offline": 1.0}], "owners.0"),
    ({}, [{"outages": [{"start": 0.0, "end": 1.0}]}], "owners.0"),
])
def test_bad_network_settings_are_rejected_naming_the_key(network, specs, key):
    with pytest.raises(ScenarioError) as err:
        build(network, owners=2, specs=specs)
    assert err.value.key == key and f"test: {key}" in str(err.value)


def test_network_engine_drives_the_async_learner_only():
    with pytest.raises(ScenarioError) as err:
        build({"mode": "request"}, learner={"algorithm": "sync"})
    assert err.value.key == "learner.algorithm"


@pytest.mark.parametrize("privacy, key, says", [
    ({"mechanism": "gaussian"}, "privacy.delta", "only for δ > 0"),
    ({"accountant": "rdp"}, "privacy.delta", "only for δ > 0"),
    ({"accountant": "pld", "delta": 0.0}, "privacy.delta", "only for δ > 0"),
])
def test_bad_privacy_keys_name_the_key(privacy, key, says):
    with pytest.raises(ScenarioError) as err:
        tiny(privacy=privacy)
    assert err.value.key == key and says in str(err.value)


def test_an_owner_without_delta_is_named():
    with pytest.raises(ScenarioError) as err:
        tiny(privacy={"accountant": "pld", "delta": 1e-6}, owners=[{}, {"delta": 0.0}])
    assert err.value.key == "owners.1.delta"


@pytest.mark.parametrize("data, key", [
    ({"source": "table", "owners": 3, "path": "x.csv", "table": {"target": "y", "blocks": 2}},
     "data.owners"),
    ({"path": "x.csv"}, "data.path"),
    ({"source": "table", "table": {"target": "y", "blocks": 2}}, "data.path"),
    ({"source": "table", "path": "x.csv", "table": {"target": "y", "numeric": ["a"]}},
     "data.table.partition"),
    ({"source": "table", "path": "x.csv",
      "table": {"target": "y", "numeric": ["a"], "blocks": 2, "max_owners": 2}}, "data.table.max_owners"),
    ({"source": "table", "path": "x.csv", "table": {"target": "y", "blocks": 2}}, "data.table.numeric"),
    ({"source": "table", "path": "x.csv",
      "table": {"target": "y", "numeric": ["a", "y"], "blocks": 2, "holdout": 5}}, "data.table.categorical"),
    ({"source": "table", "path": "x.csv",
      "table": {"target": "y", "numeric": ["a"], "blocks": 2}}, "data.table.holdout"),
    ({"source": "table", "path": "x.csv", "table": {"target": "y", "numeric": ["a"], "blocks": 2,
                                                   "standardize": False, "components": 1,
                                                   "holdout": 5}}, "data.table.components"),
    ({"source": "table", "path": "x.csv", "table": {"target": "y", "numeric": ["a"], "blocks": 2,
                                                   "holdout": 5, "label": "sign"}}, "data.table.positive"),
    ({"source": "table", "path": "x.csv", "table": {"target": "y", "numeric": ["a"], "blocks": 2,
                                                   "holdout": 5, "label": "sign",
                                                   "positive": ["1"]}}, "model.loss"),
])
def test_keys_of_the_other_source_and_inconsistent_table_options_are_rejected(data, key):
    with pytest.raises(ScenarioError) as err:
        validate({"name": "t", "data": data}, "s.toml")
    assert err.value.key == key


@pytest.fixture
def csv(tmp_path) -> Path:
    """The lending table of tests/data/test_table.py, as a CSV file."""
    return write(records(), tmp_path / "loans.csv")

def test_per_owner_records_make_no_sense_for_a_table(csv):
    with pytest.raises(ScenarioError, match=r"owners\.0\.records"):
        validate({"name": "t", "owners": [{"records": 5}],
                  "data": {"source": "table", "path": str(csv),
                           "table": {"target": "y", "numeric": ["a"], "blocks": 2, "holdout": 5}}},
                 "s.toml")


@pytest.mark.parametrize("sections, key", [
    ({"learner": {"algorithm": "sync"}}, "learner.rho"),
    ({"learner": {"algorithm": "sync_averaged"}}, "learner.rho"),
])
def test_impossible_automatic_settings_are_refused_naming_the_key(sections, key):
    err = refusal(sections)
    assert err.key == key and "bad.toml" in str(err)


# --- a sweep's base: the rules are checked on its cells (issue 43) -------------------------------------

SWITCHED = ["--set", "market.pool=2", "--set", "market.arrival_rate=0.5", "--set", "learner.iterations=50"]


def test_a_sweep_switching_a_static_scenario_to_dynamic_names_market_mode(tmp_path, capsys):
    """The base (static by default, the market in time's keys given with --set) was checked alone and
    refused naming market.arrival_rate, although the grid switches market.mode: each cell is checked
    with its own mode, and the static one names market.mode, the key the grid changed."""
    out = tmp_path / "out"
    assert main(["sweep", "banks_market", "--grid", "market.mode=static,dynamic", *SWITCHED, "--out",
                 str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err == ("dpmarket: error: banks_market (with --grid market.mode=static): market.mode = 'static': "
                   "market.arrival_rate = 0.5 is set, which only a market in time uses: remove it, or keep "
                   "market.mode = 'dynamic'\n")
    assert not out.exists()


def test_a_sweep_whose_grid_makes_every_cell_dynamic_keeps_the_market_in_time_keys():
    """--grid market.mode=dynamic on a static scenario was refused; its cells are dynamic with the pool
    and arrival rate given (a static base's resolved table keeps the market in time's keys it sets)."""
    from dpmarket.experiment.grid import parse_grid, resolve_cells
    from dpmarket.scenario.bundled import find

    texts = SWITCHED[1::2]
    with pytest.raises(ScenarioError, match="market.arrival_rate = 0.5: only used with market.mode"):
        load(find("banks_market"), texts)  # alone, as before: a static market with an arrival rate
    base = load(find("banks_market"), texts, swept=True)
    (cell,) = resolve_cells(base, parse_grid(["market.mode=dynamic"]), base.source)
    m = cell.scenario.market
    assert (m.mode, m.pool, m.arrival_rate) == ("dynamic", 2, 0.5)
    assert "pool" not in load(find("banks_market")).resolved_table()["market"]  # a valid static market
