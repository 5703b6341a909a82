"""The notebook API: runs, replications, sweeps and market comparisons from Python, as DataFrames.

``dpmarket.run(scenario)`` returns a :class:`Run` whose tables are pandas DataFrames with the run's
seed in every row (as Mesa's data collectors do), so runs concatenate and group without losing
where each row came from. A scenario is a file, the name of a bundled example
(``"ny_hospitals"``) or a :class:`~dpmarket.scenario.schema.Scenario`; ``seed`` and ``overrides`` (a
mapping ``{"privacy.epsilon": 100}`` or ``--set`` texts ``["privacy.epsilon=100"]``) are applied
and checked exactly as on the command line. Nothing is written unless ``out`` names a directory,
which then receives exactly what the command would write (and the tables are read from the run).
The one exception is the forecast cache of a market scenario calibrated by pilot runs
(``outputs/forecasts/`` under the working directory, or ``$DPMARKET_FORECAST_CACHE``),
which the commands share.

Events: a run streams them to a CSV file as it goes (memory stays flat however long the run);
without ``out`` that file is a temporary one, read back into :attr:`Run.events` and deleted
(``events=False`` skips it). Errors are the project's exceptions (:mod:`dpmarket.errors`), never
``SystemExit``. Imports are deferred to the calls, so ``import dpmarket`` stays fast.

Every argument is checked at the boundary, before any work (:func:`checked`, one table of checks
by argument name): a wrong type is an :class:`~dpmarket.errors.ArgumentTypeError` (also a
``TypeError``), a wrong value an :class:`~dpmarket.errors.ArgumentValueError` (also a
``ValueError``), each naming the function, the argument and the value; an experiment too large for
the machine's memory (``replications=10**9``, a grid of millions of cells) is refused there with
the size it would need. A scenario that the overrides make invalid is a
:class:`~dpmarket.errors.ScenarioError` (also a ``ValueError``) naming the key.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import json
import math
import numbers
import os
import re
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dpmarket.errors import ArgumentTypeError, ArgumentValueError, ScenarioError
from dpmarket.scenario.schema import Scenario
from dpmarket.system import environment

if TYPE_CHECKING:
    import pandas as pd

    from dpmarket.runs.run import RunResult

ScenarioLike = str | Path | Scenario
Overrides = Mapping[str, Any] | Iterable[str] | None


# --- arguments: one check at the boundary --------------------------------------------------------

EXECUTOR_NAMES = ("serial", "process", "dask")  # experiment.executors.EXECUTORS (not imported: speed)
GRID_CELLS = 100_000  # experiment.grid.MAX_CELLS: cells a grid may have (each a validated scenario)


def _integer(function: str, name: str, value: Any, least: int) -> int:
    """An int (a numpy integer too; not a bool, a float or a string) of at least ``least``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ArgumentTypeError(function, name, value, f"must be an integer, not {type(value).__name__}")
    if value < least:
        raise ArgumentValueError(function, name, value, f"must be at least {least}")
    return int(value)


def _check_scenario(function: str, name: str, value: Any) -> ScenarioLike:
    if isinstance(value, Scenario):
        return value
    if isinstance(value, (str, os.PathLike)) and not isinstance(value, bytes):
        text = os.fspath(value)
        if not isinstance(text, str) or not text.strip():
            raise ArgumentValueError(function, name, value, "must name a file or a bundled scenario")
        return value
    raise ArgumentTypeError(function, name, value, "must be a file path, a bundled scenario's name "
                            f"or a dpmarket.Scenario, not {type(value).__name__}")


def _check_seed(function: str, name: str, value: Any) -> int:
    return _integer(function, name, value, 0)


def _check_count(function: str, name: str, value: Any) -> int:
    return _integer(function, name, value, 1)


def _check_flag(function: str, name: str, value: Any) -> bool:
    if type(value).__name__ not in ("bool", "bool_"):  # True/False, or numpy's
        raise ArgumentTypeError(function, name, value, f"must be True or False, not {type(value).__name__}")
    return bool(value)


def _check_out(function: str, name: str, value: Any) -> Path:
    if isinstance(value, bytes) or not isinstance(value, (str, os.PathLike)):
        raise ArgumentTypeError(function, name, value,
                                f"must be a directory path, not {type(value).__name__}")
    if not isinstance(os.fspath(value), str) or not os.fspath(value).strip():
        raise ArgumentValueError(function, name, value, "must name a directory")
    return Path(value)


