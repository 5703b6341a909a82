"""The market stage in runs: scenario keys, calibration and its cache, training with the participants,
common random numbers across policies, and the forecast and market commands."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
from helpers import MARKET as POSTED_PRICE
from helpers import ROOT, budgeted_market_toml, tiny

from dpmarket.cli import main
from dpmarket.data import problem
from dpmarket.errors import ScenarioError
from dpmarket.experiment import compare
from dpmarket.markets.forecast import Forecast, calibrate
from dpmarket.output.summary import owner_rows, summary
from dpmarket.privacy import cohort
from dpmarket.runs import pilots as calibration
from dpmarket.runs import run

MARKET = {**POSTED_PRICE, "offer_epsilon": 2.0}


def market_scenario(owners: list | None = None, **market):
    """3 tiny owners; owner 2 is so averse (c = 10) that a price of 1 cannot buy ε_min = 0.5... almost."""
    specs = owners if owners is not None else [{}, {}, {"cost_coef": 10.0}]
    return tiny(market={**MARKET, **market}, owners=specs)


# --- scenario keys ----------------------------------------------------------------------------

@pytest.mark.parametrize("change, key", [
    ({"market": {**MARKET, "epsilon_min": 30.0}}, "market.epsilon_min"),
    ({"market": {**MARKET, "policy": "take_it_or_leave_it", "offer_epsilon": None}}, "market.offer_epsilon"),
    ({"market": {**MARKET, "policy": "procurement"}}, "market.budget"),
    ({"market": {**MARKET, "costs": {"distribution": "uniform", "low": 2.0}}}, "market.costs.low"),
    ({"owners": [{"cost_coef": 1.0}]}, "owners.0.cost_coef"),
    ({"market": {**MARKET, "costs": {"kind": "cubic"}}}, "market.costs.kind"),
])
def test_bad_market_keys_are_scenario_errors_naming_the_key(change, key):
    table = {k: v for k, v in change.items()}
    if "market" in table:
        table["market"] = {k: v for k, v in table["market"].items() if v is not None}
    with pytest.raises(ScenarioError) as err:
        tiny(**table)
    assert err.value.key == key


def test_cost_coefficients_are_drawn_per_owner_and_overridable():
    from dpmarket.markets.sellers import cost_coefficients

    s = market_scenario(owners=[{"cost_coef": 7.0}], costs={"coef": 0.5, "distribution": "lognormal",
                                                             "sigma": 1.0})
    coef = cost_coefficients(s, 3)
    assert coef[0] == 7.0 and len(set(coef)) == 3
    assert np.array_equal(coef[1:], cost_coefficients(market_scenario(owners=[{"cost_coef": 1.0}], costs={
        "coef": 0.5, "distribution": "lognormal", "sigma": 1.0}), 3)[1:])  # others unchanged


# --- calibration --------------------------------------------------------------------------------

def synthetic_pilots(c0: float, c1: float, c2: float, noise: float, count: int = 80):
    gen = np.random.default_rng(4)
    eps = [np.full(int(gen.integers(2, 8)), float(e)) for e in np.exp(gen.uniform(-1, 3, count))]
    n = list(np.exp(gen.uniform(np.log(1e4), np.log(1e6), count)))
    truth = [Forecast(c1, c2, c0=c0).psi(e, m) for e, m in zip(eps, n, strict=True)]
    return eps, n, [t * np.exp(noise * gen.standard_normal()) for t in truth]


def test_calibration_recovers_a_floor_and_both_constants():
    """80 pilots, 5% log-normal noise: every constant within 5 SE·3 (SE ≈ noise/√points)."""
    c0, c1, c2 = 0.005, 2000.0, 4e8  # each term dominates somewhere in the pilots' range
    fit = calibrate(*synthetic_pilots(c0, c1, c2, 0.05), terms=("c0", "c1", "c2"))
    tol = 5 * 0.05 / np.sqrt(80) * 3
    assert fit.c0 == pytest.approx(c0, rel=tol) and fit.c1 == pytest.approx(c1, rel=tol)
    assert fit.c2 == pytest.approx(c2, rel=tol)
    without = calibrate(*synthetic_pilots(c0, c1, c2, 0.05))  # the papers' form misses the floor
    assert without.rms_relative_error > 3 * fit.rms_relative_error


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
    renamed = tiny(name="other", market=MARKET, owners=[{}, {}, {"cost_coef": 10.0}])
    assert calibration.cache_key(renamed) == key
    assert calibration.cache_key(tiny(market=MARKET, data={"features": 4})) != key
    assert calibration.cache_key(tiny(market=MARKET, seed=4)) != key


# --- a run with a market --------------------------------------------------------------------------

def test_owners_that_decline_answer_nothing_and_psi_is_judged_on_everyone(tmp_path):
    s = market_scenario(epsilon_min=0.5, price=1.0)  # owner 2: ε = clip(1/10) = 0.5, pays 0.5 < cost 1.25
    result = run.execute(s, tmp_path / "events.csv")
    outcome = result.market.outcome
    assert outcome.participates.tolist() == [True, True, False]
    assert [o.index for o in result.owners] == [0, 1]
    rows = owner_rows(result)
    assert rows[2]["queries"] == 0 and rows[2]["epsilon"] == 0.0 and rows[2]["participates"] is False
    for row, o in zip(rows[:2], result.owners, strict=True):
        assert row["epsilon"] == pytest.approx(2.0) and row["epsilon_spent"] <= o.epsilon
        assert row["payment"] == pytest.approx(2.0) and row["cost"] == pytest.approx(1.0)
        assert row["utility"] == pytest.approx(1.0)
    plain = run.execute(tiny())
    assert result.objective.f_star == plain.objective.f_star  # ψ against the whole consortium
    info = summary(result)
    assert info["participants"] == 2 and info["total_payment"] == pytest.approx(4.0)
    assert info["psi_simulated"] == result.psi_final
    assert info["psi_forecast"] == pytest.approx(0.01 + 2e4 * 2 / 4 / 600**2)
    assert info["learner_surplus"] == pytest.approx(10 * (1 - info["psi_forecast"]) - 4.0)


def test_events_name_owners_by_their_scenario_index_in_a_network_run(tmp_path):
    """Owner 1 (of 0, 1, 2) declines; the engine runs owners 0 and 2 under their own settings."""
    network = {"mode": "request", "transmission_time": 0.01, "loss_probability": 0.05,
               "dropout": {"mean_online": 5.0, "mean_offline": 1.0}}
    s = tiny(market=MARKET, owners=[{}, {"cost_coef": 10.0}, {"clock_rate": 3.0}], network=network)
    result = run.execute(s, tmp_path / "events.csv")
    assert result.market.outcome.participates.tolist() == [True, False, True]
    with (tmp_path / "events.csv").open() as fh:
        events = [(r["kind"], int(r["owner"])) for r in csv.DictReader(fh)]
    assert {owner for _, owner in events} - {-1} == {0, 2}
    rows = owner_rows(result)
    assert [r["queries"] for r in rows] == [events.count(("query", i)) for i in range(3)]
    assert rows[1]["queries"] == 0 and rows[0]["queries"] > 0
    assert rows[2]["clock_rate"] == 3.0 and rows[2]["ticks"] > 2 * rows[0]["ticks"]  # its own clock
    assert sum(r["exchanges"] for r in rows if r["participates"]) == result.training.k


def test_a_market_nobody_joins_is_a_clear_error():
    from dpmarket.errors import MarketError

    with pytest.raises(MarketError, match="no owner takes part"):
        run.execute(market_scenario(price=1e-3))


# --- common random numbers -------------------------------------------------------------------------

def standard_noise(scenario, members, eps, draws: int = 30) -> dict[int, np.ndarray]:
    prepared = problem.prepare(scenario)
    consortium, objective = prepared.consortium, prepared.objective
    owners = cohort.build_owners(scenario, consortium, objective, np.asarray(members), np.asarray(eps))
    return {o.index: np.array([o.noise.draw() / o.scale for _ in range(draws)]) for o in owners}


def test_policies_draw_identical_noise_for_the_owners_they_share():
    s = market_scenario()
    a = standard_noise(s, [0, 1, 2], [2.0, 2.0, 0.5])
    b = standard_noise(s, [0, 2], [7.0, 0.0, 3.0])  # other members, other budgets
    same = {"rtol": 1e-13, "atol": 0}  # (w·b)/b, up to rounding: the same standard Laplace draws
    assert np.allclose(a[0], b[0], **same) and np.allclose(a[2], b[2], **same)
    other_seed = standard_noise(s.model_copy(update={"seed": 4}), [0, 2], [7.0, 0.0, 3.0])
    assert not np.allclose(a[0], other_seed[0], **same)  # the check can fail: another seed differs


def test_the_comparison_shares_seeds_and_matches_single_runs():
    s = market_scenario(budget=3.0)
    c = compare.compare(s, ["posted_price", "take_it_or_leave_it", "auction"], replications=1)
    assert c.seeds == [s.seed]
    for r in c.results:
        single = run.execute(s.model_copy(update={"market": s.market.model_copy(
            update={"policy": r.outcome.policy})}))
        assert r.psi[0] == single.psi_final  # same seed, same members, same ε: the same run
    many = compare.compare(s, ["posted_price", "auction"], replications=3)
    assert len(set(many.seeds)) == 3 and all(len(r.psi) == 3 for r in many.results)


# --- commands ------------------------------------------------------------------------------------

SCENARIO = budgeted_market_toml()


def test_market_command_writes_the_comparison(tmp_path, capsys):
    path = tmp_path / "m.toml"
    path.write_text(SCENARIO)
    out = tmp_path / "cmp"
    policies = "posted_price,take_it_or_leave_it,procurement,stackelberg,auction,marginal"
    assert main(["market", str(path), "--policies", policies, "--replications", "2", "--out", str(out)]) == 0
    assert {"policies.csv", "market.csv", "psi_payment.png", "epsilons.png", "summary.json",
            "scenario.toml", "report.html"} <= {p.name for p in out.iterdir()}
    page = (out / "report.html").read_text(encoding="utf-8")
    assert page.count("base64,") == 2 and "src=\"http" not in page
    assert all(f"<td class=\"text\">{name}</td>" in page for name in policies.split(","))
    assert "market.csv: every owner under every policy" in page
    rows = list(csv.DictReader((out / "policies.csv").open()))
    assert [r["policy"] for r in rows] == policies.split(",")
    assert all(float(r["total_payment"]) <= 3.0 + 1e-9 for r in rows)
    assert len(list(csv.DictReader((out / "market.csv").open()))) == 6 * 3
    assert "posted_price" in capsys.readouterr().out


@pytest.mark.parametrize("args, needle", [
    (["--policies", "posted_price,bogus"], "bogus"),
    (["--policies", "record_price"], "market.price_per_record"),
])
def test_market_command_errors_are_one_line_and_write_nothing(tmp_path, capsys, args, needle):
    path = tmp_path / "m.toml"
    path.write_text(SCENARIO)
    assert main(["market", str(path), "--out", str(tmp_path / "cmp"), *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err and "Traceback" not in err
    assert not (tmp_path / "cmp").exists()


def test_forecast_command_prints_psi_and_each_owners_verdict(tmp_path, capsys):
    path = tmp_path / "m.toml"
    path.write_text(SCENARIO)
    assert main(["forecast", str(path)]) == 0
    out = capsys.readouterr().out
    assert "predicted psi" in out and "explicit" in out
    assert sum(line.rstrip().endswith(("yes", "no", "(declines)")) for line in out.splitlines()) == 3


def test_market_scenarios_validate():
    from dpmarket.scenario.loading import load

    root = ROOT / "scenarios"
    banks = load(root / "banks_market.toml")
    ny = load(root / "ny_hospitals.toml")
    assert banks.market.policy == "stackelberg" and ny.market.forecast is not None
