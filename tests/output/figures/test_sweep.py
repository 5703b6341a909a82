"""Sweep and replication figures on small synthetic tables in the experiments contract format."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pandas as pd

from dpmarket.output.figures.sweep import (
    band,
    collaboration_grid,
    draw_band,
    draw_sweep,
    fit_loglog,
    swept_keys,
)

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def synthetic_sweep(grid: dict[str, list], psi, own_first: float = 1e-3,
                    records_per_owner: int = 10_000) -> pd.DataFrame:
    """A sweep.csv-shaped table: ψ given by ``psi(N, ε, n)``; columns in the contract order."""
    rows = []
    for cell, values in enumerate(itertools.product(*grid.values())):
        v = dict(zip(grid, values, strict=True))
        N = v.get("data.owners", 3)
        eps = v.get("privacy.epsilon", 1.0)
        n = N * v.get("data.records", records_per_owner)
        p = psi(N, eps, n)
        rows.append({"cell": cell, **v, "replications": 20, "owners": N, "records": n,
                     "epsilon_harmonic": eps, "psi_mean": p, "psi_median": 0.9 * p,
                     "psi_q25": 0.7 * p, "psi_q75": 1.3 * p, "psi_std": 0.4 * p,
                     "own_psi_first": own_first, "own_psi_median": own_first,
                     "benefit_share_mean": float(p < own_first), "forecast": 1.1 * p})
    return pd.DataFrame(rows)


def synthetic_owners(sweep: pd.DataFrame) -> pd.DataFrame:
    """sweep_owners.csv-shaped: owner i's own ψ falls with its size; benefits where ψ < own."""
    keys = swept_keys(sweep)
    rows = []
    for _, cell in sweep.iterrows():
        for i in range(int(cell["owners"])):
            records = 1000 * (i + 1)
            own = 10.0 / records
            rows.append({"cell": cell["cell"], **{k: cell[k] for k in keys}, "owner": i,
                         "name": f"o{i}", "records": records, "epsilon": cell["epsilon_harmonic"],
                         "own_psi": own, "psi_median": cell["psi_median"],
                         "benefits": bool(cell["psi_median"] < own)})
    return pd.DataFrame(rows)


def test_slope_fit_recovers_minus_two_and_rejects_minus_one():
    """ψ = c ε⁻² with 10 % multiplicative noise: the slope is −2 within 5 SE; ψ = c ε⁻¹ is not."""
    gen = np.random.default_rng(11)
    eps = np.geomspace(0.5, 500, 8)
    noise = np.exp(gen.normal(0, 0.1, eps.size))
    right = fit_loglog(eps, 3.0 * eps**-2 * noise)
    wrong = fit_loglog(eps, 3.0 * eps**-1 * noise)
    assert abs(right.slope + 2) < 5 * right.se
    assert abs(wrong.slope + 2) > 5 * wrong.se
    assert np.isclose(np.exp(right.intercept), 3.0, rtol=0.3)


def test_slope_standard_error_is_calibrated():
    """Over 2,000 noisy data sets the slopes spread as the reported SE says (theory: σ/√Sxx)."""
    gen = np.random.default_rng(12)
    x = np.geomspace(1, 1000, 10)
    lx = np.log(x)
    sigma, runs = 0.2, 2000
    fits = [fit_loglog(x, x**-2 * np.exp(gen.normal(0, sigma, x.size))) for _ in range(runs)]
    slopes = np.array([f.slope for f in fits])
    theory = sigma / np.sqrt(np.sum((lx - lx.mean()) ** 2))
    se_of_sd = theory / np.sqrt(2 * (runs - 1))
    assert abs(np.std(slopes, ddof=1) - theory) < 5 * se_of_sd
    assert abs(np.mean(slopes) + 2) < 5 * theory / np.sqrt(runs)
    mean_se = np.sqrt(np.mean([f.se**2 for f in fits]))  # E[SE²] = σ²/Sxx exactly
    assert abs(mean_se - theory) < 0.05 * theory
    assert abs(np.std(slopes, ddof=1) - 2 * theory) > 5 * se_of_sd  # a doubled SE would be caught