def _check_owner(function: str, name: str, value: Any) -> int:
    return _integer(function, name, value, 0)


def _choice(names: tuple[str, ...]) -> Callable[[str, str, Any], str]:
    """The check of an argument that must be one of ``names``."""
    def check(function: str, name: str, value: Any) -> str:
        if not isinstance(value, str):
            raise ArgumentTypeError(function, name, value, f"must be one of {', '.join(names)}")
        if value not in names:
            raise ArgumentValueError(function, name, value, f"must be one of {', '.join(names)}")
        return value

    return check


def _check_confidence(function: str, name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ArgumentTypeError(function, name, value, f"must be a number, not {type(value).__name__}")
    if not 0.0 < float(value) < 1.0:
        raise ArgumentValueError(function, name, value, "must be between 0 and 1")
    return float(value)


def _texts(function: str, name: str, value: Any, what: str) -> list[str]:
    """A string, or an iterable of strings, as a list (not bytes, not a mapping)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, (bytes, bytearray, Mapping)) or not isinstance(value, Iterable):
        raise ArgumentTypeError(function, name, value, f"must be {what}, not {type(value).__name__}")
    items = list(itertools.islice(value, GRID_CELLS + 1))
    for item in items:
        if not isinstance(item, str):
            raise ArgumentTypeError(function, name, value, f"must be {what}; holds a {type(item).__name__}")
    return items


def _check_overrides(function: str, name: str, value: Any) -> list[str]:
    """Overrides as ``--set`` texts: every key a string, every value with a TOML form."""
    if isinstance(value, Mapping):
        texts = []
        for key, item in value.items():
            if not isinstance(key, str) or not key.strip():
                raise ArgumentTypeError(function, name, value, f"keys must be dotted keys, not {key!r}")
            try:
                texts.append(f"{key}={toml_value(item, key)}")
            except ScenarioError as exc:
                raise ArgumentTypeError(function, f"{name}[{key!r}]", item, exc.reason) from None
        return texts
    what = "a mapping {key: value}, a 'key=value' text or a list of them"
    return _texts(function, name, value, what)


def _check_grid(function: str, name: str, value: Any) -> list[str]:
    """A grid as ``--grid`` texts: a non-empty mapping of keys to non-empty lists of values, or texts;
    its cell count is bounded before any text is built (a huge range would not fit in memory)."""
    if isinstance(value, Mapping):
        if not value:
            raise ArgumentValueError(function, name, value, "needs at least one key to sweep")
        cells, texts = 1, []
        for key, values in value.items():
            if not isinstance(key, str) or not key.strip():
                raise ArgumentTypeError(function, name, value, f"keys must be dotted keys, not {key!r}")
            if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Iterable):
                raise ArgumentTypeError(function, f"{name}[{key!r}]", values,
                                        "must be a list of the values to sweep")
            items = list(itertools.islice(values, GRID_CELLS + 1))
            cells *= max(1, len(items))
            if not items:
                raise ArgumentValueError(function, f"{name}[{key!r}]", values, "needs at least one value")
            _grid_size(function, name, value, cells if len(items) <= GRID_CELLS else math.inf)
            try:
                texts.append(f"{key}={','.join(toml_value(v, key) for v in items)}")
            except ScenarioError as exc:
                raise ArgumentTypeError(function, f"{name}[{key!r}]", values, exc.reason) from None
        return texts
    texts = _texts(function, name, value, "a mapping {key: [values]}, a 'key=v1,v2' text or a list of them")
    if not texts:
        raise ArgumentValueError(function, name, value, "needs at least one key to sweep")
    return texts


def _grid_size(function: str, name: str, value: Any, cells: float) -> None:
    if cells > GRID_CELLS:
        shown = "more than 10^5" if math.isinf(cells) else f"{cells:,}"
        raise ArgumentValueError(function, name, value, f"makes {shown} cells, each a scenario validated and "
                                 f"held in memory before any run: at most {GRID_CELLS:,}")


def _check_policies(function: str, name: str, value: Any) -> str:
    texts = _texts(function, name, value, "a policy name or a list of them")
    if not texts or not all(t.strip() for t in texts):
        raise ArgumentValueError(function, name, value, "needs at least one policy name")
    return ",".join(texts)


CHECKS: dict[str, Callable[[str, str, Any], Any]] = {
    "scenario": _check_scenario, "seed": _check_seed, "overrides": _check_overrides, "out": _check_out,
    "replications": _check_count, "workers": _check_count, "events": _check_flag, "progress": _check_flag,
    "executor": _choice(EXECUTOR_NAMES), "grid": _check_grid, "policies": _check_policies,
    "properties": _check_flag, "oracle": _check_flag, "owner": _check_owner, "runs": _check_count,
    "view": _choice(("answers", "model", "both")), "method": _choice(("worlds", "one-run")),
    "confidence": _check_confidence,
}


def checked(function: Callable) -> Callable:
    """The API's one validation layer: each argument of a call to ``function`` goes through its check
    in :data:`CHECKS` (by name) before the body runs, which then sees the checked values (overrides
    and grids as texts, paths as Paths). None passes where it is the argument's default."""
    signature = inspect.signature(function)
    name = function.__name__

    @functools.wraps(function)
    def call(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)  # a missing or unknown argument: Python's own TypeError
        for argument, value in bound.arguments.items():
            if value is None and signature.parameters[argument].default is None:
                continue
            bound.arguments[argument] = CHECKS[argument](name, argument, value)
        environment.check()  # a DPMARKET_* variable it cannot read: before any work, as the commands
        return function(*bound.args, **bound.kwargs)

    return call


# --- scenarios ----------------------------------------------------------------------------------

@checked
def load(scenario: ScenarioLike, seed: int | None = None, overrides: Overrides = None) -> Scenario:
    """A validated scenario from a file, a bundled example's name or a Scenario, with ``seed`` and
    ``overrides`` applied as ``--seed`` and ``--set`` would be."""
    return _loaded(scenario, seed, overrides)


def _loaded(scenario: ScenarioLike, seed: int | None, overrides: Overrides, swept: bool = False) -> Scenario:
    """:func:`load`'s work (arguments already checked); ``swept``: the base of a sweep, whose rules
    tying keys together are checked on each cell (:func:`dpmarket.scenario.checks.check_consistency`)."""
    from dpmarket import scenario as schema
    from dpmarket.scenario.bundled import find

    texts = override_texts(overrides) + ([] if seed is None else [f"seed={int(seed)}"])
    if isinstance(scenario, Scenario):
        return schema.override(scenario, texts, swept=swept)
    return schema.load(find(scenario), texts, swept=swept)


def override_texts(overrides: Overrides) -> list[str]:
    """Overrides as ``--set`` texts: a mapping's values written as TOML, texts as they are."""
    if overrides is None:
        return []
    if isinstance(overrides, str):
        return [overrides]
    if isinstance(overrides, Mapping):
        return [f"{key}={toml_value(value, key)}" for key, value in overrides.items()]
    return [str(text) for text in overrides]


def toml_value(value: Any, key: str = "") -> str:
    """``value`` as an inline TOML value (what ``--set key=...`` reads back as the same value)."""
    if hasattr(value, "tolist") and getattr(value, "ndim", None) == 0:  # a numpy scalar: its Python value
        value = value.tolist()
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real):
        number = float(value)
        if math.isfinite(number):
            return repr(number)
        return "nan" if math.isnan(number) else ("inf" if number > 0 else "-inf")
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{_toml_key(k)} = {toml_value(v, key)}" for k, v in value.items()) + "}"
    listed = isinstance(value, Sequence) and not isinstance(value, (bytes, bytearray))  # bytes: no TOML form
    if listed or hasattr(value, "tolist"):
        items = value.tolist() if hasattr(value, "tolist") else value
        return "[" + ", ".join(toml_value(v, key) for v in items) + "]"
    raise ScenarioError("overrides", key, value, f"a {type(value).__name__} has no TOML form")


