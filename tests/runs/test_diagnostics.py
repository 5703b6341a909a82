"""A run checks itself (issue 25, item 2): each diagnostic appears when its condition holds and not
otherwise, says what to change, is labelled oracle when its figures read the private records, and
never changes a result or an exit status (except --strict: 3)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from helpers import MARKET, merged, tiny, tiny_toml

from dpmarket.cli import main
from dpmarket.runs import diagnostics
from dpmarket.runs.diagnostics import after_run, before_run
from dpmarket.runs.run import execute

KEY = re.compile(r"\b(privacy|learner|network|market)\.[a-z_]+")  # a key a user can change


# A small scenario with nothing to report: whitened data without an intercept, ρ from public
# information (tiny's ρ = 3 is far beyond its owners' stability limit), a large budget over a capped
# split at its median cap (every owner spends about all of it).
SANE = {"data": {"generator": "whitened"}, "model": {"intercept": False},
        "learner": {"rho": "auto", "iterations": 300},
        "privacy": {"epsilon": 1000.0, "split": "capped", "cap_quantile": 0.5}}


# The same with a market, which sets the budgets (ε = price / cost coefficient).
MARKET_BASE = {**{k: v for k, v in SANE.items() if k != "privacy"},
               "privacy": {"split": "capped", "cap_quantile": 0.5, "sensitivity": "clip"}}


def sane(**sections):
    return tiny(**merged(SANE, sections))


def codes(found) -> dict:
    return {d.code: d for d in found}


def test_a_sane_run_has_nothing_to_report_before_or_after():
    assert after_run(execute(sane())) == [] and before_run(sane()) == []


def test_a_weak_model_is_named_with_its_lever_and_labelled_oracle():
    bad = after_run(execute(tiny(privacy={"epsilon": 0.01}, learner={"iterations": 300, "rho": 1.0})))
    good = after_run(execute(tiny(privacy={"epsilon": 1000.0}, learner={"iterations": 300, "rho": 1.0})))
    weak = codes(bad)["weak_model"]
    assert weak.oracle and weak.severity == "warning" and KEY.search(weak.message)
    assert weak.figures["psi_final"] >= diagnostics.WEAK_RATIO * weak.figures["psi_zero"]
    assert "weak_model" not in codes(good)


def test_the_weak_model_lever_is_the_floor_when_the_floor_dominates():
    """ρ tiny: nothing moves in T exchanges, whatever ε; the advice is T, not ε."""
    result = execute(tiny(privacy={"epsilon": 1e9}, learner={"iterations": 60, "rho": 1e-4},
                          data={"generator": "whitened"}, model={"intercept": False}))
    weak = codes(after_run(result))["weak_model"]
    assert "raise learner.iterations; more ε will not help" in weak.message


def test_a_floor_that_dominates_a_good_model_is_a_note_that_names_t():
    """100 owners of Pareto sizes, T = 1,000, answers nearly exact (ε = 10⁹): the largest owner caps ρ
    and 10 exchanges an owner leave most of ψ to the floor; T = 10,000 takes it away. A note, so
    --strict ignores it. Once ψ is below FLOOR_RELEVANT of ψ(0) the floor is real but not worth a note."""
    table = {"data": {"owners": 100, "records": {"distribution": "pareto", "alpha": 1.5, "minimum": 200}},
             "learner": {"iterations": 1000}, "privacy": {"epsilon": 1e9, "cap_quantile": 0.9}}
    note = codes(after_run(execute(sane(**table))))["floor_dominates"]
    assert note.severity == "note" and note.oracle and "learner.iterations" in note.message
    assert note.figures["psi_floor_predicted"] >= diagnostics.FLOOR_SHARE * note.figures["psi_final"]
    assert diagnostics.warnings_in([note]) == 0
    longer = execute(sane(**merged(table, {"learner": {"iterations": 10_000}})))
    assert "floor_dominates" not in codes(after_run(longer))
    assert longer.psi_final < diagnostics.FLOOR_RELEVANT * longer.psi_zero


def test_owners_that_spend_less_than_half_of_their_budget_are_counted():
    """The horizon split (m_i = T) and N = 3: each owner spends about a third of its ε; the capped
    split at its median cap spends (nearly) all of it."""
    horizon = execute(tiny(privacy={"epsilon": 10.0}, learner={"iterations": 300}))
    unspent = codes(after_run(horizon))["budget_unspent"]
    spent = [o.epsilon_spent / o.epsilon for o in horizon.owners]
    assert unspent.figures["owners"] == sum(f < 0.5 for f in spent) == 3
    assert "privacy.split = 'capped'" in unspent.message
    capped = execute(tiny(privacy={"epsilon": 10.0, "split": "capped", "cap_quantile": 0.5},
                          learner={"iterations": 300}))
    assert "budget_unspent" not in codes(after_run(capped))


def test_owners_never_asked_are_named_and_expected_before_the_run():
    scenario = sane(data={"owners": 40}, learner={"iterations": 25})
    result = execute(scenario)
    never = codes(after_run(result))["owners_never_asked"]
    counts = result.training.log.counts_by_owner
    asked = sum(counts[("query", o.index)] > 0 for o in result.owners)
    assert never.figures["owners"] == 40 - asked > 0 and "learner.iterations" in never.message
    expected = codes(before_run(scenario))["owners_never_asked"]
    assert expected.figures["expected"] == pytest.approx(40 * (1 - 1 / 40) ** 25)
    assert "owners_never_asked" not in codes(before_run(sane()))


def test_a_dominant_collision_share_is_reported_and_estimated_before_the_run():
    """Pure ALOHA: 8 owners of clock rate 1 sending messages of 0.2 on one channel collide most of the
    time, and 1 − e^{−2G} (G = 1.6 requests per transmission time) says so beforehand."""
    noisy = sane(data={"owners": 8}, network={"mode": "request", "transmission_time": 0.2},
                 learner={"iterations": 40})
    found = codes(after_run(execute(noisy)))["network_losses"]
    assert found.figures["collided_share"] >= diagnostics.LOST_SHARE and "network.channels" in found.message
    estimate = codes(before_run(noisy))["network_losses"]
    assert estimate.figures["collided_share"] == pytest.approx(1 - np.exp(-2 * 8 * 0.2))
    quiet = sane(network={"mode": "request", "transmission_time": 0.001}, learner={"iterations": 40})
    assert "network_losses" not in codes(after_run(execute(quiet))) | codes(before_run(quiet))


def test_a_negative_learner_surplus_names_the_market_keys():
    market = MARKET_BASE
    cheap = execute(tiny(**market, market={**MARKET, "value": 0.5}))
    surplus = codes(after_run(cheap))["learner_surplus_negative"]
    assert surplus.figures["learner_surplus"] < 0 and not surplus.oracle and "market.value" in surplus.message
    rich = execute(tiny(**market, market={**MARKET, "value": 1e4, "price": 10.0}))
    assert "learner_surplus_negative" not in codes(after_run(rich))


def test_a_forecast_far_from_the_simulation_is_an_oracle_finding():
    market = MARKET_BASE
    forecast = {"c0": 0.0, "c1": 0.0, "c2": 1e9}
    far = execute(tiny(**market, market={**MARKET, "value": 1e4, "forecast": forecast}))
    found = codes(after_run(far))["forecast_far"]
    assert found.oracle and found.figures["factor"] >= diagnostics.FORECAST_FACTOR
    near = execute(tiny(**market, market={**MARKET, "value": 1e4, "price": 10.0}))
    off = near.psi_final / near.market.outcome.psi_forecast
    assert "forecast_far" not in codes(after_run(near)) or max(off, 1 / off) >= 2


def test_a_step_near_the_stability_limit_public_or_oracle():
    """auto ρ at 90 % of the limit: the public stability number (not oracle); a given ρ far beyond:
    the owners' own curvatures (oracle). Half the limit, the default, says nothing."""
    near = sane(learner={"auto_stability": 0.9, "auto_decay": 1e6})  # the stability cap binds
    found = codes(after_run(execute(near)))["step_near_stability_limit"]
    assert not found.oracle and found.figures["stability_number"] == pytest.approx(1.8)
    before = codes(before_run(near))["step_near_stability_limit"]
    assert before.figures["stability_number"] == pytest.approx(1.8)
    calm = near.model_copy(update={"learner": near.learner.model_copy(update={"auto_stability": 0.5})})
    assert "step_near_stability_limit" not in codes(after_run(execute(calm)))
    wild = execute(sane(learner={"rho": 3e4}))
    beyond = codes(after_run(wild))["step_near_stability_limit"]
    assert beyond.oracle and "learner.rho" in beyond.message


