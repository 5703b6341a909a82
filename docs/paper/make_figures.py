"""Draw the paper-reproduction figures in docs/paper/ (a stop-gap until ``sweep`` is merged).

The ``sweep`` and ``run --replications`` commands (experiments branch) are the supported way to
run these studies; their exact invocations are in each ``scenarios/paper/*.toml``. This script
does the same computation in a few dozen lines so the figures could be produced before those
commands existed: for every grid cell it builds the owners' data once (the paper scenarios fix
``data.seed``, so the data do not change between replications), then runs each replication
through the same stages as ``dpmarket.run.execute`` (``build_owners``, ``make_learner``,
``Training``, ``simulate``) with the seeds of ``dpmarket.rng.replication_seeds``. It checks
once that a replication gives exactly the ψ of ``execute``. The tables follow the
experiments contract (sweep.csv, sweep_owners.csv, metrics.csv with a replication column), and
the figures come from :mod:`dpmarket.sweep_plots`.

    PYTHONPATH=. python docs/paper/make_figures.py [STUDY ...] [--replications R]

Studies: lending_convergence, lending_scaling, many_banks, hospitals_convergence,
hospitals_epsilon. Outputs go to docs/paper/STUDY/ (PNG, CSV, and a report.html not committed).
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path

import numpy as np
import pandas as pd

from dpmarket import rng
from dpmarket.data import build_consortium
from dpmarket.events import EventLog
from dpmarket.market.forecast import calibrate
from dpmarket.models import Objective, make_loss
from dpmarket.run import build_owners, execute, simulate
from dpmarket.scenario import load
from dpmarket.sweep_plots import draw_bands, draw_sweep, fit_loglog
from dpmarket.training import Training, make_learner, record_points

HERE = Path(__file__).resolve().parent
SCENARIOS = HERE.parent.parent / "scenarios" / "paper"

# study: (scenario file, grid, fixed overrides). The grids are the ones in each scenario's comments.
STUDIES = {
    "lending_convergence": ("lending_banks.toml", {"privacy.epsilon": [10.0, 100.0, 1000.0]}, []),
    "lending_scaling": ("lending_banks.toml", {"privacy.epsilon": [25.0, 50.0, 100.0, 250.0, 500.0],
                                                "data.records": [100_000, 200_000, 300_000, 500_000,
                                                                 1_000_000]}, []),
    "many_banks_capped": ("many_banks.toml", {"data.owners": [2, 5, 10, 20, 50, 100, 200],
                                              "privacy.epsilon": [2.5, 10.0, 25.0, 100.0, 250.0, 1000.0]},
                          []),
    "many_banks_horizon": ("many_banks.toml", {"data.owners": [2, 5, 10, 20, 50, 100, 200],
                                               "privacy.epsilon": [2.5, 10.0, 25.0, 100.0, 250.0,
                                                                   1000.0]},
                           ['privacy.split="horizon"']),
    "hospitals_convergence": ("ny_hospitals.toml", {"privacy.epsilon": [10.0, 100.0, 1000.0]}, []),
    "hospitals_epsilon": ("ny_hospitals.toml", {"privacy.epsilon": [0.1, 1.0, 10.0, 100.0, 1000.0,
                                                                    10_000.0]}, []),
}


def run_cell(path: Path, cell: dict, replications: int, fixed: tuple = ()) -> tuple:
    """All replications of one cell: sweep row (no forecast), owner rows, metrics, final ψ, ε_i."""
    scenario = load(path, [*fixed, *(f"{k}={v}" for k, v in cell.items()), "output.plots=false"])
    assert scenario.data.seed is not None, "paper scenarios fix data.seed"
    consortium = build_consortium(scenario)
    m, lr = scenario.model, scenario.learner
    objective = Objective(make_loss(m.loss), consortium.owners, m.regularization, m.theta_max)
    own = objective.psis(objective.own_data_models())
    points = record_points(lr.iterations, scenario.output.metric_points)
    metrics, finals = [], []
    for r, seed in enumerate(rng.replication_seeds(scenario.seed, replications)):
        run = scenario.model_copy(update={"seed": seed})
        learner = make_learner(lr.algorithm, consortium.sizes, objective.p, lr.iterations, lr.rho,
                               m.regularization, m.theta_max, lr.theta_l_step, lr.weighting)
        training = Training(learner, build_owners(run, consortium, objective), objective,
                            EventLog(None), points)
        simulate(run, training, consortium.names)
        metrics.append(pd.DataFrame({"replication": r, "k": training.metrics.k,
                                     "time": training.metrics.time, "psi": training.metrics.psi}))
        finals.append(training.metrics.psi[-1])
    finals = np.array(finals)
    eps = np.array([scenario.owner_value(i, "epsilon") for i in range(len(own))])
    q25, median, q75 = np.quantile(finals, [0.25, 0.5, 0.75])
    row = {**cell, "replications": replications, "owners": len(own),
           "records": int(consortium.sizes.sum()),
           "epsilon_harmonic": float(np.sqrt(len(eps) / np.sum(eps**-2.0))),
           "psi_mean": finals.mean(), "psi_median": median, "psi_q25": q25, "psi_q75": q75,
           "psi_std": finals.std(ddof=1), "own_psi_first": own[0], "own_psi_median": np.median(own),
           "benefit_share_mean": float(np.mean(own[None, :] > finals[:, None]))}
    owners = pd.DataFrame({**{k: [v] * len(own) for k, v in cell.items()}, "owner": range(len(own)),
                           "name": consortium.names, "records": consortium.sizes, "epsilon": eps,
                           "own_psi": own, "psi_median": median, "benefits": median < own})
    return row, owners, pd.concat(metrics, ignore_index=True), finals, eps


def check_against_execute(path: Path, cell: dict, psi: float, fixed: tuple = ()) -> None:
    """The first replication of a cell must be exactly ``execute`` with that replication's seed."""
    scenario = load(path, [*fixed, *(f"{k}={v}" for k, v in cell.items()), "output.plots=false"])
    seed = rng.replication_seeds(scenario.seed, 1)[0]
    result = execute(scenario.model_copy(update={"seed": seed}))
    assert result.psi_final == psi, (result.psi_final, psi)