def _toml_key(key: Any) -> str:
    text = str(key)
    return text if re.fullmatch(r"[A-Za-z0-9_-]+", text) else _toml_string(text)


def _toml_string(text: str) -> str:
    """A TOML basic string: JSON's escapes are TOML's, and TOML also wants DEL escaped."""
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


# --- one run ------------------------------------------------------------------------------------

@dataclass
class Run:
    """One run: ``metrics`` (seed, k, time, psi), ``owners`` (seed and the owners.csv columns),
    ``events`` (seed and the events.csv columns; None with ``events=False``), ``summary`` (the
    summary.json content), ``scenario`` (resolved), ``out`` (its directory, if written) and
    ``result`` (everything in memory: the model, the owners' ledgers, the network report)."""

    scenario: Scenario
    summary: dict
    metrics: pd.DataFrame
    owners: pd.DataFrame
    events: pd.DataFrame | None
    result: RunResult = field(repr=False)
    out: Path | None = None


@checked
def run(scenario: ScenarioLike, seed: int | None = None, overrides: Overrides = None,
        out: str | Path | None = None, *, replications: int | None = None, events: bool = True,
        progress: bool = False, executor: str = "process", workers: int | None = None,
        oracle: bool = True) -> Run | Replications:
    """Run a scenario (``dpmarket run``); with ``replications``, :func:`replicate` it instead.
    ``oracle=False`` (``--no-oracle``) leaves every oracle measurement out of the tables, the summary
    and ``out`` (ψ, own-data ψ, who benefits, θ*: summary["oracle"] lists them; ``result``, the run in
    memory, still holds them)."""
    if replications is not None:
        if not oracle:
            from dpmarket.errors import UsageError

            raise UsageError("oracle=False writes a single run: not with replications")
        return replicate(scenario, replications, seed, overrides, out, executor=executor,
                         workers=workers, progress=progress)
    resolved = load(scenario, seed, overrides)
    if out is not None:
        from dpmarket.output.results import run_and_write

        out = Path(out)
        result = run_and_write(resolved, out, progress=progress, oracle=oracle)
        table = read_events(out / "events.csv", resolved.seed) if events else None
        return _run(resolved, result, table, out, oracle)
    if not oracle:
        from dpmarket.output.results import check_oracle_free

        check_oracle_free(resolved, oracle)
    from dpmarket.runs.run import execute

    if not events:
        return _run(resolved, execute(resolved, None, progress=progress), None, None, oracle)
    with tempfile.TemporaryDirectory(prefix="dpmarket-events-") as temp:
        path = Path(temp) / "events.csv"
        result = execute(resolved, path, progress=progress)
        return _run(resolved, result, read_events(path, resolved.seed), None, oracle)


