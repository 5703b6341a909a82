"""Sweep grids: ``--grid key=v1,v2,...`` options → the cells of an experiment, each a valid scenario.

A grid axis is one scenario key (a dotted path, as for ``--set``) and its values; cells are the
Cartesian product of the axes, the first axis varying slowest. Every cell is resolved and
validated before any work starts, so a bad value fails at once with the one-line scenario
error naming the key and the value. Each cell pins ``data.seed`` (to the base scenario's
``data.seed`` if set, else its run seed): replications of a cell then share one dataset and
differ only in the streams that follow the replication seed (noise, selection, clocks, channel),
as the papers' 100 runs per point do.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dpmarket.errors import _MISSING, ScenarioError
from dpmarket.scenario.loading import resolve_files, validate
from dpmarket.scenario.overrides import apply_override, parse_override
from dpmarket.scenario.schema import Scenario


@dataclass(frozen=True)
class Axis:
    """One swept key: its dotted path, the values as given (text) and as parsed."""

    key: str
    texts: tuple[str, ...]
    values: tuple[Any, ...]


@dataclass(frozen=True)
class Cell:
    """One point of the grid: its index, the swept values, and the resolved scenario."""

    index: int
    values: tuple[Any, ...]
    scenario: Scenario


def split_values(raw: str) -> list[str]:
    """Split ``v1,v2,...`` on the commas outside brackets, braces and quotes.

    Values may be TOML inline tables or arrays (``{distribution="pareto", alpha=1.5}``), whose
    own commas must not split them.
    """
    parts, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(raw):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(raw[start:i].strip())
            start = i + 1
    parts.append(raw[start:].strip())
    return parts


def parse_axis(text: str) -> Axis:
    """``"privacy.epsilon=0.1,1,10"`` → an :class:`Axis`; each value read like a ``--set`` value."""
    key, sep, raw = text.partition("=")
    texts = split_values(raw) if sep else []
    if not sep or not key.strip() or not texts or any(t == "" for t in texts):
        raise ScenarioError("--grid", text, _MISSING, "expected dotted.key=v1,v2,... (no empty value)")
    values = tuple(parse_override(f"{key}={t}")[1] for t in texts)
    return Axis(key.strip(), tuple(texts), values)


def parse_grid(texts: list[str]) -> list[Axis]:
    """Every ``--grid`` option parsed; a key given twice is an error (ambiguous order)."""
    axes = [parse_axis(t) for t in texts]
    seen: set[str] = set()
    for axis in axes:
        if axis.key == "seed":
            raise ScenarioError("--grid", "seed", _MISSING, "replication seeds come from the run seed "
                                "(--seed); sweep data.seed to vary the data")
        if axis.key in seen:
            raise ScenarioError("--grid", axis.key, _MISSING, "key given in two --grid options")
        seen.add(axis.key)
    return axes


MAX_CELLS = 100_000  # each cell is a scenario validated (~1 ms) and held (some kB) before any run


def check_cells(axes: list[Axis]) -> int:
    """The grid's cell count, refused beyond :data:`MAX_CELLS` before any cell is resolved."""
    count = math.prod(len(a.values) for a in axes)
    if count > MAX_CELLS:
        raise ScenarioError("--grid", " x ".join(a.key for a in axes), _MISSING,
                            f"makes {count:,} cells, each a scenario validated and held in memory before "
                            f"any run: at most {MAX_CELLS:,}")
    return count


def pin_data_seed(scenario: Scenario) -> Scenario:
    """The scenario with ``data.seed`` set explicitly, so replications share its dataset."""
    data_seed = scenario.seed if scenario.data.seed is None else scenario.data.seed
    return scenario.model_copy(update={"data": scenario.data.model_copy(update={"seed": data_seed})})


def resolve_cells(base: Scenario, axes: list[Axis], source: str) -> list[Cell]:
    """Every cell of the grid as a validated scenario (data seed pinned), in grid order.

    Overrides are applied to the *resolved* base scenario (``--set`` already included), then
    validated exactly like a file, so combinations are checked too (a ``data.records`` list
    against a swept ``data.owners``), and so are the files a cell names: a swept ``data.path``
    (relative to the working directory, as with ``--set``) or availability trace (relative to
    the scenario file ``source``) that does not exist fails before any work.
    """
    table = base.resolved_table()
    cells = []
    combos = itertools.product(*(range(len(a.values)) for a in axes))
    for index, picks in enumerate(combos):
        cell_table = json.loads(json.dumps(table))  # a deep copy of plain data
        given = " ".join(f"{a.key}={a.texts[j]}" for a, j in zip(axes, picks, strict=True))
        label = f"{source} (with --grid {given})"
        for axis, j in zip(axes, picks, strict=True):
            apply_override(cell_table, axis.key.split("."), axis.values[j], label)
        resolve_files(cell_table, Path(source).parent, label)  # a swept data.path or trace must exist
        scenario = pin_data_seed(validate(cell_table, label))
        cells.append(Cell(index, tuple(a.values[j] for a, j in zip(axes, picks, strict=True)), scenario))
    return cells