def study(name: str, replications: int) -> None:
    """Run one study's grid and write its tables and figures into docs/paper/NAME/."""
    file, grid, fixed = STUDIES[name]
    path, out = SCENARIOS / file, HERE / name
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    rows, owners, metrics, finals, epsilons = [], [], {}, [], []
    for index, values in enumerate(itertools.product(*grid.values())):
        cell = dict(zip(grid, values, strict=True))
        row, own, met, fin, eps = run_cell(path, cell, replications, fixed)
        if index == 0:
            check_against_execute(path, cell, float(met[met["replication"] == 0]["psi"].iloc[-1]),
                                  fixed)
        rows.append({"cell": index, **row})
        owners.append(own.assign(cell=index))
        metrics[", ".join(f"{k.split('.')[-1]}={v:g}" for k, v in cell.items())] = met
        finals.append(fin)
        epsilons.append(eps)
        print(f"{name} cell {index} {cell}: psi mean {row['psi_mean']:.4g}", flush=True)
    sweep = pd.DataFrame(rows)
    forecast = calibrate(epsilons, list(sweep["records"]), list(sweep["psi_mean"]))
    sweep["forecast"] = [forecast.psi(e, n) for e, n in zip(epsilons, sweep["records"], strict=True)]
    owners = pd.concat(owners, ignore_index=True)
    owners = owners[["cell", *[c for c in owners.columns if c != "cell"]]]
    scenario_name = load(path).name
    meta = {"scenario": scenario_name, "grid": grid, "overrides": fixed, "replications": replications,
            "seed": load(path).seed, "executor": "serial (docs/paper/make_figures.py)",
            "forecast": forecast.to_dict(), "wall_seconds": round(time.perf_counter() - start, 1),
            "slopes": slopes(sweep, np.array(finals), grid)}
    sweep.to_csv(out / "sweep.csv", index=False)
    owners.to_csv(out / "sweep_owners.csv", index=False)
    if "convergence" in name:  # ψ against k of every replication: the band figure's data
        pd.concat([m.assign(cell=label) for label, m in metrics.items()]).to_csv(out / "metrics.csv",
                                                                                 index=False)
    (out / "sweep.json").write_text(json.dumps(meta, indent=2, default=float) + "\n")
    draw(name)
    print(json.dumps({k: meta[k] for k in ("forecast", "slopes", "wall_seconds")}, indent=1, default=float))


def draw(name: str) -> None:
    """Figures and report.html of a study from its saved tables (``--redraw`` skips the runs)."""
    out = HERE / name
    sweep = pd.read_csv(out / "sweep.csv")
    owners_file = out / "sweep_owners.csv"  # not committed for the many-banks studies (large)
    owners = pd.read_csv(owners_file) if owners_file.exists() else pd.DataFrame()
    meta = json.loads((out / "sweep.json").read_text())
    if "convergence" not in name:
        figures = draw_sweep(sweep, owners, meta, out)
    else:
        metrics = pd.read_csv(out / "metrics.csv")
        bands = dict(tuple(metrics.groupby("cell", sort=False)))
        figures = [draw_bands(bands, out / "convergence.png",
                              f"{meta['scenario']}: ψ(θ_L,k), {meta['replications']} runs per ε")]
    from dpmarket.report import sweep_report

    sweep_report(out, f"{name}: paper reproduction", sweep, owners, meta, figures)


def slopes(sweep: pd.DataFrame, finals: np.ndarray, grid: dict) -> dict:
    """Log-log slope of mean ψ against ε (per n) and against n (per ε), with two standard errors:
    the OLS one from the residuals, and a bootstrap one resampling replications jointly (the
    cells share replication seeds: common random numbers)."""
    out = {}
    for key, column in (("privacy.epsilon", "epsilon_harmonic"), ("data.records", "records")):
        if key not in grid:
            continue
        others = [k for k in grid if k not in (key,)]
        groups = sweep.groupby(others) if others else [((), sweep)]
        for value, rows in groups:
            fit = fit_loglog(rows[column], rows["psi_mean"])
            boot = _bootstrap(rows[column].to_numpy(float), finals[rows.index.to_numpy()])
            label = f"{key} | {others[0]}={value[0]:g}" if others else key
            out[label] = {"slope": fit.slope, "se_ols": fit.se, "se_bootstrap": boot}
    return out


def _bootstrap(x: np.ndarray, finals: np.ndarray, draws: int = 400) -> float:
    gen = np.random.default_rng(7)
    reps = finals.shape[1]
    values = [fit_loglog(x, finals[:, gen.integers(0, reps, reps)].mean(axis=1)).slope
              for _ in range(draws)]
    return float(np.std(values, ddof=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("studies", nargs="*", default=list(STUDIES))
    parser.add_argument("--replications", type=int, default=40)
    parser.add_argument("--redraw", action="store_true", help="redraw from the saved tables only")
    args = parser.parse_args()
    for name in args.studies:
        if args.redraw:
            draw(name)
        else:
            study(name, args.replications)


if __name__ == "__main__":
    main()
