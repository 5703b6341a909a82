"""Results never depend on a cache (issue 24; F6 of issue 28): the same command gives the same bytes
with a cold forecast cache and a warm one, under either replay kernel, and a table rewritten at the
same path is read anew — its ρ, Ξ, data and forecast are never those of the file it replaced.

Only ``wall_seconds`` (summary.json's how-long-it-took) differs between two runs of one command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import MARKET, small_toml

from dpmarket.cli import main
from dpmarket.data import proxy
from dpmarket.experiment import task
from dpmarket.runs import pilots
from dpmarket.scenario.loading import load
from dpmarket.system import files
from tests.data.test_table import records, write


def published(directory: Path) -> dict[str, bytes]:
    """Every file of a run or market directory, summary.json without its wall time."""
    out = {}
    for path in sorted(directory.iterdir()):
        data = path.read_bytes()
        if path.name == "summary.json":
            summary = json.loads(data)
            summary.pop("wall_seconds", None)
            data = json.dumps(summary, sort_keys=True).encode()
        out[path.name] = data
    return out


@pytest.fixture
def market_file(tmp_path, monkeypatch):
    """A small market whose forecast is calibrated by pilot runs, and a cache of its own (cold)."""
    monkeypatch.setenv(pilots.CACHE_ENV, str(tmp_path / "cache"))
    market = {**{k: v for k, v in MARKET.items() if k != "forecast"}, "offer_epsilon": 2.0,
              "pilots": {"levels": 2, "subsets": 2, "replications": 1, "epsilon_low": 1.0,
                         "epsilon_high": 10.0}}
    path = tmp_path / "m.toml"
    path.write_text(small_toml(name="m", seed=4, learner={"iterations": 60, "rho": "auto"},
                               output={"metric_points": 10, "plots": False}, market=market))
    return path


@pytest.mark.parametrize("command", [["run"], ["market", "--policies", "posted_price,auction",
                                                "--replications", "2"]])
def test_the_same_command_gives_the_same_bytes_with_a_cold_or_a_warm_cache(market_file, tmp_path, command):
    """The forecast's provenance said "calibrated on …, cached in FILE" cold and "cached in FILE:
    calibrated on …" warm, so summary.json and report.html differed (so did numba and numpy, run one
    after the other)."""
    cache = tmp_path / "cache"
    outs = []
    for name in ("cold", "warm"):
        out = tmp_path / name
        assert main([command[0], str(market_file), *command[1:], "--out", str(out), "--quiet"]) == 0
        outs.append(published(out))
        assert any(cache.glob("*.json"))
    assert outs[0] == outs[1]


def test_the_market_command_gives_the_same_bytes_under_numba_and_numpy(market_file, tmp_path, monkeypatch):
    pytest.importorskip("numba")
    outs = []
    for kernel in ("numba", "numpy"):  # numba first, with the cold cache
        monkeypatch.setenv("DPMARKET_KERNEL", kernel)
        out = tmp_path / kernel
        assert main(["market", str(market_file), "--policies", "posted_price,auction", "--replications", "3",
                     "--out", str(out), "--quiet"]) == 0
        outs.append(published(out))
    assert outs[0] == outs[1]


def test_a_dynamic_market_with_a_pool_gives_the_same_bytes_twice_in_a_row(market_file, tmp_path):
    args = ["run", str(market_file), "--quiet", "--set", "market.mode='dynamic'", "--set", "market.pool=1",
            "--set", "market.arrival_rate=0.5", "--set", "market.policy='posted_price'"]
    assert main([*args, "--out", str(tmp_path / "a")]) == 0
    assert main([*args, "--out", str(tmp_path / "b")]) == 0
    assert published(tmp_path / "a") == published(tmp_path / "b")


# --- caches keyed on the files' content ---------------------------------------------------------------

TABLE_MARKET = """name = "t"
seed = 1
[data]
source = "table"
path = "t.csv"
[data.table]
target = "y"
numeric = ["a", "b"]
partition = "site"
holdout = 170
[privacy]
sensitivity = "clip"
clip = "auto"
[learner]
iterations = 40
rho = "auto"
[output]
plots = false
[market]
policy = "posted_price"
price = 1.0
epsilon_min = 0.5
costs = {kind = "quadratic", coef = 0.5}
pilots = {levels = 2, subsets = 1, replications = 1, epsilon_low = 1.0, epsilon_high = 10.0}
"""


def facts(out: Path) -> dict:
    """What a run read from its table: ρ (from the hold-out's curvature), Ξ (the clip bound from the
    hold-out's gradient norms), the forecast (pilots on the hold-out), the data (ψ at θ = 0)."""
    s = json.loads((out / "summary.json").read_text())
    return {k: s[k] for k in ("rho", "sensitivity", "psi_forecast", "psi_zero", "psi_final", "f_star")}


def test_a_table_rewritten_at_the_same_path_is_never_taken_for_the_old_one(tmp_path, monkeypatch):
    """In one process (a notebook's, or a worker's), with the forecast cache on disk: the second table's
    run equals a run from scratch on it, not the first table's (same path, same size class, same
    columns; each cache was keyed on the path alone)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(pilots.CACHE_ENV, str(tmp_path / "cache"))
    (tmp_path / "s.toml").write_text(TABLE_MARKET)
    write(records(seed=0), tmp_path / "t.csv")
    assert main(["run", "s.toml", "--out", "first", "--quiet"]) == 0
    write(records(seed=7), tmp_path / "t.csv")  # rewritten in place
    assert main(["run", "s.toml", "--out", "second", "--quiet"]) == 0
    proxy._CACHE.clear()
    task.clear_cache()
    monkeypatch.setenv(pilots.CACHE_ENV, str(tmp_path / "fresh-cache"))
    assert main(["run", "s.toml", "--out", "scratch", "--quiet"]) == 0
    first, second, scratch = (facts(tmp_path / name) for name in ("first", "second", "scratch"))
    assert second == scratch
    assert all(first[k] != second[k] for k in first), (first, second)
    assert len(list((tmp_path / "cache").glob("*.json"))) == 2  # one calibration per table content


def test_every_cache_key_follows_the_tables_content(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.toml").write_text(TABLE_MARKET)
    write(records(seed=0), tmp_path / "t.csv")
    s = load(tmp_path / "s.toml")
    keys = (proxy._key(s), task.data_key(s), pilots.cache_key(s))
    assert (proxy._key(s), task.data_key(s), pilots.cache_key(s)) == keys  # stable while the file is
    write(records(seed=7), tmp_path / "t.csv")
    again = (proxy._key(s), task.data_key(s), pilots.cache_key(s))
    assert all(a != b for a, b in zip(keys, again, strict=True))


def test_a_rewrite_that_keeps_size_and_modification_time_is_still_seen(tmp_path):
    """The digest is remembered against the file's stat, and ctime changes at every write."""
    path = tmp_path / "f"
    path.write_bytes(b"a" * 100)
    before, stat = files.digest(path), path.stat()
    path.write_bytes(b"b" * 100)
    import os

    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_size == stat.st_size and path.stat().st_mtime_ns == stat.st_mtime_ns
    assert files.digest(path) != before
    assert files.digest(tmp_path / "missing") is None