def _run(scenario: Scenario, result: RunResult, events: pd.DataFrame | None, out: Path | None,
         oracle: bool = True) -> Run:
    import numpy as np
    import pandas as pd

    from dpmarket.output.summary import owner_rows, summary

    m = result.training.metrics
    columns = {"seed": scenario.seed, "k": np.asarray(m.k, dtype=np.int64),
               "time": np.asarray(m.time, dtype=float)}
    if oracle:
        columns["psi"] = np.asarray(m.psi, dtype=float)
    metrics = pd.DataFrame(columns)
    # owners.csv leaves a decliner's noise scale empty; in a DataFrame absent is NaN
    owners = pd.DataFrame([{k: np.nan if v == "" else v for k, v in row.items()}
                           for row in owner_rows(result, oracle)])
    owners.insert(0, "seed", scenario.seed)
    return Run(scenario, summary(result, oracle), metrics, owners, events, result, out)


def read_events(path: Path, seed: int) -> pd.DataFrame:
    """events.csv as a DataFrame with the run's seed first; absent values are NA (k and channel
    as nullable integers)."""
    import pandas as pd

    frame = pd.read_csv(path, dtype={"kind": "category", "owner": "int64", "k": "Int64",
                                     "epsilon_spent": "float64", "channel": "Int64", "detail": "string"})
    frame.insert(0, "seed", seed)
    return frame


# --- replications and sweeps --------------------------------------------------------------------

@dataclass
class Replications:
    """R runs of one scenario on derived seeds: ``runs`` (one row per replication: seed, ψ, counts),
    ``metrics`` (replication, seed, k, time, psi), ``owners`` (one row per replication and owner:
    seed, budget, own-data ψ, whether it benefits), ``summary`` (the cell's statistics)."""

    scenario: Scenario
    summary: dict
    runs: pd.DataFrame
    metrics: pd.DataFrame
    owners: pd.DataFrame
    out: Path | None = None


@dataclass
class Sweep:
    """A grid of scenarios, each replicated: ``cells`` (the sweep.csv table), ``runs`` (one row per
    cell and replication, the swept values and seed in each), ``owners`` (per cell, replication and
    owner), ``summary`` (grid, seeds and the forecast fit across cells)."""

    scenario: Scenario
    summary: dict
    cells: pd.DataFrame
    runs: pd.DataFrame
    owners: pd.DataFrame
    out: Path | None = None


