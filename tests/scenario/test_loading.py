"""Loading a scenario (dpmarket/scenario/loading.py): file paths resolve against the scenario file, --set
paths against the working directory, and a missing file is a ScenarioError naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from dpmarket.errors import ScenarioError
from dpmarket.scenario.loading import load
from tests.data.test_table import records, write


@pytest.fixture
def csv(tmp_path) -> Path:
    """The lending table of tests/data/test_table.py, as a CSV file."""
    return write(records(), tmp_path / "loans.csv")


def test_data_path_is_relative_to_the_file_and_set_paths_to_the_working_directory(
        csv, tmp_path, monkeypatch):
    sub = tmp_path / "scenarios"
    sub.mkdir()
    (sub / "s.toml").write_text('name = "t"\n[data]\nsource = "table"\npath = "../loans.csv"\n'
                                '[data.table]\ntarget = "y"\nnumeric = ["a"]\nblocks = 2\n'
                                'standardize = false\n')
    assert load(sub / "s.toml").data.path == str(csv)
    monkeypatch.chdir(tmp_path)
    assert load(sub / "s.toml", ["data.path=loans.csv"]).data.path == str(csv)
    with pytest.raises(ScenarioError, match=r"data\.path = .*nowhere\.csv.*no such file"):
        load(sub / "s.toml", ["data.path=nowhere.csv"])
