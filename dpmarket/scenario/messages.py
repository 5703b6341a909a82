"""Pydantic's validation errors as one line a user can act on: the key path, the value, the reason.

Unions (``records`` may be a number, a list or a table) make pydantic report one error per
alternative; :func:`first_problem` picks the one where the user went wrong.
"""

from __future__ import annotations

import re
from typing import Any

from dpmarket.errors import _MISSING

_TYPE_NAMES = {"constrained-int": "an integer", "list[": "a list", "tagged-union[": "a table",
               "constrained-float": "a number", "int": "an integer", "float": "a number"}


def first_problem(errors: list[dict]) -> tuple[str, Any, str]:
    """The most specific of pydantic's errors, as (dotted key, offending value, reason).

    Unions (``records`` may be a number, a list or a table) make pydantic report one error
    per alternative; the deepest one is where the user went wrong, and if every alternative
    failed on type alone, the reason lists what would have been accepted.
    """
    parsed = [(_clean_loc(e["loc"]), e) for e in errors]
    depth = max(len(loc) for loc, _ in parsed)
    best = [(loc, e) for loc, e in parsed if len(loc) == depth]
    loc, err = next(((lc, e) for lc, e in best if not e["type"].endswith("_type")), best[0])
    value = _MISSING if err["type"] == "missing" else err.get("input", _MISSING)
    reason = _reason(err)
    if len(best) > 1 and all(e["type"].endswith("_type") for _, e in best):
        kinds = [_union_kind(e["loc"]) for _, e in best]
        reason = "should be " + " or ".join(k for k in kinds if k)
    return ".".join(str(p) for p in loc), value, reason


def _clean_loc(loc: tuple) -> list:
    """Drop pydantic's union-member markers (and the discriminator tag after them) from a path."""
    out, skip = [], False
    for part in loc:
        if skip:
            skip = False
            continue
        if isinstance(part, str) and ("[" in part or part.startswith(("constrained-", "function-"))):
            skip = part.startswith("tagged-union[")
            continue
        if isinstance(part, str) and part[:1].isupper():  # a model class as a union member (keys are lower)
            continue
        out.append(part)
    return out


def _union_kind(loc: tuple) -> str:
    for part in reversed(loc):
        if isinstance(part, str):
            for prefix, name in _TYPE_NAMES.items():
                if part.startswith(prefix):
                    return name
    return ""


def _reason(err: dict) -> str:
    """Pydantic's message in the project's words; an unknown key or word gets the closest known ones."""
    from dpmarket.scenario.keys import known_at, suggestion  # deferred: keys walks the whole schema

    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        return "unknown key" + suggestion(err["loc"][-1], known_at(_clean_loc(err["loc"])[:-1]))
    if err["type"] == "missing":
        return "required key is missing"
    if err["type"] in ("literal_error", "union_tag_invalid"):
        words = re.findall(r"'([^']*)'", str((err.get("ctx") or {}).get("expected") or
                                             (err.get("ctx") or {}).get("expected_tags") or ""))
        word = err.get("input") if err["type"] == "literal_error" else (err.get("ctx") or {}).get("tag")
        if err["type"] == "union_tag_invalid":
            msg = f"distribution should be {_listed(words)}"
        return (msg[0].lower() + msg[1:]) + suggestion(word, words) if isinstance(word, str) else msg
    return msg[0].lower() + msg[1:] if msg else msg


def _listed(words: list[str]) -> str:
    quoted = [repr(w) for w in words]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]


def short(value: Any) -> Any:
    if isinstance(value, dict | list) and len(repr(value)) > 60:
        return type(value).__name__
    return value
