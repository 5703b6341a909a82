"""docs/reference/outputs.md documents every file, column and key the commands write, and nothing else.

The small runs of ``outputs_catalogue.py`` write every kind of output; the page's tables (each marked
``<!-- outputs: GROUP[/FILE] -->``) list the files of each directory and the columns or keys of each
file. Both directions are checked: written but undocumented, documented but never written.
"""

from __future__ import annotations

import re

import pytest
from harness import DOCS
from outputs_catalogue import produce

PAGE = DOCS / "reference" / "outputs.md"
MARK = re.compile(r"<!-- outputs: (\S+) -->\n((?:\|.*\n)+)")


def documented() -> dict[str, set[str]]:
    """Per marked table: the names in its first column (several per cell, each in backticks)."""
    tables: dict[str, set[str]] = {}
    for label, table in MARK.findall(PAGE.read_text(encoding="utf-8")):
        names: set[str] = set()
        for row in table.splitlines()[2:]:
            first = row.split("|")[1]
            names |= set(re.findall(r"`([^`]+)`", first))
        tables[label] = names
    return tables


def expected_name(group: str, name: str) -> str:
    """A written name as the page documents it: a swept key's column as ``<swept key>``."""
    if group in ("sweep/sweep.csv", "sweep/sweep_owners.csv") and re.fullmatch(r"[a-z_]+\.[a-z_.]+", name):
        return "<swept key>"
    return name


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> dict[str, set[str]]:
    return produce(tmp_path_factory.mktemp("catalogue"))


def test_every_file_is_documented_and_written(written):
    docs = documented()
    for group in ("runs", "replications", "sweep", "market"):
        files = {label[len(group) + 1:] for label in written if label.startswith(group + "/")}
        listed = set(docs[group])
        undocumented = {f for f in files if f not in listed and f.rstrip("/") + "/" not in listed}
        assert not undocumented, f"{group}: written but not in {PAGE.name}: {sorted(undocumented)}"
        never = {f for f in listed if f not in files and f.rstrip("/") not in {x.rstrip("/") for x in files}}
        assert not never, f"{group}: documented in {PAGE.name} but never written: {sorted(never)}"


def _covered(name: str, listed: set[str]) -> bool:
    """``name`` is listed, or sits under a key documented with ``.*`` (a table of free keys)."""
    if name in listed:
        return True
    return any(entry.endswith(".*") and name.startswith(entry[:-1]) for entry in listed)


def test_every_column_and_key_is_documented_and_written(written):
    docs = documented()
    checked = 0
    for label, names in written.items():
        if label not in docs:
            continue
        names = {expected_name(label, n) for n in names}
        listed = docs[label]
        undocumented = sorted(n for n in names if not _covered(n, listed))
        assert not undocumented, f"{label}: written but not in {PAGE.name}: {undocumented}"
        never = sorted(n for n in listed if not n.endswith(".*") and n not in names)
        assert not never, f"{label}: documented in {PAGE.name} but never written: {never}"
        checked += 1
    tables = [label for label in docs if "/" in label]
    assert checked == len(tables), f"tables without a run that writes them: {set(tables) - set(written)}"
