"""Overrides (dpmarket/scenario/overrides.py): --set reaches list items and inline tables, and an owner of
a scenario without [[owners]] tables."""

from __future__ import annotations

import pytest
from helpers import tiny_toml

from dpmarket.cli import main
from dpmarket.errors import ScenarioError
from dpmarket.scenario.loading import load
from tests.test_cli import scenario


def test_overrides_reach_lists_and_inline_tables(tmp_path, capsys):
    path = scenario(tmp_path, extra='[[owners]]\nname = "first"\n')
    assert main(["validate", str(path), "--set", "owners.0.epsilon=2.5", "--set",
                 'data.records={distribution="pareto",alpha=2.0,minimum=100}', "--set",
                 "data.kind=length_of_stay"]) == 0
    out = capsys.readouterr().out
    assert "epsilon = 2.5" in out and 'distribution = "pareto"' in out and "length_of_stay" in out
    assert main(["validate", str(path), "--set", "owners.3.epsilon=1"]) == 2
    assert "owners.3" in capsys.readouterr().err


def test_set_reaches_an_owner_of_a_scenario_without_owners_tables(tmp_path):
    """``--set owners.0.epsilon=2`` (the docs' example) on a file without [[owners]]: the list grows
    with empty tables up to that owner; past data.owners it is the usual one line."""
    path = tmp_path / "s.toml"
    path.write_text(tiny_toml())
    s = load(path, ["owners.1.epsilon=2"])
    assert [s.owner_value(i, "epsilon") for i in range(3)] == [1.0, 2.0, 1.0]
    with pytest.raises(ScenarioError, match="more \\[\\[owners\\]\\] than data.owners = 3"):
        load(path, ["owners.3.epsilon=2"])
    with pytest.raises(ScenarioError, match="data.records = 300: is not a table"):
        load(path, ["data.records.0=2"])  # a number is no list to grow