@checked
def replicate(scenario: ScenarioLike, replications: int, seed: int | None = None,
              overrides: Overrides = None, out: str | Path | None = None, *, executor: str = "process",
              workers: int | None = None, progress: bool = False) -> Replications:
    """``dpmarket run --replications R``: R runs on the replication seeds of the run seed."""
    from dpmarket.experiment import tables

    plan, how = _plan(scenario, seed, overrides, [], replications, out=out, executor=executor,
                      workers=workers, progress=progress)
    (records,) = _records(plan, out, how, keep_metrics=True)
    summary = {**_identity(plan), **tables.cell_summary(records), **tables.cell_guarantee(plan.base)}
    return Replications(plan.cells[0].scenario, summary, _runs_frame(plan, [records]),
                        _metrics_frame(records), _owners_frame(plan, [records]),
                        None if out is None else Path(out))


@checked
def sweep(scenario: ScenarioLike, grid: Mapping[str, Sequence] | Iterable[str], replications: int = 1,
          seed: int | None = None, overrides: Overrides = None, *, out: str | Path | None = None,
          executor: str = "process", workers: int | None = None, progress: bool = False) -> Sweep:
    """``dpmarket sweep``: every combination of the grid's values (``{"privacy.epsilon": [1, 10]}``
    or ``["privacy.epsilon=1,10"]``), each replicated on the same seeds."""
    import pandas as pd

    from dpmarket.experiment import tables

    plan, how = _plan(scenario, seed, overrides, grid_texts(grid), replications, out=out,
                      executor=executor, workers=workers, progress=progress)
    by_cell = _records(plan, out, how, keep_metrics=False)
    rows, fit, why = tables.sweep_rows(plan.cells, by_cell)
    summary = {**_identity(plan), "cells": len(plan.cells), "privacy": tables.guarantees(plan.cells),
               "forecast": fit.to_dict() if fit else {"error": why}}
    cells = pd.DataFrame(rows, columns=list(tables.sweep_header(plan.axes)[0]))
    return Sweep(plan.base, summary, cells, _runs_frame(plan, by_cell), _owners_frame(plan, by_cell),
                 None if out is None else Path(out))


def grid_texts(grid: Mapping[str, Sequence] | Iterable[str]) -> list[str]:
    """A grid as ``--grid`` texts: ``{"privacy.epsilon": [1, 10]}`` → ``["privacy.epsilon=1,10"]``."""
    if isinstance(grid, str):
        return [grid]
    if isinstance(grid, Mapping):
        return [f"{key}={','.join(toml_value(v, key) for v in values)}" for key, values in grid.items()]
    return [str(text) for text in grid]


def _plan(scenario, seed, overrides, grid: list[str], replications: int, *, out, executor: str,
          workers: int | None, progress: bool):
    """The experiment's plan (every cell validated) and how to execute it, as the commands check them."""
    from dpmarket.experiment import command
    from dpmarket.experiment.grid import check_cells, parse_grid
    from dpmarket.experiment.study import make_plan, size_refusal

    base = _loaded(scenario, seed, overrides, swept=bool(grid))
    function = "sweep" if grid else "replicate"
    too_large = size_refusal(base, check_cells(parse_grid(grid)), replications)
    if too_large:
        raise ArgumentValueError(function, "replications", replications, too_large)
    source = base.source
    job = command.Job(Path(source), base, grid, replications, None if out is None else Path(out),
                      executor, workers, None, progress)
    how = command.execution(job)
    return make_plan("sweep" if grid else "replications", base, grid, replications, source), how


def _records(plan, out, how, keep_metrics: bool) -> list[list[dict]]:
    """Every replication's record, by cell: run into ``out`` as the command does, or in memory."""
    if out is not None:
        from dpmarket.experiment import study
        from dpmarket.experiment.store import Store

        out = Path(out)
        (study.run_sweep if plan.kind == "sweep" else study.run_replications)(plan, out, how)
        saved = Store(out, plan.identity()).load(plan.seeds)
        return [[saved[c.index, r] for r in range(plan.replications)] for c in plan.cells]
    return _in_memory(plan, how, keep_metrics)


