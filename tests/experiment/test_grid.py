"""Grids (dpmarket/experiment/grid.py): --grid texts split into axes, malformed or repeated axes refused as
scenario errors, on the command line too."""

from __future__ import annotations

import pytest
from helpers import tiny

from dpmarket.cli import main
from dpmarket.errors import ScenarioError
from dpmarket.experiment.grid import parse_axis, parse_grid, split_values


def test_values_split_outside_brackets_and_quotes():
    assert split_values('1, 2.5,"a,b"') == ["1", "2.5", '"a,b"']
    text = '{distribution="pareto", alpha=1.5},[1, 2]'
    assert split_values(text) == ['{distribution="pareto", alpha=1.5}', "[1, 2]"]
    axis = parse_axis("data.records=" + text)
    assert axis.values == ({"distribution": "pareto", "alpha": 1.5}, [1, 2])
    assert parse_axis("network.mode=ideal,request").values == ("ideal", "request")


@pytest.mark.parametrize("text", ["privacy.epsilon", "privacy.epsilon=", "privacy.epsilon=1,,2", "=1,2"])
def test_malformed_grid_options_are_scenario_errors(text):
    with pytest.raises(ScenarioError, match="expected dotted.key=v1,v2"):
        parse_axis(text)


def test_a_key_swept_twice_or_the_run_seed_is_refused():
    with pytest.raises(ScenarioError, match="two --grid"):
        parse_grid(["privacy.epsilon=1", "privacy.epsilon=2"])
    with pytest.raises(ScenarioError, match="sweep data.seed"):
        parse_grid(["seed=1,2"])


def test_bad_grid_on_the_command_line_is_one_line_exit_2_and_writes_nothing(tmp_path, capsys):
    path = tmp_path / "s.toml"
    path.write_text(tiny().to_toml())
    out = tmp_path / "out"
    code = main(["sweep", str(path), "--grid", "privacy.epsilon=1,0", "--out", str(out), "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "privacy.epsilon = 0" in err
    assert not out.exists()
