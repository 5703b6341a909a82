"""The honest yardstick: ψ of the untrained model θ = 0 next to the final ψ, in summary.json, the
printed summary (with a warning when training did not beat it), psi.png, report.html, and the
tables of replicated runs and sweeps."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from helpers import MARKET, tiny
from matplotlib.axes import Axes

from dpmarket.cli import main
from dpmarket.experiment.study import Execution, make_plan, run_sweep
from dpmarket.output.figures import run as plots
from dpmarket.output.results import figure_data, run_and_write
from dpmarket.output.summary import summary
from dpmarket.runs.run import execute

# ρ = 1 and T = 300 keep the tiny owners' copies stable (no curvature warning); only ε then
# decides whether training beats θ = 0: at ε = 1000 it does, at ε = 0.01 the noise wins.
GOOD = {"privacy": {"epsilon": 1000.0}, "learner": {"iterations": 300, "rho": 1.0}}
BAD = {"privacy": {"epsilon": 0.01}, "learner": {"iterations": 300, "rho": 1.0}}
WARNING = "warning       the trained model is no better than the untrained θ = 0"


def _scenario_file(tmp_path: Path, **sections) -> Path:
    path = tmp_path / "s.toml"
    path.write_text(tiny(**sections).to_toml())
    return path


def _run_cli(tmp_path: Path, capsys, sections: dict, plots_on: bool = False) -> tuple[str, dict, Path]:
    """Run the command line on a tiny scenario; the printed summary, summary.json, the directory."""
    out = tmp_path / "run"
    path = _scenario_file(tmp_path, **sections, output={"metric_points": 10, "plots": plots_on})
    assert main(["run", str(path), "--out", str(out)]) == 0
    return capsys.readouterr().out, json.loads((out / "summary.json").read_text()), out


# ------------------------------------------------------------------------------ summary.json


def test_psi_zero_is_f_of_zero_over_f_star_computed_from_the_records(tmp_path):
    """f(0) = λ·0 + (1/n)Σy² and f(θ*) = λθ*ᵀθ* + (1/n)Σ(y − zᵀθ*)², by numpy on the raw records
    (clipping keeps them), never through the package's f or ψ."""
    out = tmp_path / "run"
    result = run_and_write(tiny(privacy={"sensitivity": "clip", "clip": 50.0}), out)
    info = json.loads((out / "summary.json").read_text())
    Z = np.vstack([o.records()[0] for o in result.consortium.owners])
    y = np.concatenate([o.records()[1] for o in result.consortium.owners])
    theta = np.array(info["theta_star"])
    lam = result.scenario.model.regularization
    f_zero = float(y @ y) / len(y)
    f_star = lam * float(theta @ theta) + float(np.sum((y - Z @ theta) ** 2)) / len(y)
    assert info["psi_zero"] == pytest.approx(f_zero / f_star - 1.0, rel=1e-9)
    assert info["psi_zero"] != pytest.approx(info["psi_final"], rel=1e-3)  # not the trained model's ψ
    keys = list(info)
    assert keys.index("psi_zero") == keys.index("psi_final") + 1


def test_market_runs_measure_psi_zero_against_the_whole_consortium(tmp_path):
    """Owner 2 declines; ψ(0) is still f(0)/f(θ*) − 1 of all three owners' data (Σy² = Σ_i c_i)."""
    result = execute(tiny(market=MARKET, owners=[{}, {}, {"cost_coef": 10.0}]))
    assert result.market.outcome.participates.tolist() == [True, True, False]
    info = summary(result)
    data = result.consortium.owners
    everyone = sum(o.stats.c for o in data) / sum(o.n for o in data) / info["f_star"] - 1.0
    assert info["psi_zero"] == pytest.approx(everyone, rel=1e-12)
    members = sum(o.stats.c for o in data[:2]) / sum(o.n for o in data[:2]) / info["f_star"] - 1.0
    assert info["psi_zero"] != pytest.approx(members, rel=1e-6)  # the participants' alone differ


# ------------------------------------------------------------------------------ printed summary


def test_the_printed_summary_warns_when_training_does_not_beat_theta_zero(tmp_path, capsys):
    printed, info, _ = _run_cli(tmp_path, capsys, BAD)
    assert info["psi_final"] >= info["psi_zero"]  # the premise: noise dominates at ε = 0.01
    lines = printed.splitlines()
    warnings = [line for line in lines if line.startswith(WARNING)]
    # the lever names what this scenario (the papers' privacy set-up) should change first
    assert warnings == [f"{WARNING} (psi {info['psi_final']:.4g} ≥ {info['psi_zero']:.4g}): set "
                        "privacy.split = 'capped' (every owner now budgets T answers), set "
                        "privacy.sensitivity = 'clip' (Ξ now comes from the declared bounds), raise "
                        "privacy.epsilon or revisit learner.rho [weak_model, oracle figure]"]
    assert [d["code"] for d in info["diagnostics"]][0] == "weak_model"
    psi_line = next(line for line in lines if line.startswith("psi final"))
    assert f"(untrained θ = 0: {info['psi_zero']:.4g}; median own-data ψ" in psi_line
    assert not any("step x curvature" in line for line in lines)  # only ε differs from GOOD


