"""The forecast's pilots (dpmarket/runs/pilots.py): calibrated once on the public proxy, then read from
a cache keyed by what changes the data (not prices or names); a damaged or unwritable cache costs one
warning, never the forecast."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import OFFERED_MARKET, market_scenario, tiny

from dpmarket.data import problem
from dpmarket.runs import pilots as calibration


def test_pilots_calibrate_once_then_come_from_the_cache(tmp_path, monkeypatch):
    """The second time the pilots do not run, and the forecast and its provenance are the same (a
    warm cache gives the bytes of a cold one: issue 24)."""
    s = market_scenario(forecast=None, pilots={"levels": 3, "subsets": 2, "replications": 2,
                                                "epsilon_low": 1.0, "epsilon_high": 50.0})
    prepared = problem.prepare(s)
    consortium, objective = prepared.consortium, prepared.objective
    first, cold = calibration.resolve(s, consortium, objective, tmp_path)
    assert cold.startswith("calibrated on the public proxy")
    assert cold.endswith(f"cached in {calibration.cache_file(s, tmp_path)}")
    assert first.points == 3 * 2  # replications averaged
    assert first.form == "law" and np.isfinite(first.r2) and first.c0 + first.c2 > 0
    assert [row["members"] for row in first.by_size] == [3, 2]
    assert sum(row["points"] for row in first.by_size) == 6
    monkeypatch.setattr(calibration, "run_pilots", lambda *a, **k: pytest.fail("the pilots ran again"))
    again, warm = calibration.resolve(s, consortium, objective, tmp_path)
    assert warm == cold and again == first
    stored = json.loads(next(tmp_path.glob("tiny-*.json")).read_text())
    assert len(stored["pilots"]["psi"]) == 6 and stored["calibrated_on"].startswith("the public proxy")
    assert stored["forecast"]["by_size"] == [dict(row) for row in first.by_size]


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory):
    """A small market calibrated once into a cache directory: (scenario, prepared, forecast, cache file)."""
    s = market_scenario(forecast=None, pilots={"levels": 3, "subsets": 2, "replications": 1,
                                                "epsilon_low": 1.0, "epsilon_high": 50.0})
    prepared, cache = problem.prepare(s), tmp_path_factory.mktemp("forecasts")
    forecast, _ = calibration.resolve(s, prepared.consortium, prepared.objective, cache)
    return s, prepared, forecast, calibration.cache_file(s, cache)


@pytest.mark.parametrize("damage", [b"", b'{"key": "', b"\xff\xfe", b"[]", b'{"key": 1}', "c0", "form",
                                    "c2 = 1e308", "c0 = 0.5"])
def test_a_damaged_cache_file_is_recalibrated_with_one_warning(calibrated, tmp_path, capsys, damage):
    """Unreadable, another form, a multiplier that is not a number ≥ 0 — or finite but not the fit of
    the pilots the file stores (c₂ = 1e308 was trusted: issue 24)."""
    s, prepared, forecast, good = calibrated
    path = tmp_path / good.name
    if isinstance(damage, bytes):
        path.write_bytes(damage)
    else:  # well-formed JSON of the wrong content: a multiplier that is a string, or the other form
        stored = json.loads(good.read_text(encoding="utf-8"))
        if "=" in damage:
            name, value = damage.split(" = ")
            stored["forecast"][name] = float(value)
        else:
            stored["forecast"][damage] = "1" if damage == "c0" else "theorem2"
        path.write_text(json.dumps(stored), encoding="utf-8")
    capsys.readouterr()
    again, source = calibration.resolve(s, prepared.consortium, prepared.objective, tmp_path)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"dpmarket: warning: {path}: damaged"), err
    assert source.startswith("calibrated on") and again == forecast  # the same pilots, the same fit
    assert path.read_bytes() == good.read_bytes()  # rewritten whole
    calibration.resolve(s, prepared.consortium, prepared.objective, tmp_path)
    assert capsys.readouterr().err == ""  # and read back without a warning


def test_an_unwritable_cache_is_one_warning_and_the_forecast_goes_on(calibrated, tmp_path, capsys):
    s, prepared, forecast, _ = calibrated
    (tmp_path / "file").write_text("in the way")
    blocked = tmp_path / "file" / "forecasts"
    capsys.readouterr()
    again, source = calibration.resolve(s, prepared.consortium, prepared.objective, blocked)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("dpmarket: warning:") and str(blocked) in err[0], err
    assert "not cached" in err[0] and source.endswith("not cached") and again == forecast
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_the_default_cache_is_the_environment_variables_directory(calibrated, tmp_path, monkeypatch):
    s, prepared, forecast, good = calibrated
    (tmp_path / good.name).write_bytes(good.read_bytes())
    monkeypatch.setenv(calibration.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(calibration, "run_pilots", lambda *a, **k: pytest.fail("the pilots ran again"))
    again, source = calibration.resolve(s, prepared.consortium, prepared.objective)
    assert source.endswith(f"cached in {tmp_path / good.name}") and again == forecast
    monkeypatch.delenv(calibration.CACHE_ENV)
    assert calibration.cache_dir() == calibration.CACHE_DIR


def test_the_cache_key_ignores_prices_and_names_but_not_the_data():
    s = market_scenario()
    key = calibration.cache_key(s)
    assert calibration.cache_key(market_scenario(price=3.0)) == key
    renamed = tiny(name="other", market=OFFERED_MARKET, owners=[{}, {}, {"cost_coef": 10.0}])
    assert calibration.cache_key(renamed) == key
    assert calibration.cache_key(tiny(market=OFFERED_MARKET, data={"features": 4})) != key
    assert calibration.cache_key(tiny(market=OFFERED_MARKET, seed=4)) != key



def test_subsets_beyond_the_single_owner_are_not_enumerated():
    """Subsets halve the owners: beyond log2(N) + 1 of them they repeat the single owner, and
    market.pilots.subsets = 10**12 looped for ever making that set (issue 43)."""
    from helpers import deadline

    s = market_scenario(forecast=None, pilots={"levels": 2, "subsets": 10**12, "replications": 1})
    with deadline(10):
        plan = calibration.pilot_plan(s, 3)
    assert sorted({len(p.members) for p in plan}) == [1, 2, 3] and len(plan) == 2 * 3
