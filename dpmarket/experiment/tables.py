"""The aggregate tables of an experiment, computed from the saved per-replication records.

Everything here is a pure function of the records sorted by (cell, replication), so the
tables are byte-identical whatever executor produced the records and in whatever order they
finished. Statistics are numpy's: median and quartiles by ``np.quantile`` (linear
interpolation), the standard deviation with ddof = 1 (NaN for a single replication: null in
JSON, a blank cell in sweep.csv, as ``sd`` in the market table).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from dpmarket.experiment.grid import Axis, Cell
from dpmarket.markets.forecast import Forecast, calibrate, effective_budgets
from dpmarket.privacy.guarantee import stated

GUARANTEE_COLUMNS = ("mechanism", "accountant", "delta")  # each cell's own (a grid may vary them)
SWEEP_COLUMNS = ("replications", "owners", "records", "epsilon_harmonic", "psi_mean", "psi_median",
                 "psi_q25", "psi_q75", "psi_std", "psi_zero", "own_psi_first", "own_psi_median",
                 "benefit_share_mean", "forecast", *GUARANTEE_COLUMNS)
REPLICATION_COLUMNS = ("replication", "seed", "psi_final", "iterations", "stop_reason", "collisions",
                       "dropouts", "losses", "refusals", "simulated_time", "owners_benefiting")


def grid_value(value: Any) -> Any:
    """A swept value for a CSV cell: numbers and strings as they are, tables as JSON."""
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    return value


def cell_guarantee(scenario) -> dict[str, Any]:
    """Which mechanism and accountant made a cell's (or a replicated run's) guarantee, at which δ
    and for which neighbouring relation (:func:`dpmarket.privacy.guarantee.stated`)."""
    return stated(scenario)


def guarantees(cells: list[Cell]) -> list[dict[str, Any]]:
    """sweep.json's ``privacy``: each distinct guarantee once, with the cells it covers (one entry
    unless the grid varies the mechanism, the accountant or δ)."""
    out: list[dict[str, Any]] = []
    for cell in cells:
        facts = cell_guarantee(cell.scenario)
        same = next((g for g in out if all(g[k] == v for k, v in facts.items())), None)
        if same is None:
            out.append({"cells": [cell.index], **facts})
        else:
            same["cells"].append(cell.index)
    return out


def psi_stats(psi: np.ndarray) -> dict[str, float]:
    """Mean, median, quartiles and standard deviation of a cell's final ψ over replications."""
    q25, median, q75 = np.quantile(psi, [0.25, 0.5, 0.75])
    std = float(np.std(psi, ddof=1)) if len(psi) > 1 else float("nan")
    return {"psi_mean": float(np.mean(psi)), "psi_median": float(median),
            "psi_q25": float(q25), "psi_q75": float(q75), "psi_std": std}


def participants(owners: dict) -> np.ndarray:
    """Which of a cell's owners trained (a record's owner lists run over every scenario owner; in a
    market, ``participates`` says who sold a budget, and one that declined has ε = 0)."""
    flags = owners.get("participates")
    return np.ones(len(owners["name"]), bool) if flags is None else np.array(flags, bool)


def market_cell(records: list[dict]) -> bool:
    """Whether the records come from a scenario with a market (their tables say who took part)."""
    return "participates" in records[0]["owners"]


def epsilon_harmonic(epsilons: np.ndarray) -> float:
    """The common ε that gives the same noise term: N/ε² = Σ ε_i⁻²."""
    return float(np.sqrt(len(epsilons) / np.sum(np.asarray(epsilons, dtype=float) ** -2.0)))


def cell_psi_zero(records: list[dict]) -> float:
    """ψ of the untrained model θ = 0 on the cell's data, the yardstick its ψ must beat: one number
    per cell, since its replications share one dataset. NaN when every record was saved by a
    dpmarket that did not record it (a resumed older experiment)."""
    return next((float(r["psi_zero"]) for r in records if "psi_zero" in r), float("nan"))


def cell_summary(records: list[dict]) -> dict[str, Any]:
    """The sweep.csv statistics of one cell (its records share one dataset and, in a market, one
    deal, so one owner table). ``owners`` and ``records`` count every owner; ε's harmonic mean is
    the participants'; an owner that declined never benefits."""
    owners = records[0]["owners"]
    psi = np.array([r["psi_final"] for r in records])
    own, member = np.array(owners["own_psi"]), participants(owners)
    share = np.mean((own[None, :] > psi[:, None]) & member, axis=1)  # per replication: owners that benefit
    return {"replications": len(records), "owners": len(own), "records": int(sum(owners["records"])),
            "epsilon_harmonic": epsilon_harmonic(np.array(owners["epsilon"])[member]), **psi_stats(psi),
            "psi_zero": cell_psi_zero(records),
            "own_psi_first": float(own[0]), "own_psi_median": float(np.median(own)),
            "benefit_share_mean": float(np.mean(share))}


def theorem_terms(records: list[dict], scenario) -> tuple[np.ndarray, int]:
    """The ε and total records n that Theorem 2's sums run over: the owners that trained (in a
    market cell, the participants; everyone otherwise). Under (ε, δ) accounting the ε are the cell's
    effective budgets (:class:`~dpmarket.markets.forecast.EffectiveBudgets`: those of basic Laplace
    answers as noisy as its owners' calibrated answers), so one fit spans cells of several
    accountants or mechanisms; under Theorem 1's noise they are the budgets themselves."""
    owners = records[0]["owners"]
    member = participants(owners)
    epsilons = np.array(owners["epsilon"], dtype=float)
    noise = effective_budgets(scenario, len(member))
    eps = epsilons[member] if noise is None else noise.of_members(epsilons, member)
    return eps, int(np.sum(np.array(owners["records"])[member]))