def test_collaboration_grid_marks_the_right_cells():
    """E ψ = 1/(N ε²) against ψ(θ_1*) = 10⁻³: the first owner benefits exactly where N ε² > 1000."""
    grid = {"data.owners": [2, 5, 20, 100], "privacy.epsilon": [1.0, 10.0, 30.0]}
    sweep = synthetic_sweep(grid, lambda N, e, n: 1.0 / (N * e**2))
    cells = collaboration_grid(sweep)
    assert list(cells.index) == [2, 5, 20, 100] and list(cells.columns) == [1.0, 10.0, 30.0]
    expected = np.array([[N * e**2 > 1000 for e in cells.columns] for N in cells.index])
    assert np.array_equal(cells.to_numpy() < 0, expected)
    assert expected.any() and not expected.all()  # both kinds of cell are present
    jittered = sweep.assign(epsilon_harmonic=sweep["epsilon_harmonic"] * (1 + 1e-15 * sweep["owners"]))
    assert collaboration_grid(jittered).shape == (4, 3)  # rounding in ε_harmonic splits no column
    flipped = collaboration_grid(sweep.assign(own_psi_first=1e-6))  # a far better own model
    assert not (flipped.to_numpy() < 0).any()


def test_band_is_the_median_and_quartiles_over_replications():
    reps, ks = 41, [0, 10, 20]
    metrics = pd.DataFrame([{"replication": r, "k": k, "time": float(k), "psi": (r + 1) / (k + 1)}
                            for r in range(reps) for k in ks])
    b = band(metrics).set_index("k")
    for k in ks:
        values = (np.arange(reps) + 1) / (k + 1)
        assert np.isclose(b.loc[k, "median"], np.median(values))
        assert np.isclose(b.loc[k, "q25"], np.quantile(values, 0.25))
        assert np.isclose(b.loc[k, "q75"], np.quantile(values, 0.75))
        assert b.loc[k, "count"] == reps


def test_draw_band_writes_a_deterministic_png(tmp_path):
    gen = np.random.default_rng(3)
    metrics = pd.DataFrame([{"replication": r, "k": k, "time": float(k),
                             "psi": np.exp(gen.normal(0, 0.3)) / (1 + k)}
                            for r in range(10) for k in range(0, 101, 10)])
    a = draw_band(metrics, tmp_path / "a.png", "band")
    b = draw_band(metrics, tmp_path / "b.png", "band")
    assert a.read_bytes().startswith(PNG_SIGNATURE) and a.read_bytes() == b.read_bytes()


def _names(paths: list[Path]) -> list[str]:
    return [p.name for p in paths]


def test_draw_sweep_draws_what_the_swept_keys_allow(tmp_path):
    """ε only: ψ-ε and per-owner benefit; ε × N: also the map; n: the ψ-n figure."""
    law = lambda N, e, n: 1e6 / (n * e) ** 2  # noqa: E731
    only_eps = synthetic_sweep({"privacy.epsilon": [1.0, 10.0, 100.0]}, law)
    assert _names(draw_sweep(only_eps, synthetic_owners(only_eps), {}, tmp_path)) == [
        "psi_epsilon.png", "owner_benefit.png"]
    both = synthetic_sweep({"data.owners": [2, 4], "privacy.epsilon": [1.0, 10.0]}, law)
    assert _names(draw_sweep(both, synthetic_owners(both), {}, tmp_path)) == [
        "psi_epsilon.png", "collaboration.png", "owner_benefit.png"]
    sizes = synthetic_sweep({"data.records": [1000, 10_000], "privacy.epsilon": [1.0, 10.0]}, law)
    paths = draw_sweep(sizes, pd.DataFrame(), {"forecast": {"c1": 0, "c2": 1e6, "r2": 1}}, tmp_path)
    assert _names(paths) == ["psi_epsilon.png", "psi_records.png"]
    assert all(p.read_bytes().startswith(PNG_SIGNATURE) for p in paths)


def test_sweep_figures_are_deterministic(tmp_path):
    sweep = synthetic_sweep({"data.owners": [2, 4], "privacy.epsilon": [1.0, 10.0]},
                            lambda N, e, n: 1e6 / (n * e) ** 2)
    owners = synthetic_owners(sweep)
    drawn = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        drawn.append([p.read_bytes() for p in draw_sweep(sweep, owners, {}, tmp_path / name)])
    assert drawn[0] == drawn[1]
