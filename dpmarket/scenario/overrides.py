"""``--set dotted.key=value`` overrides, applied to a scenario's raw table before validation.

An override is read as TOML (``--set privacy.epsilon=100``), else as a bare string, and written into
the table in place, list items addressed by index (``owners.0.epsilon``); the table is then
validated as a whole, so an override is checked exactly like a file's contents.
"""

from __future__ import annotations

import tomllib
from typing import Any

from dpmarket.errors import _MISSING, ScenarioError


def parse_override(text: str) -> tuple[list[str], Any]:
    """``"a.b=value"`` → (["a", "b"], value); the value is read as TOML, else as a bare string."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ScenarioError("--set", text, _MISSING, "expected dotted.key=value")
    try:
        value = tomllib.loads(f"v = {raw.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw.strip()
    return [part.strip() for part in key.strip().split(".")], value


def apply_override(table: dict, path: list[str], value: Any, source: str) -> None:
    """Set ``table[path] = value`` in place; list items are addressed by index (owners.0.epsilon)."""
    node: Any = table
    for depth, part in enumerate(path[:-1]):
        nxt = _child(node, part, path[: depth + 1], source)
        if nxt is None:
            nxt = {}
            _assign(node, part, nxt, path[: depth + 1], source)
        node = nxt
    _assign(node, path[-1], value, path, source)


def _child(node: Any, part: str, where: list[str], source: str) -> Any:
    if isinstance(node, list):
        return node[_index(node, part, where, source)]
    if isinstance(node, dict):
        return node.get(part)
    raise ScenarioError(source, ".".join(where[:-1]), node, "is not a table")


def _assign(node: Any, part: str, value: Any, where: list[str], source: str) -> None:
    if isinstance(node, list):
        node[_index(node, part, where, source)] = value
    elif isinstance(node, dict):
        node[part] = value
    else:
        raise ScenarioError(source, ".".join(where[:-1]), node, "is not a table")


def _index(node: list, part: str, where: list[str], source: str) -> int:
    if not (part.isascii() and part.isdigit()) or int(part) >= len(node):  # '٣', '²' are no index
        raise ScenarioError(source, ".".join(where), _MISSING,
                            f"no item {part!r} (the list has {len(node)})")
    return int(part)
