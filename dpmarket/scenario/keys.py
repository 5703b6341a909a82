"""Every scenario key explained, from the schema's own descriptions: ``dpmarket explain``, the comments
of ``dpmarket validate`` and "did you mean …" for a key or value nobody knows.

The schema (:mod:`~dpmarket.scenario.schema`) gives each field a ``description`` and, in its
``json_schema_extra``, a ``unit``; its annotation gives the allowed words and bounds. This module
walks the schema by dotted key path (``privacy.split``, ``data.records.alpha``, ``owners.0.epsilon``,
``market.costs.kind``) and says all of it in words, so that no key has to be explained twice.
"""

from __future__ import annotations

import difflib
import json
import re
import textwrap
import types
import typing
from dataclasses import dataclass
from typing import Any, Literal, Union, get_args, get_origin

import annotated_types as at
import tomli_w
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from dpmarket.errors import _MISSING, ScenarioError
from dpmarket.scenario.schema import OwnerSpec, Scenario

WIDTH = 100  # columns of validate's comments and explain's text


# --- the schema's types, in words -----------------------------------------------------------------

def unwrap(tp: Any) -> tuple[Any, list]:
    """``Annotated[T, …]`` as T and its constraints."""
    metadata: list = []
    while get_origin(tp) is typing.Annotated:
        tp, *extra = get_args(tp)
        for item in extra:
            metadata.extend(item.metadata if isinstance(item, FieldInfo) else [item])
    return tp, metadata


def _members(tp: Any) -> list[tuple[Any, list]]:
    """The alternatives of a (possibly annotated, possibly optional) union, each with its constraints."""
    tp, metadata = unwrap(tp)
    if get_origin(tp) in (Union, types.UnionType):
        return [(m, metadata + inner) for arg in get_args(tp) for m, inner in _members(arg)]
    return [(tp, metadata)]


def is_model(tp: Any) -> bool:
    """Whether ``tp`` is a table of the schema (a pydantic model)."""
    return isinstance(tp, type) and issubclass(tp, BaseModel)


_BOUNDS = ((at.Ge, "≥", "ge"), (at.Gt, ">", "gt"), (at.Le, "≤", "le"), (at.Lt, "<", "lt"))
_NAMES = {int: "an integer", float: "a number", str: "text", bool: "true or false"}


def _bound_text(metadata: list) -> list[str]:
    out = []
    for m in metadata:
        for cls, sign, attr in _BOUNDS:
            if isinstance(m, cls):
                out.append(f"{sign} {getattr(m, attr):g}")
    return out


def type_text(tp: Any) -> str:
    """A key's type in words: ``a number > 0``, ``"ideal", "request" or "broadcast"``, ``a table``."""
    words = []
    for member, metadata in _members(tp):
        if member is type(None):
            continue
        if get_origin(member) is Literal:
            words.append(" or ".join(json.dumps(v, ensure_ascii=False) for v in get_args(member)))
        elif get_origin(member) is list:
            words.append(f"a list of {_plural(type_text(get_args(member)[0]))}")
        elif is_model(member):
            tag = _tag(member)
            words.append(f'a table {{distribution = "{tag}", …}}' if tag else "a table")
        else:
            name = _NAMES.get(member, str(member))
            words.append(" ".join([name, *_bound_text(metadata)]))
    return " or ".join(dict.fromkeys(words))


def _plural(text: str) -> str:
    return re.sub(r"^an? (integer|number|table)", r"\1s", text).replace("text", "texts")


def _tag(model: type[BaseModel]) -> str | None:
    """The discriminator value of a size distribution's table, else None."""
    field = model.model_fields.get("distribution")
    if field is None or get_origin(field.annotation) is not Literal or len(get_args(field.annotation)) != 1:
        return None
    return get_args(field.annotation)[0]


def words_of(tp: Any) -> list[str]:
    """The words a key accepts (its Literal values), in the schema's order."""
    return [v for m, _ in _members(tp) if get_origin(m) is Literal for v in get_args(m) if isinstance(v, str)]


def default_text(field: FieldInfo) -> str:
    """The default as TOML would show it, or "required" / "unset"."""
    if field.default is PydanticUndefined and field.default_factory is None:
        return "required"
    value = field.get_default(call_default_factory=True)
    if value is None:
        return "unset"
    if isinstance(value, BaseModel):
        return "a table of its keys' defaults"
    return inline(value)


def inline(value: Any) -> str:
    """A value as inline TOML (tables as ``{ k = v, … }``)."""
    if isinstance(value, dict):
        items = ", ".join(f"{_toml_key(k)} = {inline(v)}" for k, v in value.items())
        return "{ " + items + " }" if value else "{}"
    if isinstance(value, list):
        return "[" + ", ".join(inline(v) for v in value) + "]"
    return tomli_w.dumps({"v": value}).partition(" = ")[2].rstrip("\n")


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key)


