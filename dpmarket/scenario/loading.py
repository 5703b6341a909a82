"""Scenario files: TOML in, a validated and fully resolved :class:`~dpmarket.scenario.schema.Scenario` out.

Reading the file, applying ``--set`` overrides, making the files it names absolute, validating it
against the schema and the cross-checks: every failure is one
:class:`~dpmarket.errors.ScenarioError` naming the file, the dotted key path and the value.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from dpmarket.errors import _MISSING, ScenarioError
from dpmarket.scenario.checks import check_consistency
from dpmarket.scenario.messages import first_problem, short
from dpmarket.scenario.overrides import apply_override, parse_override
from dpmarket.scenario.schema import Scenario
from dpmarket.scenario.sizes import refuse_impossible_sizes
from dpmarket.system import files


def validate(table: dict, source: str, *, swept: bool = False) -> Scenario:
    """Validate a raw table into a Scenario; the first problem becomes one ScenarioError. ``swept``:
    the base of a sweep, whose rules tying keys together are checked on each cell
    (:func:`~dpmarket.scenario.checks.check_consistency`)."""
    try:
        scenario = Scenario.model_validate(table)
    except ValidationError as exc:
        key, value, reason = first_problem(exc.errors())
        raise ScenarioError(source, key, short(value), reason) from None
    check_consistency(scenario, source, swept=swept)
    refuse_impossible_sizes(scenario, source)
    scenario._source = source
    return scenario


def load(path: str | Path, overrides: list[str] | tuple[str, ...] = (), *, swept: bool = False) -> Scenario:
    """Read, override and validate a scenario file; every failure is a ScenarioError (``swept``: the
    base of a sweep, see :func:`validate`)."""
    path = Path(path)
    source = str(path)
    refuse_special(path, source, "")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ScenarioError(source, "", _MISSING, "no such file") from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as exc:
        raise ScenarioError(source, "", _MISSING, f"cannot read: {exc.__class__.__name__}") from None
    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(source, "", _MISSING, f"malformed TOML: {exc}") from None
    _resolve_data_path(table, path.parent)  # a path written in the file: relative to the file
    return _overridden(table, overrides, source, path.parent, swept=swept)


def override(scenario: Scenario, overrides: list[str] | tuple[str, ...], *, swept: bool = False) -> Scenario:
    """``scenario`` with ``--set``-style overrides, checked exactly like a file's (files they name
    are relative to the working directory); the scenario itself when there are none."""
    if not overrides:
        return scenario
    return _overridden(scenario.resolved_table(), overrides, scenario.source, Path.cwd(), swept=swept)


def _overridden(table: dict, overrides, source: str, base: Path, *, swept: bool = False) -> Scenario:
    """Apply overrides to a raw table, make its files absolute (a trace against ``base``), validate."""
    for text_override in overrides:
        keys, value = parse_override(text_override)
        apply_override(table, keys, value, f"{source} (--set {text_override})")
    label = source if not overrides else f"{source} (with --set {' '.join(overrides)})"
    resolve_files(table, base, label)
    return validate(table, label, swept=swept)


def resolve_files(table: dict, base: Path, source: str) -> None:
    """Make the files a scenario names absolute and check that they exist (``source`` names the
    file and overrides in the error): the availability trace relative to ``base`` (the scenario
    file's directory), a ``data.path`` given by an override (--set, a --grid cell) relative to
    the working directory."""
    _resolve_trace(table, base, source)
    _resolve_data_path(table, Path.cwd(), source)


def _resolve_trace(table: dict, base: Path, source: str) -> None:
    """Make ``network.availability`` absolute (relative to ``base``, the scenario file's directory)
    and check it exists."""
    net = table.get("network")
    trace = net.get("availability") if isinstance(net, dict) else None
    if not isinstance(trace, str):
        return
    resolved = Path(trace) if Path(trace).is_absolute() else (base / trace).resolve()
    refuse_special(resolved, source, "network.availability", trace)
    if not resolved.is_file():
        raise ScenarioError(source, "network.availability", trace, "no such file")
    net["availability"] = str(resolved)


def _resolve_data_path(table: dict, base: Path, source: str | None = None) -> None:
    """Make ``data.path`` absolute against ``base``; with ``source``, also check the file exists."""
    data = table.get("data")
    value = data.get("path") if isinstance(data, dict) else None
    if not isinstance(value, str):
        return
    resolved = Path(value).expanduser()
    resolved = resolved if resolved.is_absolute() else (base / resolved).resolve()
    if source is not None:
        refuse_special(resolved, source, "data.path", value)
    if source is not None and not resolved.is_file():
        raise ScenarioError(source, "data.path", value,
                            "no such file; point to the records with --set data.path=FILE")
    data["path"] = str(resolved)


def refuse_special(path: Path, source: str, key: str, value: Any = _MISSING) -> None:
    """A ScenarioError when ``path`` (the scenario file, or the file ``key`` names) is something
    other than a regular file: reading a FIFO blocks until something writes into it (for ever, for a
    FIFO nobody feeds), a device may never end, and a directory is no table. Checked before it is
    opened, so it is one line at once."""
    what = files.not_regular(path)
    if what is not None:
        shown = "" if value is _MISSING or str(value) == str(path) else f" ({path})"
        raise ScenarioError(source, key, value, f"is {what}{shown}, not a regular file: dpmarket reads "
                            "only regular files (a FIFO or a device could keep it waiting for ever)")


def file_digests(scenario: Scenario, keys: tuple[str, ...] = ("data.path", "network.availability")
                 ) -> dict[str, str]:
    """The content digest of each file ``scenario`` names under ``keys`` (a table, an availability
    trace), for the caches of what is built from them: a file rewritten at the same path then makes
    another key, so its old ρ, Ξ, data or forecast are never reused. Keys naming no file are left out
    (a scenario without files keys its caches as before)."""
    digests = {}
    for key in keys:
        section, name = key.split(".")
        path = getattr(getattr(scenario, section), name)
        if path is not None:
            digests[key] = files.digest(path) or "unreadable"
    return digests