def test_no_warning_when_training_beats_theta_zero(tmp_path, capsys):
    printed, info, _ = _run_cli(tmp_path, capsys, GOOD)
    assert info["psi_final"] < info["psi_zero"]
    assert "no better than the untrained" not in printed
    assert f"(untrained θ = 0: {info['psi_zero']:.4g};" in printed


# ------------------------------------------------------------------------------ psi.png and report


def test_psi_png_draws_theta_zero_as_its_own_labelled_line(tmp_path, monkeypatch):
    result = run_and_write(tiny(**GOOD, output={"metric_points": 10, "plots": True}), tmp_path / "run")
    assert (tmp_path / "run" / "psi.png").read_bytes().startswith(b"\x89PNG")
    data = figure_data(result)
    assert data["psi_zero"] == summary(result)["psi_zero"]
    drawn = []
    original = Axes.axhline

    def recording(ax, y=0, **kw):
        drawn.append((y, kw))
        return original(ax, y, **kw)

    monkeypatch.setattr(Axes, "axhline", recording)
    plots.psi_against_k(plots.RunFigures(**data), tmp_path / "again.png")
    lines = {kw["label"]: (y, kw["ls"], kw["color"]) for y, kw in drawn}
    assert lines["untrained model θ = 0"][0] == result.psi_zero
    assert lines["untrained model θ = 0"][1:] != lines["an owner's model on its own data (median)"][1:]


@pytest.mark.parametrize("sections, warned", [(GOOD, False), (BAD, True)])
def test_report_leads_with_the_yardstick(tmp_path, capsys, sections, warned):
    _, info, out = _run_cli(tmp_path, capsys, sections)
    page = (out / "report.html").read_text(encoding="utf-8")
    headline = (f"<p>ψ final {info['psi_final']:.4g} against {info['psi_zero']:.4g} for the untrained "
                f"model θ = 0; {info['owners_benefiting']} of 3 owners benefit.</p>")
    assert headline in page and page.index(headline) < page.index("<h2>Summary</h2>")
    warning = "<td class=\"text\">the trained model is no better than the untrained θ = 0"
    assert (warning in page) is warned
    assert not warned or page.index("Diagnostics: read these before the figures") < page.index(headline)


# ------------------------------------------------------------------------------ experiments


def _read_csv(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def test_sweep_has_one_psi_zero_per_cell_from_that_cells_data(tmp_path):
    p = make_plan("sweep", tiny(), ["privacy.epsilon=1,10", "data.records=200,400"], 2, "t.toml")
    run_sweep(p, tmp_path / "sweep", Execution("serial"))
    rows = _read_csv(tmp_path / "sweep" / "sweep.csv")
    expected = [execute(cell.scenario).psi_zero for cell in p.cells]
    assert [float(r["psi_zero"]) for r in rows] == expected
    by_records = {cell.values[1]: zero for cell, zero in zip(p.cells, expected, strict=True)}
    assert by_records[200] != by_records[400]  # the data differ, so does ψ(0)


def test_replicated_run_summary_has_psi_zero(tmp_path, capsys):
    path = _scenario_file(tmp_path)
    out = tmp_path / "reps"
    assert main(["run", str(path), "--replications", "3", "--out", str(out), "--quiet",
                 "--executor", "serial"]) == 0
    info = json.loads((out / "summary.json").read_text())
    assert info["psi_zero"] == execute(tiny()).psi_zero
    assert f"(untrained θ = 0: {info['psi_zero']:.4g})" in capsys.readouterr().out


def test_old_records_without_psi_zero_give_nan_not_an_error(tmp_path):
    """A resumed experiment whose replications were saved before ψ(0) was recorded."""
    from dpmarket.experiment.tables import cell_psi_zero

    assert np.isnan(cell_psi_zero([{"psi_final": 0.1}, {"psi_final": 0.2}]))
    assert cell_psi_zero([{"psi_final": 0.1}, {"psi_final": 0.2, "psi_zero": 0.5}]) == 0.5


def test_the_warning_starts_at_equality_and_ignores_nan():
    from dpmarket.output.console import yardstick_warning

    assert yardstick_warning(0.5, 0.5) is not None and yardstick_warning(0.6, 0.5) is not None
    assert yardstick_warning(0.4999, 0.5) is None and yardstick_warning(float("nan"), 0.5) is None


@pytest.mark.parametrize("policy", ["posted_price", "record_price", "take_it_or_leave_it", "procurement",
                                    "stackelberg", "auction", "marginal"])
def test_in_a_market_run_the_warning_names_the_markets_lever(policy):
    """A market scenario refuses privacy.epsilon, so the advice names the key that buys budgets."""
    from dpmarket.output.console import yardstick_warning
    from dpmarket.output.report import yardstick_text
    from dpmarket.scenario.checks import BUDGET_KEYS

    warning = yardstick_warning(0.6, 0.5, policy)
    assert "privacy.epsilon" not in warning and BUDGET_KEYS[policy] in warning and repr(policy) in warning
    facts = {"psi_final": 0.6, "psi_zero": 0.5, "owners_benefiting": 0, "owners": 3, "policy": policy}
    assert warning in yardstick_text(facts) and "privacy.epsilon" not in yardstick_text(facts)