def _in_memory(plan, how, keep_metrics: bool) -> list[list[dict]]:
    """The plan's tasks on its executor, records kept in memory and sorted (no store, no files)."""
    from dpmarket.experiment.executors import run_tasks
    from dpmarket.experiment.study import chunk_size
    from dpmarket.experiment.task import Task
    from dpmarket.system.progress import of as progress_of

    size = chunk_size(len(plan.cells) * plan.replications, how.worker_count)
    tasks = [Task(cell.index, cell.scenario, tuple(range(start, min(start + size, plan.replications))),
                  tuple(plan.seeds[start:start + size]), keep_metrics)
             for cell in plan.cells for start in range(0, plan.replications, size)]
    found: dict[tuple[int, int], dict] = {}
    with _bar(len(plan.cells) * plan.replications, plan.kind, how.progress) as bar:
        def on_done(task, records: list[dict]) -> None:
            for record in records:
                found[record["cell"], record["replication"]] = record
            bar.update(len(records))

        run_tasks(tasks, on_done, how.executor, how.worker_count, how.scheduler,
                  progress=progress_of(how.progress))
    return [[found[c.index, r] for r in range(plan.replications)] for c in plan.cells]


def _bar(total: int, kind: str, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, unit="run", desc=kind, leave=False, disable=None if enabled else True)


def _identity(plan) -> dict:
    return {"scenario": plan.base.name, "kind": plan.kind, "seed": plan.base.seed,
            "replications": plan.replications, "seeds": list(plan.seeds),
            "grid": [{"key": a.key, "values": list(a.values)} for a in plan.axes]}


RUN_COLUMNS = ("replication", "seed", "psi_final", "psi_zero", "iterations", "stop_reason", "collisions",
               "dropouts", "losses", "refusals", "simulated_time")


def _swept(plan, cell_index: int) -> dict:
    """The swept keys and values of a cell (nothing for replications)."""
    cell = plan.cells[cell_index]
    return {a.key: v for a, v in zip(plan.axes, cell.values, strict=True)}


def _runs_frame(plan, by_cell: list[list[dict]]) -> pd.DataFrame:
    import numpy as np
    import pandas as pd

    rows = []
    for c, records in enumerate(by_cell):
        own = np.array(records[0]["owners"]["own_psi"])
        for r in records:
            row = {"cell": c, **_swept(plan, c)} if plan.kind == "sweep" else {}
            row.update({k: r.get(k, np.nan) for k in RUN_COLUMNS})
            row["owners_benefiting"] = int(np.sum(r["psi_final"] < own))
            rows.append(row)
    return pd.DataFrame(rows)


def _metrics_frame(records: list[dict]) -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame([{"replication": r["replication"], "seed": r["seed"], "k": k, "time": t, "psi": p}
                         for r in records
                         for k, t, p in zip(r["metrics"]["k"], r["metrics"]["time"], r["metrics"]["psi"],
                                            strict=True)])


def _owners_frame(plan, by_cell: list[list[dict]]) -> pd.DataFrame:
    import pandas as pd

    rows = []
    for c, records in enumerate(by_cell):
        for r in records:
            o = r["owners"]
            for i, own in enumerate(o["own_psi"]):
                row = {"cell": c, **_swept(plan, c)} if plan.kind == "sweep" else {}
                row.update({"replication": r["replication"], "seed": r["seed"], "owner": i,
                            "name": o["name"][i], "records": o["records"][i], "epsilon": o["epsilon"][i],
                            "own_psi": own, "benefits": bool(r["psi_final"] < own)})
                rows.append(row)
    return pd.DataFrame(rows)


# --- market comparisons -------------------------------------------------------------------------

@dataclass
class MarketComparison:
    """Policies compared on common random numbers: ``policies`` (the policies.csv table), ``owners``
    (market.csv: per policy and owner, with the market's seed), ``runs`` (policy, replication, seed,
    psi: every training run), ``summary`` (seeds, policies, the forecast and its source); with
    ``properties=True``, ``properties`` (properties.csv: one row per policy) and ``owner_properties``
    (owner_properties.csv: per policy and owner), else None."""

    scenario: Scenario
    summary: dict
    policies: pd.DataFrame
    owners: pd.DataFrame
    runs: pd.DataFrame
    out: Path | None = None
    properties: pd.DataFrame | None = None
    owner_properties: pd.DataFrame | None = None


