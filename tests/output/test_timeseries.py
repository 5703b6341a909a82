"""The market-series helper's errors: a project error naming the directory, never pandas' or the OS's
bare exception (issue 24); the series themselves are checked in tests/markets/test_dynamic.py."""

from __future__ import annotations

import pytest

from dpmarket.errors import DPMarketError, MissingRunError, RunDirectoryError
from dpmarket.output.timeseries import market_series


def test_a_missing_run_is_a_project_error_that_is_also_file_not_found(tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(FileNotFoundError) as caught:
        market_series(missing)
    assert isinstance(caught.value, MissingRunError) and isinstance(caught.value, DPMarketError)
    assert str(caught.value) == (f"{missing}: no such directory: expected a run directory written by "
                                 "`dpmarket run`")


def test_a_file_where_a_run_should_be_is_refused_naming_it(tmp_path):
    path = tmp_path / "file"
    path.write_text("x")
    with pytest.raises(MissingRunError, match="not a directory"):
        market_series(path)


@pytest.mark.parametrize("files, message", [
    ({}, "not a run directory (no events.csv)"),
    ({"events.csv": "time,kind\n", "metrics.csv": "k,time,psi\n0,0,1\n"}, "not a run of a market in time"),
    ({"events.csv": b"\xff\xfe\x00garbage", "metrics.csv": "k\n"}, "is damaged"),
])
def test_a_directory_that_is_not_a_market_run_is_one_line_naming_it(tmp_path, files, message):
    for name, content in files.items():
        (tmp_path / name).write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(RunDirectoryError) as caught:
        market_series(tmp_path)
    assert message in str(caught.value) and str(tmp_path) in str(caught.value)
    assert "\n" not in str(caught.value)
