"""Reference pages generated at build time, so that they cannot go stale.

* ``reference/commands.md``: every command's ``--help``, as ``python -m dpmarket COMMAND --help``
  prints it (the argparse parser is the one source).
* ``reference/scenario-keys.md``: every scenario key, walked from the pydantic schema
  (``dpmarket.scenario.Scenario.model_fields``, recursively): dotted key path, type, default,
  allowed values and bounds, and the field's ``description`` where the schema gives one.

The functions are plain (no MkDocs import) so that the tests can call them too; ``docs/hooks/build.py``
hands their text to MkDocs as generated files.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import types
import typing
from dataclasses import dataclass
from typing import Any, Literal, Union, get_args, get_origin

import annotated_types as at
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from dpmarket.scenario.keys import is_model, unwrap  # the schema's types read one way


def commands() -> tuple[str, ...]:
    """Every subcommand, in the order ``dpmarket --help`` lists them (read from the parser itself, so a
    new command cannot be left out of the reference)."""
    import argparse

    from dpmarket.cli import _parser

    action = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    return tuple(action.choices)


COMMANDS = commands()


# --- commands -------------------------------------------------------------------------------------

def help_text(*args: str) -> str:
    """``python -m dpmarket ARGS --help`` as a user sees it in a terminal 100 columns wide."""
    env = {**os.environ, "COLUMNS": "100"}
    out = subprocess.run([sys.executable, "-m", "dpmarket", *args, "--help"], capture_output=True,
                         text=True, env=env, check=True)
    return out.stdout.rstrip()


def _intro(name: str) -> str:
    """A hand-written part of a generated page (kept beside it in docs/, excluded from the build)."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / name).read_text(encoding="utf-8")
    return "\n".join(line for line in text.splitlines() if not line.startswith("<!--")).strip()


def commands_markdown() -> str:
    """The commands page: the program's help, then each command's, in the parser's own words."""
    version = subprocess.run([sys.executable, "-m", "dpmarket", "--version"], capture_output=True,
                             text=True, check=True).stdout.strip()
    parts = [
        "# Commands",
        "",
        "Generated at build time from the argparse parser: each block is what "
        f"`python -m dpmarket … --help` prints ({version}). The `dpmarket` console script is the same "
        "program. A `SCENARIO` is a scenario file or the name of a bundled example "
        "(`python -m dpmarket scenarios` lists them). Bad input of any kind ends with one line on "
        "stderr naming the file, the key and the value, exit status 2, and nothing written; Ctrl-C "
        "exits with 130, SIGTERM with 143.",
        "",
        _intro("reference/commands.intro.md"),
        "",
        "## dpmarket",
        "",
        "```text",
        help_text(),
        "```",
    ]
    for name in COMMANDS:
        parts += ["", f"## {name}", "", "```text", help_text(name), "```"]
    return "\n".join(parts) + "\n"


# --- scenario keys --------------------------------------------------------------------------------

@dataclass
class Key:
    """One row of the scenario-key reference."""

    path: str
    type: str
    default: str
    allowed: str
    description: str


def _bounds(metadata: list) -> list[str]:
    out = []
    for m in metadata:
        if isinstance(m, at.Ge):
            out.append(f"≥ {m.ge}")
        elif isinstance(m, at.Gt):
            out.append(f"> {m.gt}")
        elif isinstance(m, at.Le):
            out.append(f"≤ {m.le}")
        elif isinstance(m, at.Lt):
            out.append(f"< {m.lt}")
        elif isinstance(m, at.MinLen):
            out.append(f"length ≥ {m.min_length}")
        elif getattr(m, "pattern", None):
            out.append(f"matches `{m.pattern}`")
        elif getattr(m, "allow_inf_nan", None) is False:
            out.append("finite")
    return out


def _annotated_members(tp: Any) -> list:
    """The alternatives of a union with their ``Annotated`` constraints kept (a list's items too)."""
    if get_origin(tp) is typing.Annotated:
        base, _ = unwrap(tp)
        return [tp] if get_origin(base) not in (Union, types.UnionType) else _annotated_members(base)
    if get_origin(tp) in (Union, types.UnionType):
        return [m for arg in get_args(tp) for m in _annotated_members(arg)]
    if get_origin(tp) is list:
        return _annotated_members(get_args(tp)[0])
    return [tp]


def _members(tp: Any) -> list:
    tp, _ = unwrap(tp)
    if get_origin(tp) in (Union, types.UnionType):
        return [m for arg in get_args(tp) for m in _members(arg)]
    return [tp]


