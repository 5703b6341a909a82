"""The notebook API: ``dpmarket.runs.run`` / ``replicate`` / ``sweep`` / ``market`` return DataFrames with
the seed in every row, write files only into ``out`` (and then exactly the command's files), raise
the project's exceptions, and ``import dpmarket`` imports nothing heavy."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers import MARKET as POSTED_PRICE
from helpers import tiny, tiny_toml
from hypothesis import given
from hypothesis import strategies as st

import dpmarket
from dpmarket import api, rng
from dpmarket.cli import main
from dpmarket.errors import DPMarketError, ScenarioError
from dpmarket.scenario.overrides import parse_override
from dpmarket.system import files

ROOT = Path(__file__).resolve().parents[1]
MARKET = {**POSTED_PRICE, "offer_epsilon": 2.0}


@pytest.fixture
def tiny_file(tmp_path) -> Path:
    path = tmp_path / "tiny.toml"
    path.write_text(tiny_toml())
    return path


@pytest.fixture
def nowhere(tmp_path, monkeypatch) -> Path:
    """An empty working and temporary directory: whatever a call leaves behind shows up here."""
    work = tmp_path / "work"
    (work / "tmp").mkdir(parents=True)
    monkeypatch.chdir(work)
    monkeypatch.setattr("tempfile.tempdir", str(work / "tmp"))
    return work


def leftovers(directory: Path) -> list[str]:
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if p.name != "tmp")


# --- import ----------------------------------------------------------------------------------------

def test_import_dpmarket_imports_nothing_heavy():
    code = ("import sys, dpmarket; heavy = ('numpy', 'pandas', 'pydantic', 'scipy', 'dpmarket.runs.run', "
            "'dpmarket.api'); print([m for m in heavy if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=ROOT).stdout
    assert out.strip() == "[]"


def test_the_api_names_are_the_functions_whatever_else_is_imported():
    """``dpmarket.run`` and ``dpmarket.market`` are the API's functions, not modules made callable
    (issue 23): importing the packages of runs and markets does not shadow them."""
    import importlib
    import inspect
    import types

    import dpmarket.markets.policies  # noqa: F401
    import dpmarket.runs.run  # noqa: F401

    assert dpmarket.run is api.run and dpmarket.market is api.market
    assert dpmarket.replicate is api.replicate and dpmarket.sweep is api.sweep and dpmarket.load is api.load
    assert isinstance(dpmarket.run, types.FunctionType)
    assert "overrides" in str(inspect.signature(dpmarket.run))
    assert dpmarket.run.__doc__ == api.run.__doc__
    for name in dpmarket.__all__:
        assert getattr(dpmarket, name) is not None, name
    callable_modules = [name for name, module in list(__import__("sys").modules.items())
                        if name.startswith("dpmarket") and callable(module)]
    assert callable_modules == []
    assert importlib.import_module("dpmarket.runs.run").execute  # the modules keep their contents
    with pytest.raises(AttributeError):
        dpmarket.nothing_here  # noqa: B018


def test_help_of_dpmarket_run_shows_the_function_not_a_module():
    """``help(dpmarket.run)`` (pydoc) documents the function and its arguments, as the docs say; it
    showed the module dpmarket.run before the restructure (issue 25, item 5)."""
    import pydoc

    for name in ("run", "market", "sweep", "replicate", "load"):
        text = pydoc.render_doc(getattr(dpmarket, name), renderer=pydoc.plaintext)
        heading = f"Python Library Documentation: function {name} in module dpmarket.api"
        assert text.startswith(heading), text[:80]
        assert f"{name}(scenario" in text and "NAME\n" not in text  # NAME: the heading of a module's page


# --- one run ---------------------------------------------------------------------------------------

def test_a_run_without_out_writes_nothing_and_returns_every_table(tiny_file, nowhere):
    result = dpmarket.run(tiny_file, seed=9)
    assert leftovers(nowhere) == [] and list((nowhere / "tmp").iterdir()) == []
    assert result.out is None and result.scenario.seed == 9 and result.summary["seed"] == 9
    for frame in (result.metrics, result.owners, result.events):
        assert list(frame.columns)[0] == "seed" and (frame["seed"] == 9).all() and len(frame) > 0
    assert list(result.metrics.columns) == ["seed", "k", "time", "psi"]
    assert result.metrics["psi"].iloc[-1] == result.summary["psi_final"]
    assert set(result.events["kind"].astype(str)) >= {"query", "response", "update"}
    assert (result.events["kind"] == "update").sum() == result.summary["iterations"]
    assert len(result.owners) == result.summary["owners"]


def test_a_run_into_out_writes_the_commands_files_and_the_same_tables(tiny_file, tmp_path):
    out = tmp_path / "run"
    written = dpmarket.run(tiny_file, out=out)
    memory = dpmarket.run(tiny_file)
    assert written.out == out and (out / "report.html").is_file()
    pd.testing.assert_frame_equal(written.metrics.drop(columns="seed"), pd.read_csv(out / "metrics.csv"))
    events = pd.read_csv(out / "events.csv")
    assert list(written.events.columns[1:]) == list(events.columns) and len(events) == len(written.events)
    assert written.events["kind"].astype(str).tolist() == events["kind"].tolist()
    assert written.events["time"].tolist() == events["time"].tolist()
    assert written.events["k"].astype("Float64").fillna(-1).tolist() == events["k"].fillna(-1).tolist()
    pd.testing.assert_frame_equal(written.metrics, memory.metrics)
    pd.testing.assert_frame_equal(written.events, memory.events)
    pd.testing.assert_frame_equal(written.owners, memory.owners)
    owners = pd.read_csv(out / "owners.csv")
    assert list(written.owners.columns[1:]) == list(owners.columns)
    assert written.owners["epsilon_spent"].tolist() == owners["epsilon_spent"].tolist()
    stored = json.loads((out / "summary.json").read_text())
    assert {k: v for k, v in stored.items() if k != "wall_seconds"} == json.loads(files.dumps(
        {k: v for k, v in memory.summary.items() if k != "wall_seconds"}))
    # and the command writes the same bytes
    assert main(["run", str(tiny_file), "--out", str(tmp_path / "cli"), "--quiet"]) == 0
    assert (tmp_path / "cli" / "events.csv").read_bytes() == (out / "events.csv").read_bytes()


def test_overrides_as_mapping_or_texts_and_scenario_objects_are_the_same(tiny_file):
    as_map = api.load(tiny_file, overrides={"privacy.epsilon": 100, "data.records": [100, 200, 300],
                                            "learner.rho": "auto", "network.mode": "ideal"})
    as_text = api.load(tiny_file, overrides=["privacy.epsilon=100", "data.records=[100, 200, 300]",
                                             'learner.rho="auto"', "network.mode=ideal"])
    assert as_map == as_text and as_map.privacy.epsilon == 100.0 and as_map.data.records == [100, 200, 300]
    base = api.load(tiny_file)
    assert api.load(base, seed=4, overrides={"privacy.epsilon": 100, "data.records": [100, 200, 300],
                                             "learner.rho": "auto"}) == api.load(as_map, seed=4)
    assert api.load(base) is base  # nothing to apply: the scenario itself


def test_a_bundled_name_is_a_scenario():
    assert api.load("ny_hospitals").name == "ny_hospitals"


def test_without_events_the_run_keeps_no_log(tiny_file):
    result = dpmarket.run(tiny_file, events=False)
    assert result.events is None and len(result.metrics) > 0


@pytest.mark.parametrize("call, message", [
    (lambda f: dpmarket.run(f, overrides={"data.owners": 0}), "data.owners = 0"),
    (lambda f: dpmarket.run(f, overrides={"learner.nope": 1}), "unknown key"),
    (lambda f: dpmarket.run("no_such_example"), "nor a bundled scenario"),
    (lambda f: dpmarket.run(f, overrides={"data.records": object()}), "has no TOML form"),
    (lambda f: dpmarket.market(f, ["auction"]), "needs a [market] section"),
    (lambda f: dpmarket.run(tiny(market=MARKET), overrides={"privacy.epsilon": 3}),
     "not used with a [market]"),
    (lambda f: dpmarket.replicate(f, 0, executor="serial"), "must be at least 1"),
    (lambda f: dpmarket.replicate(f, 2, workers=0), "workers = 0: must be at least 1"),
    (lambda f: dpmarket.sweep(f, {"seed": [1, 2]}, executor="serial"), "replication seeds"),
])
def test_errors_are_the_projects_exceptions_not_exits(tiny_file, call, message):
    with pytest.raises(DPMarketError) as err:
        call(tiny_file)
    assert message in str(err.value) and "\n" not in str(err.value)


# --- replications and sweeps ---------------------------------------------------------------------

def test_replications_have_the_commands_seeds_and_a_row_per_run(tiny_file, nowhere):
    reps = dpmarket.replicate(tiny_file, 4, seed=11, executor="serial")
    assert leftovers(nowhere) == []
    seeds = rng.replication_seeds(11, 4)
    assert reps.runs["seed"].tolist() == seeds and reps.runs["replication"].tolist() == [0, 1, 2, 3]
    assert sorted(set(reps.metrics["seed"])) == sorted(seeds)
    assert len(reps.owners) == 4 * 3 and set(reps.owners["seed"]) == set(seeds)
    assert reps.summary["psi_mean"] == pytest.approx(reps.runs["psi_final"].mean())
    # replication r is the run of its seed, on the data of the base seed
    third = dpmarket.run(tiny_file, seed=seeds[2], overrides={"data.seed": 11}, events=False)
    assert reps.runs["psi_final"][2] == third.summary["psi_final"]
    same = dpmarket.run(tiny_file, seed=11, replications=4, executor="serial")
    pd.testing.assert_frame_equal(same.runs, reps.runs)


def test_replications_into_out_match_the_files_and_other_executors(tiny_file, tmp_path):
    out = tmp_path / "reps"
    written = dpmarket.replicate(tiny_file, 3, out=out, executor="process", workers=2)
    memory = dpmarket.replicate(tiny_file, 3, executor="serial")
    for frame in ("runs", "metrics", "owners"):
        pd.testing.assert_frame_equal(getattr(written, frame), getattr(memory, frame))
    on_disk = pd.read_csv(out / "replications.csv")
    assert on_disk["psi_final"].tolist() == written.runs["psi_final"].tolist()
    assert on_disk["seed"].tolist() == written.runs["seed"].tolist()
    metrics = pd.read_csv(out / "metrics.csv")
    assert metrics["psi"].tolist() == written.metrics["psi"].tolist()


def test_a_sweep_is_the_commands_sweep(tiny_file, tmp_path, nowhere):
    grid = {"privacy.epsilon": [1, 10.5], "data.records": [{"distribution": "uniform", "minimum": 100,
                                                            "maximum": 300}, 200]}
    texts = api.grid_texts(grid)
    assert texts == ["privacy.epsilon=1,10.5",
                     'data.records={distribution = "uniform", minimum = 100, maximum = 300},200']
    memory = dpmarket.sweep(tiny_file, grid, replications=2, executor="serial")
    assert leftovers(nowhere) == []
    out = tmp_path / "sweep"
    assert main(["sweep", str(tiny_file), *[a for t in texts for a in ("--grid", t)], "--replications", "2",
                 "--out", str(out), "--executor", "serial", "--quiet"]) == 0
    on_disk = pd.read_csv(out / "sweep.csv")
    assert len(memory.cells) == 4 and list(memory.cells.columns) == list(on_disk.columns)
    assert memory.cells["psi_mean"].tolist() == on_disk["psi_mean"].tolist()
    assert memory.runs.groupby("cell")["psi_final"].mean().tolist() == on_disk["psi_mean"].tolist()
    assert len(memory.runs) == 8 and memory.runs["privacy.epsilon"].tolist() == [1] * 4 + [10.5] * 4
    assert memory.runs["seed"].tolist() == rng.replication_seeds(5, 2) * 4
    written = dpmarket.sweep(tiny_file, texts, replications=2, executor="serial", out=tmp_path / "api")
    pd.testing.assert_frame_equal(written.cells, memory.cells)
    assert (tmp_path / "api" / "sweep.csv").read_bytes() == (out / "sweep.csv").read_bytes()


# --- market comparisons --------------------------------------------------------------------------

def test_a_market_comparison_is_the_commands(tmp_path, nowhere):
    path = tmp_path / "m.toml"
    path.write_text(tiny(market=MARKET).to_toml())
    memory = dpmarket.market(path, ["posted_price", "auction"], replications=2)
    assert leftovers(nowhere) == []
    out = tmp_path / "cmp"
    written = dpmarket.market(path, "posted_price,auction", replications=2, out=out, workers=2)
    pd.testing.assert_frame_equal(memory.policies, written.policies)
    pd.testing.assert_frame_equal(memory.runs, written.runs)
    policies = pd.read_csv(out / "policies.csv")
    assert policies["psi_mean"].tolist() == memory.policies["psi_mean"].tolist()
    assert memory.runs.groupby("policy", sort=False)["psi"].mean().tolist() == policies["psi_mean"].tolist()
    seeds = json.loads((out / "summary.json").read_text())["seeds"]
    assert memory.runs["seed"].tolist() == seeds * 2 and memory.summary["seeds"] == seeds
    assert (memory.owners["seed"] == 3).all() and len(memory.owners) == 2 * 3


# --- overrides as TOML ------------------------------------------------------------------------------

SCALARS = (st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=20)
           | st.floats(allow_nan=False))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.text(min_size=1, max_size=8), inner, max_size=3), max_leaves=8)


@given(VALUES)
def test_a_python_value_reads_back_as_itself_through_set(value):
    parsed = parse_override(f"k={api.toml_value(value)}")[1]
    assert parsed == value


def test_non_finite_and_numpy_values_have_toml_forms():
    assert [parse_override(f"k={api.toml_value(v)}")[1] for v in (np.float64(2.5), np.int64(3))] == [2.5, 3]
    assert parse_override(f"k={api.toml_value(np.array([1.0, 2.0]))}")[1] == [1.0, 2.0]
    assert math.isinf(parse_override(f"k={api.toml_value(-math.inf)}")[1])
    assert math.isnan(parse_override(f"k={api.toml_value(math.nan)}")[1])
    with pytest.raises(ScenarioError, match="records"):
        api.toml_value({1, 2}, "records")