def test_heavy_clipping_is_an_oracle_finding_naming_the_bound():
    clipped = execute(sane(privacy={"sensitivity": "clip", "clip": 0.05, "epsilon": 1e6}))
    found = codes(after_run(clipped))["clipping_heavy"]
    assert found.oracle and found.figures["clipped_share"] == clipped.clipped_share >= 0.3
    assert "privacy.clip" in found.message
    loose = execute(sane(privacy={"sensitivity": "clip", "clip": 1e3}))
    assert "clipping_heavy" not in codes(after_run(loose))


def test_diagnostics_change_no_result_and_no_exit_status_unless_strict(tmp_path, capsys, monkeypatch):
    """The same run with the checks silenced writes the same files but summary.json's diagnostics
    and report.html; --strict exits 3 on a warning, 0 without one; bad input stays 2."""
    path = tmp_path / "s.toml"
    path.write_text(tiny_toml(privacy={"epsilon": 0.01}))
    assert main(["run", str(path), "--out", str(tmp_path / "a"), "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "warning       the trained model is no better" in printed
    assert "[weak_model, oracle figure]" in printed
    assert main(["run", str(path), "--out", str(tmp_path / "b"), "--quiet", "--strict"]) == 3
    monkeypatch.setattr(diagnostics, "after_run", lambda result: [])
    import dpmarket.output.summary as summary_module

    monkeypatch.setattr(summary_module, "after_run", lambda result: [])
    assert main(["run", str(path), "--out", str(tmp_path / "c"), "--quiet", "--strict"]) == 0
    for name in ("events.csv", "metrics.csv", "owners.csv", "scenario.toml"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "c" / name).read_bytes()
    a, c = (json.loads((tmp_path / d / "summary.json").read_text()) for d in "ac")
    assert a.pop("diagnostics") and c.pop("diagnostics") == []
    a.pop("wall_seconds"), c.pop("wall_seconds")
    assert a == c
    capsys.readouterr()
    bad = ["run", str(path), "--out", str(tmp_path / "d"), "--set", "privacy.epsilon=0", "--strict"]
    assert main(bad) == 2 and not (tmp_path / "d").exists()


def test_validate_runs_the_checks_that_need_no_training(tmp_path, capsys):
    path = tmp_path / "s.toml"
    path.write_text(tiny_toml(**merged(SANE, {"data": {"owners": 40}, "learner": {"iterations": 25}})))
    assert main(["validate", str(path)]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("# A dpmarket scenario") and "dpmarket: warning: expected before any run" in err
    assert "[owners_never_asked]" in err
    assert main(["validate", str(path), "--strict", "--quiet"]) == 3
    assert capsys.readouterr() == ("", "")
    path.write_text(tiny_toml(**SANE))
    assert main(["validate", str(path), "--strict", "--quiet"]) == 0


def test_every_threshold_is_documented():
    """docs/reference/diagnostics.md names each code and each threshold's value."""
    from helpers import ROOT

    page = (ROOT / "docs" / "reference" / "diagnostics.md").read_text(encoding="utf-8")
    for code in ("weak_model", "floor_dominates", "budget_unspent", "owners_never_asked", "network_losses",
                 "learner_surplus_negative", "step_near_stability_limit", "forecast_far", "clipping_heavy"):
        assert f"`{code}`" in page, code
    for name, value in diagnostics.THRESHOLDS.items():
        assert f"`{name.upper()}` = {value:g}" in page, name