def type_text(tp: Any) -> str:
    """A readable type: ``number``, ``"ideal" or "request"``, ``list of integer``, ``table``
    (bounds go to the "allowed" column)."""
    tp, _ = unwrap(tp)
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        parts = [type_text(arg) for arg in get_args(tp) if arg is not type(None)]
        text = " or ".join(dict.fromkeys(parts))
        if type(None) in get_args(tp):
            text += " (optional)"
        return text
    if origin is Literal:
        return " or ".join(json.dumps(v) for v in get_args(tp))
    if origin is list:
        (item,) = get_args(tp)
        return f"list of {type_text(item)}"
    if is_model(tp):
        return "table"
    names = {int: "integer", float: "number", str: "string", bool: "boolean"}
    return names.get(tp, getattr(tp, "__name__", str(tp)))


def _default_text(field: FieldInfo) -> str:
    if field.default is PydanticUndefined and field.default_factory is None:
        return "(required)"
    value = field.get_default(call_default_factory=True)
    if value is None:
        return "unset"
    if isinstance(value, BaseModel):
        return "(table)"
    return f"`{json.dumps(value, ensure_ascii=False)}`"


def _allowed(tp: Any, metadata: list) -> str:
    literals = [v for m in _members(tp) if get_origin(m) is Literal for v in get_args(m)]
    bounds = []
    for member in _annotated_members(tp):
        _, inner = unwrap(member)
        bounds += _bounds(inner)
    bounds += _bounds(metadata)
    parts = [", ".join(f"`{json.dumps(v)}`" for v in literals)] if literals else []
    parts += list(dict.fromkeys(bounds))
    return "; ".join(parts)


def _models_in(tp: Any, in_list: bool = False) -> list[tuple[type[BaseModel], bool]]:
    """The tables a key may hold, each with whether it sits in a list (``[[owners]]``)."""
    tp, _ = unwrap(tp)
    if get_origin(tp) is list:
        return _models_in(get_args(tp)[0], True)
    out = []
    for member in _members(tp):
        if get_origin(member) is list:
            out += _models_in(member, True)
        elif is_model(member):
            out.append((member, in_list))
    return out


def walk(model: type[BaseModel], prefix: str = "",
         title: str | None = None) -> list[tuple[str, type[BaseModel], list[Key]]]:
    """Every table of ``model``: (its dotted path, its class, its keys), depth first.

    A key that holds a list of tables (``owners``) is written ``owners[i]``: on the command line
    ``--set owners.0.epsilon=2``. A key that takes one of several tables (``data.records``) lists
    each alternative's keys in a section of its own (``data.records = {distribution = "pareto", …}``).
    """
    rows: list[Key] = []
    nested: list[tuple[str, type[BaseModel], list[Key]]] = []
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        tp = field.annotation
        rows.append(Key(path, type_text(tp), _default_text(field), _allowed(tp, field.metadata),
                        (field.description or "").strip()))
        submodels = _models_in(tp)
        many = len(submodels) > 1
        for sub, is_list in submodels:
            sub_path = f"{path}[i]" if is_list else path
            title = None
            if many and "distribution" in sub.model_fields:
                (tag,) = get_args(sub.model_fields["distribution"].annotation)
                title = f'{sub_path} = {{distribution = "{tag}", …}}'
            elif many:
                title = f"{sub_path}: {sub.__name__}"
            nested.extend(walk(sub, sub_path + ".", title))
    return [(title if title is not None else prefix[:-1], model, rows), *nested]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _doc(model: type[BaseModel]) -> str:
    import inspect

    doc = inspect.getdoc(model) or ""
    doc = re.sub(r"``([^`]+)``", r"`\1`", doc)  # reST literals as Markdown code
    doc = re.sub(r":(?:func|class|mod|attr|meth):`~?([^`]+)`", r"`\1`", doc)
    return "\n".join(line for line in doc.splitlines())


def scenario_keys_markdown(model: type[BaseModel] | None = None) -> str:
    """The scenario-key page: one section per table of the schema, one row per key."""
    if model is None:
        from dpmarket.scenario import Scenario as model  # noqa: N813 (the schema's root)
    lines = [
        "# Scenario keys",
        "",
        "Generated at build time from the pydantic schema (`dpmarket.scenario.Scenario`): every key a "
        "scenario file may hold, with its type, default, allowed values or bounds, and its description "
        "where the schema gives one (a section shows the description column once any of its keys has one). "
        "Each section's introduction is that table's docstring. A key is "
        "written as its dotted path, as `--set` and `--grid` take it (`--set network.mode=request`); "
        "`owners[i]` is the i-th `[[owners]]` table (`--set owners.0.epsilon=2`, 0-based). Unknown keys "
        "are errors. `python -m dpmarket validate FILE` prints a file with every default filled in.",
    ]
    for title, sub, rows in walk(model):
        heading = f"`{title}`" if title else "Top level"
        lines += ["", f"## {heading}", ""]
        doc = _doc(sub)
        if doc:
            lines += [doc, ""]
        described = any(key.description for key in rows)
        columns = ["key", "type", "default", "allowed", *(["description"] if described else [])]
        lines += ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
        for key in rows:
            cells = [f"`{key.path}`", key.type, key.default, key.allowed]
            cells += [key.description] if described else []
            lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"