# --- key paths ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Key:
    """One key of the schema: its dotted path, the field, and the table (model) it belongs to."""

    path: str
    name: str
    field: FieldInfo
    table: type[BaseModel]

    @property
    def description(self) -> str:
        return (self.field.description or "").strip()

    @property
    def unit(self) -> str | None:
        extra = self.field.json_schema_extra
        return extra.get("unit") if isinstance(extra, dict) else None

    @property
    def tables(self) -> list[type[BaseModel]]:
        """The tables this key may hold (a section, ``[[owners]]``, a size distribution)."""
        found = []
        for member, _ in _members(self.field.annotation):
            if get_origin(member) is list:
                member = unwrap(get_args(member)[0])[0]
                found += [m for m, _ in _members(member) if is_model(m)]
            elif is_model(member):
                found.append(member)
        return found


def find(path: str) -> Key | None:
    """The key at dotted ``path`` (list items by index or not: ``owners.0.epsilon``, ``owners.epsilon``);
    None for the empty path (the whole scenario). An unknown part is a one-line ScenarioError with
    the closest known key, and so is a path that is not one: an empty part (``.``, ``privacy.``,
    ``a..b``) or a list index with no key before it (``0``)."""
    _check_path(path)
    parts = [p for p in path.split(".") if not p.isdigit()] if path else []
    models: list[type[BaseModel]] = [Scenario]
    found: Key | None = None
    for depth, part in enumerate(parts):
        owner = next((m for m in models if part in m.model_fields), None)
        if owner is None:
            known = sorted({k for m in models for k in m.model_fields})
            where = ".".join(parts[:depth])
            hint = suggestion(part, known)
            raise ScenarioError("explain", ".".join(parts[: depth + 1]), _MISSING,
                                f"unknown key{hint or ''}" + ("" if hint else
                                f" (the keys of {'[' + where + ']' if where else 'the top level'}: "
                                f"{', '.join(known)})"))
        found = Key(".".join(parts[: depth + 1]), part, owner.model_fields[part], owner)
        models = found.tables
    return found


def _check_path(path: str) -> None:
    """A ScenarioError naming ``path`` unless it is empty or dotted keys, each list index after a key."""
    if not path:
        return
    parts = path.split(".")
    if "" in parts:
        raise ScenarioError("explain", path, _MISSING, "not a key path: a part between dots is empty "
                            "(write keys as --set takes them: privacy.epsilon, owners.0.epsilon)")
    if parts[0].isdigit():
        raise ScenarioError("explain", path, _MISSING, f"not a key path: the list index {parts[0]} follows "
                            "no key (write keys as --set takes them: owners.0.epsilon)")


def known_at(loc: list | tuple) -> list[str]:
    """The keys a table at location ``loc`` (a pydantic error location, list indices included)
    accepts: what an unknown key there could have meant."""
    path = ".".join(str(p) for p in loc if isinstance(p, str) and p)
    try:
        key = find(path)
    except ScenarioError:
        return []
    models = [Scenario] if key is None else key.tables
    return sorted({k for m in models for k in m.model_fields})


