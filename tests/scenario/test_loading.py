"""Loading a scenario (dpmarket/scenario/loading.py): file paths resolve against the scenario file, --set
paths against the working directory, and a missing file is a ScenarioError naming the key; a FIFO, a device or
a directory in place of a file is refused before it is opened."""

from __future__ import annotations

import os
import subprocess
import sys
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


TABLE = ('name = "t"\n[data]\nsource = "table"\npath = "{path}"\n[data.table]\ntarget = "y"\n'
         'numeric = ["a"]\nblocks = 2\nstandardize = false\n')


def test_a_fifo_given_as_the_scenario_is_one_line_at_once(tmp_path):
    """Reading a FIFO nobody writes into blocked for ever (the old loader opened it); now the
    command ends at once, exit 2, with one line saying what the path is. In a child process with a
    time limit, so that the old behaviour fails the test instead of hanging it."""
    os.mkfifo(tmp_path / "p.toml")
    for command in ("run", "validate"):
        done = subprocess.run([sys.executable, "-m", "dpmarket", command, str(tmp_path / "p.toml")],
                              capture_output=True, text=True, timeout=60, cwd=tmp_path)
        assert done.returncode == 2 and done.stdout == "", done.stderr
        assert done.stderr == (f"dpmarket: error: {tmp_path / 'p.toml'}: is a FIFO (named pipe), not a "
                               "regular file: dpmarket reads only regular files (a FIFO or a device could "
                               "keep it waiting for ever)\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.toml"]  # nothing written


@pytest.mark.parametrize("special", ["/dev/null", "directory"])
def test_a_device_or_a_directory_as_the_scenario_names_what_it_is(tmp_path, special):
    """The old loader read ``/dev/null`` as an empty scenario (a confusing 'name: required') and
    named a directory by the exception class ('cannot read: IsADirectoryError')."""
    path = Path(special) if special.startswith("/") else tmp_path
    what = "a character device" if special.startswith("/") else "a directory"
    with pytest.raises(ScenarioError, match=f"^{path}: is {what}, not a regular file"):
        load(path)


@pytest.mark.parametrize("key", ["data.path", "network.availability"])
def test_a_fifo_named_by_the_scenario_is_refused_by_its_key_saying_what_it_is(tmp_path, monkeypatch, key):
    """A table or an availability trace that is a FIFO: the old message said 'no such file' of a
    file that exists (and a reader would have blocked on it)."""
    os.mkfifo(tmp_path / "fifo.csv")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.toml").write_text(TABLE.format(path="fifo.csv") if key == "data.path" else
                                     'name = "t"\n[network]\nmode = "request"\navailability = "fifo.csv"\n')
    with pytest.raises(ScenarioError) as refused:
        load(tmp_path / "s.toml")
    assert refused.value.key == key and "is a FIFO (named pipe)" in refused.value.reason
    assert "\n" not in str(refused.value)
