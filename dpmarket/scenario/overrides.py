"""``--set dotted.key=value`` overrides, applied to a scenario's raw table before validation.

An override is read as TOML (``--set privacy.epsilon=100``), else as a bare string, and written into
the table in place, list items addressed by index (``owners.0.epsilon``); the table is then
validated as a whole, so an override is checked exactly like a file's contents. A list of tables
grows to the index it is given (``--set owners.2.epsilon=5`` on a file with fewer ``[[owners]]``, or
none, adds empty tables before it: the owners in between keep the defaults).
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
            nxt = [] if _is_index(path[depth + 1]) else {}  # owners.0.epsilon without [[owners]]
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


def _is_index(part: str) -> bool:
    return part.isascii() and part.isdigit()  # '٣', '²' are no index


def _index(node: list, part: str, where: list[str], source: str) -> int:
    """The list index ``part`` names; a list of tables (or an empty one) grows with empty tables to
    reach it, any other list must already hold it."""
    tables = all(isinstance(item, dict) for item in node)
    if not _is_index(part) or (int(part) >= len(node) and not (tables and int(part) < MAX_GROWTH)):
        raise ScenarioError(source, ".".join(where), _MISSING,
                            f"no item {part!r} (the list has {len(node)})")
    node.extend({} for _ in range(int(part) + 1 - len(node)))
    return int(part)


MAX_GROWTH = 100_000  # a list of tables grows to at most this many (a typo of 10⁹ is an error, not memory)