def suggestion(word: str, candidates: list[str]) -> str:
    """``; did you mean 'x'?`` for the closest of ``candidates`` (or "" when none is close)."""
    close = difflib.get_close_matches(str(word), candidates, n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


# --- dpmarket explain ---------------------------------------------------------------------------

def explain(path: str = "") -> str:
    """What ``dpmarket explain [KEY]`` prints: a key in full, or a section's keys, or the tree of
    sections with a line for each key."""
    key = find(path)
    if key is None:
        return tree()
    lines = [f"{key.path} = {default_text(key.field)}" + ("" if key.field.is_required() else "   (default)")]
    lines += _wrapped(key.description, "  ")
    lines += textwrap.wrap(type_text(key.field.annotation), WIDTH, initial_indent="  type:    ",
                           subsequent_indent="           ")
    if key.unit:
        lines.append(f"  unit:    {key.unit}")
    where = "the scenario file's top level" if key.table is Scenario else \
        f"{_section_name(key)} — {_first_sentence(_doc(key.table))}"
    lines.append(_cut(f"  in:      {where}"))
    for table in key.tables:
        heading = f"  keys of {_table_label(key.path, table)}:"
        lines += ["", heading, *_key_lines(table, "    ", key.path + ".")]
    return "\n".join(lines)


def tree() -> str:
    """Every section and key of a scenario, one line each."""
    lines = ["A scenario file's sections and keys (dpmarket explain KEY tells more of one; "
             "dpmarket validate FILE prints a file with every default filled in):", ""]
    lines += _key_lines(Scenario, "", recurse=True)
    return "\n".join(lines)


def _key_lines(model: type[BaseModel], indent: str, prefix: str = "", recurse: bool = False) -> list[str]:
    lines = []
    plain = [(n, f) for n, f in model.model_fields.items() if not _is_section(f)]
    width = max((len(n) for n, _ in plain), default=0) + 2
    for name, field in plain:
        lines.append(_cut(f"{indent}{name.ljust(width)}{_first_sentence(field.description or '')}"))
    for name, field in model.model_fields.items():  # sections, and the tables a key may hold
        path = f"{prefix}{name}"
        for table in Key(path, name, field, model).tables:
            label = _table_label(path, table)
            if not _is_section(field) and not _tag(table):  # a list of inline tables: outages
                label = f"{path} = [{{{', '.join(table.model_fields)}}}, …]"
            about = _first_sentence(field.description or "") if _is_section(field) else \
                _first_sentence(_doc(table))
            lines.append(_cut(f"{indent}{label}  {about}"))
            if recurse:
                lines += _key_lines(table, indent + "  ", path + ".", recurse)
    return lines


def _is_section(field: FieldInfo) -> bool:
    """Whether a key holds a table written as its own section (``[data.table]``, ``[[owners]]``),
    rather than inline (``records = {distribution = …}``, ``outages = [{start = …}]``)."""
    members = [m for m, _ in _members(field.annotation)
               if m is not type(None) and get_origin(m) is not Literal]
    if len(members) == 1 and get_origin(members[0]) is list:
        return unwrap(get_args(members[0])[0])[0] is OwnerSpec
    return bool(members) and all(is_model(m) and not _tag(m) for m in members)


def _table_label(path: str, table: type[BaseModel]) -> str:
    tag = _tag(table)
    if tag:
        return f'{path} = {{distribution = "{tag}", …}}'
    return f"[[{path}]]" if table is OwnerSpec else f"[{path}]"


def _section_name(key: Key) -> str:
    head = key.path.rpartition(".")[0]
    if not head:
        return "the top level"
    return f"[[{head}]]" if key.table is OwnerSpec else f"[{head}]"


def _doc(model: type[BaseModel]) -> str:
    return re.sub(r"``([^`]+)``", r"\1", model.__doc__ or "")


def _first_sentence(text: str) -> str:
    text = " ".join(text.split())
    match = re.search(r"(?<=[.!?])\s(?=[A-Z(\"`])", text)
    return text[: match.start()] if match else text


def _cut(line: str) -> str:
    return line if len(line) <= WIDTH else line[: WIDTH - 1] + "…"


def _wrapped(text: str, indent: str) -> list[str]:
    return textwrap.wrap(" ".join(text.split()), WIDTH, initial_indent=indent, subsequent_indent=indent)


# --- validate's output: the resolved scenario with its explanations ----------------------------

def commented_toml(scenario: Scenario) -> str:
    """The fully resolved scenario as TOML (:meth:`Scenario.resolved_table`), every key preceded by
    its explanation as comments and followed by its unit: loading it gives this scenario back."""
    table = scenario.resolved_table()
    lines = ["# A dpmarket scenario, resolved: every default filled in, each key explained above it",
             "# (`dpmarket explain KEY` tells more). Running this file runs the same scenario."]
    lines += _table_lines(table, Scenario, "")
    for item in table.get("owners", []):
        lines += ["", "[[owners]]", *_table_lines(item, OwnerSpec, "owners.")]
    return "\n".join(lines).rstrip("\n") + "\n"


def _table_lines(table: dict, model: type[BaseModel], prefix: str) -> list[str]:
    """A table's plain keys (each with its comment), then its sub-tables as sections."""
    lines, sections = [], []
    for name, value in table.items():
        field = model.model_fields[name]
        if name == "owners" and model is Scenario:
            if not value:
                lines += [*_comment(field), "owners = []"]
            continue
        if isinstance(value, dict) and _is_section(field):
            sections.append((name, value, field))
            continue
        unit = Key(prefix + name, name, field, model).unit
        lines += [*_comment(field), f"{_toml_key(name)} = {inline(value)}" + (f"  # {unit}" if unit else "")]
    for name, value, field in sections:
        sub = _value_model(field, value)
        lines += ["", *_comment(field), f"[{prefix}{name}]", *_table_lines(value, sub, f"{prefix}{name}.")]
    return lines


def _value_model(field: FieldInfo, value: dict) -> type[BaseModel]:
    """The table class a section's value belongs to (the one whose keys it holds)."""
    tables = [m for m, _ in _members(field.annotation) if is_model(m)]
    return next((t for t in tables if set(value) <= set(t.model_fields)), tables[0])


def _comment(field: FieldInfo) -> list[str]:
    text = " ".join((field.description or "").split())
    allowed = words_of(field.annotation)
    if allowed and not all(f'"{w}"' in text for w in allowed):
        text += " Allowed: " + ", ".join(json.dumps(w, ensure_ascii=False) for w in allowed) + "."
    return textwrap.wrap(text, WIDTH, initial_indent="# ", subsequent_indent="# ") if text else []