@checked
def market(scenario: ScenarioLike, policies: Sequence[str] | str, replications: int = 1,
           seed: int | None = None, overrides: Overrides = None, *, out: str | Path | None = None,
           workers: int = 1, progress: bool = False, properties: bool = False) -> MarketComparison:
    """``dpmarket market``: every policy settled on the same owners and forecast, each trained on the
    same ``replications`` seeds (the scenario's own seed for one); ``properties`` adds the property
    table (``market --properties``: individual rationality, truthfulness, budget, welfare, fairness,
    replication robustness; docs/how-to/mechanism-lab.md)."""
    import pandas as pd

    from dpmarket.experiment import compare

    resolved = load(scenario, seed, overrides)
    names = compare.parse_policies(policies, resolved, resolved.source)  # checked: one text
    too_many = compare.replications_refusal(replications, len(names))
    if too_many is not None:
        raise ArgumentValueError("market", "replications", replications, too_many)
    comparison = compare.compare(resolved, names, replications, workers=workers, progress=progress,
                                 properties=properties)
    rows = compare.write(comparison, Path(out)) if out is not None else compare.policy_rows(comparison)
    owners = pd.DataFrame(compare.market_rows(comparison))
    owners.insert(0, "seed", comparison.scenario.seed)
    runs = pd.DataFrame([{"policy": r.outcome.policy, "replication": j, "seed": comparison.seeds[j],
                          "psi": float(psi)} for r in comparison.results for j, psi in enumerate(r.psi)],
                        columns=["policy", "replication", "seed", "psi"])
    summary = {"scenario": comparison.scenario.name, "seed": comparison.scenario.seed,
               "seeds": comparison.seeds, "policies": [r["policy"] for r in rows],
               "forecast": {**comparison.forecast, "source": comparison.forecast_source}}
    table = lab = None
    if properties:
        summary["best_welfare"] = compare.best_facts(comparison)
        table = pd.DataFrame(compare.property_rows(comparison))
        lab = pd.DataFrame(compare.owner_property_rows(comparison))
        lab.insert(0, "seed", comparison.scenario.seed)
    return MarketComparison(comparison.scenario, summary, pd.DataFrame(rows), owners, runs,
                            None if out is None else Path(out), table, lab)



# --- a privacy audit ----------------------------------------------------------------------------

@dataclass
class Audit:
    """An empirical privacy audit (``dpmarket audit``): ``table`` (one row per adversary: error counts,
    rates and their exact upper bounds, the ε they prove, the claimed ε and δ), ``scores`` (every run's
    score), ``summary`` (the summary.json content), ``verdict`` (``"pass"``, ``"fail"`` or
    ``"inconclusive"``), ``passed`` (the verdict is a pass), ``result`` (everything in memory) and
    ``out`` (its directory, if written)."""

    scenario: Scenario
    summary: dict
    table: pd.DataFrame
    scores: pd.DataFrame
    passed: bool
    result: Any = field(repr=False)
    out: Path | None = None
    verdict: str = ""


@checked
def audit(scenario: ScenarioLike, owner: int | None = None, runs: int | None = None, seed: int | None = None,
          overrides: Overrides = None, *, out: str | Path | None = None, view: str = "both",
          method: str = "worlds", confidence: float = 0.95, progress: bool = False) -> Audit:
    """Audit one owner's privacy empirically (``dpmarket audit``): ``runs`` runs of each of two
    neighbouring worlds (default 2,000; with ``method="one-run"``, runs in all, default 1) and an
    adversary seeing ``view`` (answers, model or both); the ε its error rates prove at ``confidence``,
    against the owner's claim. Nothing is written unless ``out`` names a directory."""
    import pandas as pd

    from dpmarket.output import results
    from dpmarket.runs.audit import audit as run_audit
    from dpmarket.runs.audit import runs_refusal
    from dpmarket.system.progress import of as progress_of

    resolved = load(scenario, seed, overrides)
    runs = runs if runs is not None else (1 if method == "one-run" else 2000)
    too_many = runs_refusal(resolved, runs, method)
    if too_many is not None:
        raise ArgumentValueError("audit", "runs", runs, too_many)
    facts = results.audit_settings(owner, runs, view, method, confidence)
    if out is not None:
        from dpmarket.output import directories

        out = Path(out)
        directories.check(out, results.audit_identity(resolved, facts))
    result = run_audit(resolved, owner, runs, view, method, confidence=confidence,
                       progress=progress_of(progress))
    if out is not None:
        results.write_audit(result, out, facts, resolved.output.plots)
    return Audit(resolved, results.audit_summary(result, facts), pd.DataFrame(result.rows()),
                 pd.DataFrame(results.score_rows(result), columns=["view", "world", "run", "half", "score"]),
                 result.passed, result, out, result.verdict)