def fit_forecast(summaries: list[dict], by_cell: list[list[dict]],
                 cells: list[Cell]) -> tuple[Forecast | None, str]:
    """c₁, c₂ of Theorem 2 fitted to the cells' mean ψ; (None, why) when they cannot be fitted."""
    try:
        terms = [theorem_terms(records, cell.scenario) for records, cell in zip(by_cell, cells, strict=True)]
        eps, n = zip(*terms, strict=True)
        return calibrate(list(eps), [float(v) for v in n], [s["psi_mean"] for s in summaries]), ""
    except ValueError as exc:  # also: a table's Gaussian cells, whose Ξ/Ξ₂ needs its feature count
        return None, str(exc)


def sweep_rows(cells: list[Cell], by_cell: list[list[dict]]) -> tuple[list[tuple], Forecast | None, str]:
    """The rows of sweep.csv (after ``cell`` and the swept values) and the forecast fit."""
    summaries = [cell_summary(records) for records in by_cell]
    fit, why = fit_forecast(summaries, by_cell, cells)
    rows = []
    for cell, summary, records in zip(cells, summaries, by_cell, strict=True):
        summary["forecast"] = float(fit.psi(*theorem_terms(records, cell.scenario))) if fit else ""
        summary.update(cell_guarantee(cell.scenario))
        rows.append((cell.index, *map(grid_value, cell.values), *(summary[c] for c in SWEEP_COLUMNS)))
    return rows, fit, why


def blank_undefined(header: tuple, rows: list[tuple]) -> list[tuple]:
    """``rows`` for sweep.csv with an undefined ``psi_std`` (one replication: no spread) left blank
    rather than written ``nan``; the rows themselves keep NaN, pandas' blank."""
    column = header.index("psi_std")
    return [(*row[:column], "" if np.isnan(row[column]) else row[column], *row[column + 1:]) for row in rows]


def sweep_owner_rows(cells: list[Cell], by_cell: list[list[dict]]) -> list[tuple]:
    """The rows of sweep_owners.csv: every owner of every cell against the cell's median ψ (with
    a market, whether it took part last; an owner that declined has ε = 0 and never benefits)."""
    rows, market = [], any(market_cell(records) for records in by_cell)
    for cell, records in zip(cells, by_cell, strict=True):
        owners = records[0]["owners"]
        member = participants(owners)
        median = float(np.median([r["psi_final"] for r in records]))
        values = tuple(map(grid_value, cell.values))
        for i, own in enumerate(owners["own_psi"]):
            row = (cell.index, *values, i, owners["name"][i], owners["records"][i],
                   owners["epsilon"][i], own, median, bool(member[i] and median < own))
            rows.append((*row, bool(member[i])) if market else row)
    return rows


def sweep_header(axes: list[Axis], market: bool = False) -> tuple[tuple, tuple]:
    """Headers of sweep.csv and sweep_owners.csv (which gains ``participates`` with a market)."""
    keys = tuple(a.key for a in axes)
    return (("cell", *keys, *SWEEP_COLUMNS),
            ("cell", *keys, "owner", "name", "records", "epsilon", "own_psi", "psi_median", "benefits",
             *(("participates",) if market else ())))


def replication_rows(records: list[dict]) -> list[tuple]:
    """The rows of replications.csv, one per replication (owners that declined never benefit)."""
    own, member = np.array(records[0]["owners"]["own_psi"]), participants(records[0]["owners"])
    return [(*(r[c] for c in REPLICATION_COLUMNS[:-1]), int(np.sum((r["psi_final"] < own) & member)))
            for r in records]


def metric_rows(records: list[dict]) -> list[tuple]:
    """The rows of a replicated run's metrics.csv: replication, k, time, psi."""
    return [(r["replication"], k, t, p) for r in records
            for k, t, p in zip(r["metrics"]["k"], r["metrics"]["time"], r["metrics"]["psi"], strict=True)]


OWNER_COLUMNS = ("owner", "name", "records", "epsilon", "own_psi", "benefit_share")


def owner_header(records: list[dict]) -> tuple:
    """The header of a replicated run's owners.csv (``participates`` added with a market)."""
    return (*OWNER_COLUMNS, "participates") if market_cell(records) else OWNER_COLUMNS


def owner_rows(records: list[dict]) -> list[tuple]:
    """A replicated run's owners.csv: each owner's own-data ψ and how often it benefits (with a
    market, whether it took part: one that declined has ε = 0 and never benefits)."""
    owners = records[0]["owners"]
    psi = np.array([r["psi_final"] for r in records])
    own, member = np.array(owners["own_psi"]), participants(owners)
    share = np.mean((psi[:, None] < own[None, :]) & member, axis=0)
    extra = (lambda i: (bool(member[i]),)) if market_cell(records) else (lambda i: ())
    return [(i, owners["name"][i], owners["records"][i], owners["epsilon"][i], float(own[i]),
             float(share[i]), *extra(i)) for i in range(len(own))]
