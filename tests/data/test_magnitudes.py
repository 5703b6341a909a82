"""Derived quantities stay finite (issue 13): the bounds, λ, f(θ*), the noise's tail, owner names.

Every check is shown twice: the one-line error it gives (naming the file and the key or column),
and what happens with the check taken out — the traceback or non-finite number it prevents.
"""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers import tiny, tiny_toml

from dpmarket.cli import main
from dpmarket.data import build_consortium, magnitudes
from dpmarket.data.problem import prepare
from dpmarket.errors import DataError, ScenarioError
from dpmarket.learning.objective import OwnerData, make_loss
from dpmarket.privacy.cohort import build_owners
from dpmarket.privacy.guarantee import Guarantee
from dpmarket.privacy.owners import LAPLACE_TAIL, DataOwner
from dpmarket.runs.run import execute
from dpmarket.scenario.loading import validate

TINY = tiny_toml()


def _cli(tmp_path: Path, text: str, *overrides: str, capsys) -> str:
    """``run`` in-process with every numpy or Python warning an error (a warning would be a second
    line on stderr): exit 2, one line, no run directory; returns that line."""
    path = tmp_path / "s.toml"
    path.write_text(text)
    out = tmp_path / "out"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert main(["run", str(path), "--out", str(out), "--quiet", *overrides]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("dpmarket: error:") and str(path) in err, err
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    return err


@pytest.mark.parametrize("overrides, expected", [
    ("model.regularization=1e308", "model.regularization = 1e+308: makes nλ, λ·p·θmax² or T²σ reach"),
    ("model.regularization=1e-300", "model.regularization = 1e-300: is lost in rounding next to the data"),
    ("model.theta_max=1e300", "model.theta_max = 1e+300: lets one record's loss or gradient reach"),
    ("data.label_bound=1e160", "data.label_bound = 1e+160: lets one record's loss or gradient reach"),
    ("data.label_bound=1e-300", "data.label_bound = 1e-300: leaves f(θ*) = 0.0: nothing is left to fit"),
    ("data.feature_bound=1e-320 data.label_bound=1e-300",
     "data.feature_bound = 1e-320: makes the sensitivity Ξ = 0.0: it underflows"),
])
def test_bounds_that_would_overflow_are_one_line_naming_the_key(tmp_path, capsys, overrides, expected):
    sets = [arg for override in overrides.split() for arg in ("--set", override)]
    assert expected in _cli(tmp_path, TINY, *sets, capsys=capsys)


def test_regularization_1e308_was_a_linalg_error_and_is_one_line_in_a_real_process(tmp_path):
    """The issue's case end to end in its own process: no traceback, no numpy warning, nothing written."""
    path = tmp_path / "s.toml"
    path.write_text(TINY)
    out = tmp_path / "out"
    command = [sys.executable, "-m", "dpmarket", "run", str(path), "--out", str(out),
               "--set", "model.regularization=1e308"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "model.regularization = 1e+308" in done.stderr and str(path) in done.stderr
    assert "Traceback" not in done.stderr and "Warning" not in done.stderr and not out.exists()


def test_without_the_check_regularization_1e308_is_the_linalg_error(monkeypatch):
    s = tiny(model={"regularization": 1e308})
    with pytest.raises(ScenarioError, match=r"model\.regularization = 1e\+308"):
        prepare(s)
    monkeypatch.setattr(magnitudes, "check_bounds", lambda *args: None)
    with np.errstate(all="ignore"), pytest.raises(np.linalg.LinAlgError):
        prepare(s)


def _collinear(path: Path, label: float | None = None) -> Path:
    """Two owners and a hold-out, three numeric columns of which two copy the first."""
    gen = np.random.default_rng(0)
    a = gen.normal(size=120)
    y = a + gen.normal(size=120) if label is None else np.full(120, label)
    pd.DataFrame({"a": a, "b": a, "c": 2 * a, "y": y}).to_csv(path, index=False)
    return path


def _table(path: Path, model: dict | None = None, **table) -> object:
    return validate({"name": "t", "data": {"source": "table", "path": str(path),
                                           "table": {"target": "y", "numeric": ["a", "b", "c"],
                                                     "blocks": 2, "holdout": 40, **table}},
                     "model": model or {}, "privacy": {"preset": "paper"},
                     "learner": {"iterations": 20, "rho": 1.0},
                     "output": {"plots": False}}, "t.toml")


def test_a_regularization_lost_in_rounding_is_refused_and_was_a_singular_matrix(tmp_path, monkeypatch):
    s = _table(_collinear(tmp_path / "t.csv"), {"regularization": 1e-300, "theta_max": 0.01})
    with pytest.raises(ScenarioError, match=r"model\.regularization = 1e-300: is lost in rounding"):
        prepare(s)
    # The deliberately wrong input: without the check the collinear features make the Hessian
    # A + nλI singular in floating point (nλ is lost next to A), and numpy's solve gives up.
    monkeypatch.setattr(magnitudes, "CONDITION", 0.0)
    with pytest.raises(np.linalg.LinAlgError):
        prepare(s)
    monkeypatch.undo()
    prepare(_table(tmp_path / "t.csv", {"regularization": 1e-10, "theta_max": 0.01}))  # above: fine


def test_labels_that_leave_nothing_to_fit_name_the_column_and_were_a_zero_division(tmp_path, monkeypatch):
    path = _collinear(tmp_path / "t.csv", label=5.0)  # every label the hold-out's mean: all 0 after it
    with pytest.raises(DataError, match=r"t\.csv: column 'y': the owners' labels, transformed with "
                                        r"data\.label_bound = 3\.0 and data\.table\.spread = 3\.0, "
                                        r"leave f\(θ\*\) = 0\.0"):
        prepare(_table(path))
    # The deliberately wrong input: without the check every ψ divides by f(θ*) = 0 — NaN for the
    # owners' own models, NaN or inf at every metric point of training (a ZeroDivisionError traceback
    # at the first when training scored its points one at a time).
    monkeypatch.setattr("dpmarket.data.problem.check_optimum", lambda *args: None)
    with np.errstate(all="ignore"):
        assert np.isnan(prepare(_table(path)).own_psi).all()
        assert not np.isfinite(execute(_table(path)).training.metrics.psi).any()


def test_a_spread_that_overflows_the_transform_names_the_key(tmp_path):
    with pytest.raises(ScenarioError, match=r"data\.table\.spread = 1e-300: makes the public transform's "
                                            r"features reach inf"):
        build_consortium(_table(_collinear(tmp_path / "t.csv"), spread=1e-300))


def test_a_budget_whose_largest_noise_draw_overflows_is_refused(monkeypatch):
    """Scale b finite but 37·b not: the largest Laplace draw numpy can return (|w| ≤ 52·ln 2)
    would make an answer infinite. The check used to test b alone."""
    s = tiny()
    prepared = prepare(s)
    owner = build_owners(s, prepared.consortium, prepared.objective)[0]
    epsilon = s.privacy.epsilon * owner.scale / 1e307  # b = 1e307: finite; 37·b = inf
    assert np.isfinite(owner.scale * s.privacy.epsilon / epsilon) and not np.isfinite(1e307 * LAPLACE_TAIL)
    with pytest.raises(ScenarioError, match=r"privacy\.epsilon = .*: so small a budget"):
        build_owners(tiny(privacy={"epsilon": epsilon}), prepared.consortium, prepared.objective)
    draws = np.random.default_rng(0).laplace(0.0, 1.0, 10**6)
    assert np.abs(draws).max() < LAPLACE_TAIL  # the bound is not violated by a million draws


def test_an_owner_never_lets_a_non_finite_answer_out():
    """The last resort: records outside every check (here a NaN, which no loader lets through)
    make respond raise instead of returning NaN to the learner."""
    block = np.array([[1.0, np.nan], [1.0, 1.0], [0.5, -0.5]])
    data = OwnerData.from_block(block, False, keep_records=True)
    owner = DataOwner(0, "o", data, make_loss("squared"), guarantee=Guarantee("laplace", "basic", 1.0),
                      answers=5, xi=1.0, noise_rng=np.random.default_rng(0), theta_max=1.0)
    with pytest.raises(FloatingPointError, match="owner 0 computed a non-finite answer"):
        owner.respond(np.array([0.5]))
    fine = DataOwner(0, "o", OwnerData.from_block(np.nan_to_num(block), False, True), make_loss("squared"),
                     guarantee=Guarantee("laplace", "basic", 1.0), answers=5, xi=1.0,
                     noise_rng=np.random.default_rng(0), theta_max=1.0)
    assert np.isfinite(fine.respond(np.array([0.5]))).all()


# --- owner names ----------------------------------------------------------------------------

def test_duplicate_owner_names_are_refused_naming_the_override(tmp_path, capsys):
    err = _cli(tmp_path, TINY + '[[owners]]\nname = "north"\n[[owners]]\nname = "north"\n', capsys=capsys)
    assert "owners.1.name = 'north': owners 0 and 1 are both called 'north'" in err
    err = _cli(tmp_path, TINY + '[[owners]]\nname = "bank-2"\n', capsys=capsys)  # owner 1's default
    assert "owners.0.name = 'bank-2': owners 0 and 1 are both called 'bank-2'" in err


def test_an_override_naming_another_table_owner_is_refused(tmp_path):
    path = _collinear(tmp_path / "t.csv")
    s = _table(path)
    assert build_consortium(s).names == ["block-1", "block-2"]
    with pytest.raises(ScenarioError, match=r"owners\.1\.name = 'block-1'"):
        build_consortium(validate({**s.model_dump(mode="json", exclude_none=True),
                                   "owners": [{}, {"name": "block-1"}]}, "t.toml"))


def test_without_the_check_a_trace_binds_a_duplicated_name_to_one_owner_silently(tmp_path):
    """The deliberately wrong input: given two owners called 'north', a trace's interval for
    'north' goes to the last of them only; the check refuses such names before any trace is read."""
    from dpmarket.schedule.sim.availability import read_trace

    trace = tmp_path / "trace.csv"
    trace.write_text("owner,start,end\nnorth,0,5\n")
    assert read_trace(str(trace), ["north", "south", "north"]) == {2: [(0.0, 5.0)]}
    with pytest.raises(ScenarioError, match=r"owners\.2\.name = 'north': owners 0 and 2"):
        build_consortium(tiny(owners=[{"name": "north"}, {}, {"name": "north"}]))


def test_the_hold_out_counts_for_the_regularization_check(tmp_path, monkeypatch):
    """Owners whose features all sit at the hold-out's mean (features 0 after standardising) have
    no curvature at all; the hold-out's collinear rows do, and the proxy solves on them."""
    gen = np.random.default_rng(0)
    held = gen.normal(size=40) * 5
    frame = pd.DataFrame({"a": np.r_[np.full(80, held.mean()), held], "y": gen.normal(size=120)})
    frame["b"], frame["c"] = frame["a"], frame["a"]
    path = tmp_path / "t.csv"
    frame.to_csv(path, index=False)
    with pytest.raises(ScenarioError, match=r"model\.regularization = 1e-300: is lost in rounding"):
        prepare(_table(path, {"regularization": 1e-300, "theta_max": 0.01}))
    # The deliberately wrong input: without the check the run gets as far as the public proxy,
    # whose optimum on the hold-out's collinear rows is a singular solve.
    s = validate({**_table(path).model_dump(mode="json", exclude_none=True),
                  "model": {"regularization": 1e-300, "theta_max": 0.01}, "learner": {"iterations": 20}}, "t")
    monkeypatch.setattr(magnitudes, "CONDITION", 0.0)
    with pytest.raises(np.linalg.LinAlgError):
        execute(s)
