"""Run and market directories: written whole or not at all, by one process at a time, and never
over other results.

A directory is staged under a hidden sibling name (``.NAME.XXXXXXXX``) and renamed into place
only when everything is written, so an error, Ctrl-C or SIGTERM never leaves half a directory.
What a directory holds is its :class:`Identity` — its kind and its fully resolved configuration,
read back from the ``scenario.toml`` (and, for a market comparison, the policies and seeds in
``summary.json``) written there. The same configuration may be written again (the identical
command: the same bytes, but for the wall time); anything else into a directory holding other
results is refused with one line, the old results intact. A default directory instead takes the
first of ``NAME``, ``NAME-2``, ``NAME-3``, … that holds these results or is free
(:func:`dpmarket.system.files.default_directory`).
"""

from __future__ import annotations

import json
import os
import shutil
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dpmarket.errors import RunDirectoryError
from dpmarket.system import files, processes

SUMMARY = "summary.json"
KIND_FILES = {"run": "events.csv", "market": "policies.csv",  # a file only that kind writes
              "audit": "audit.csv"}
NOUNS = {"run": "a run", "market": "a market comparison", "audit": "an audit"}


@dataclass(frozen=True)
class Identity:
    """What a directory holds: its kind, the resolved scenario (TOML text) and the facts of its
    ``summary.json`` that the scenario does not fix (a market's policies and seeds)."""

    kind: str
    scenario: str
    facts: dict[str, Any] = field(default_factory=dict)


def difference(target: Path, identity: Identity) -> str | None:
    """None if ``target`` is missing, empty or holds exactly ``identity``'s results; else what it
    holds instead, in words."""
    if not target.exists():
        return None
    if not target.is_dir():
        return "is not a directory"
    if not any(target.iterdir()):
        return None
    marker = KIND_FILES[identity.kind]
    if not all((target / name).is_file() for name in (marker, "scenario.toml", SUMMARY)):
        return f"holds other files, not {NOUNS[identity.kind]}"
    try:
        stored = tomllib.loads((target / "scenario.toml").read_text(encoding="utf-8"))
        summary = json.loads((target / SUMMARY).read_text(encoding="utf-8"))
    except ValueError:  # malformed TOML or JSON, or not UTF-8
        return f"holds {NOUNS[identity.kind]} whose scenario.toml or {SUMMARY} is damaged"
    diff = (files.first_difference(tomllib.loads(identity.scenario), stored) or
            files.first_difference(identity.facts, {k: summary.get(k) for k in identity.facts}))
    return None if diff is None else f"holds {NOUNS[identity.kind]} with other settings ({diff})"


def check(target: Path, identity: Identity) -> None:
    """Refuse, with one line, to write ``identity``'s results into ``target`` if it holds others."""
    with files.writing(target):
        why = difference(Path(target), identity)
    if why is not None:
        raise RunDirectoryError(f"{target}: {why}; only the same command may write there again: "
                                f"choose another --out (the results there are left as they are)")


def default_directory(base: Path, identity: Identity) -> Path:
    """``base``, or the first ``base-2``, ``base-3``, … holding these results or free."""
    return files.default_directory(base, lambda path: difference(path, identity) is None)


@contextmanager
def run_directory(target: Path, identity: Identity) -> Iterator[Path]:
    """Yield a staging directory; on success it atomically becomes ``target``.

    Holds ``target``'s lock throughout (a second writer is refused) and, under it, removes the
    staging directories of killed processes; any failure of the file system is one line. A
    ``target`` that is a symbolic link is written through: the directory it points to is
    replaced, the link stays (:func:`dpmarket.system.files.real`).
    """
    target = Path(target)
    where = files.real(target)
    prefix = files.sibling_prefix(where)
    with files.writing(target), files.locked(where):
        check(target, identity)
        files.remove_stale_staging(where.parent, prefix)
        staging = files.staging_dir(where.parent, prefix)
        try:
            yield staging
            _publish(staging, where, prefix)
        finally:
            if staging.exists():
                shutil.rmtree(staging)


def _publish(staging: Path, target: Path, prefix: str) -> None:
    """Move ``staging`` to ``target`` (no link: see :func:`run_directory`); an old ``target`` is
    first renamed to a staging-like name, so that even a process killed in between leaves nothing a
    later run would not remove."""
    with processes.held():
        old = None
        if target.exists():
            old = files.staging_dir(target.parent, prefix)
            os.replace(target, old)
        os.replace(staging, target)
    if old is not None:
        shutil.rmtree(old)
