"""docs/reference/outputs.md documents every file, column and key the commands write, and nothing else.

The small runs of ``outputs_catalogue.py`` write every kind of output; the page's tables (each marked
``<!-- outputs: GROUP[/FILE] -->``) list the files of each directory and the columns or keys of each
file. Both directions are checked: written but undocumented, documented but never written. The
events section lists every event kind and every ``detail`` a lossy network writes (checks the README
held before its events section moved here).
"""

from __future__ import annotations

import csv
import re
import subprocess
import sys

import pytest
import tomli_w
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


@pytest.mark.slow  # small runs of every command, to read what they write: 30 s
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


@pytest.mark.slow  # small runs of every command, to read what they write: 30 s
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



def _events_section() -> str:
    text = PAGE.read_text(encoding="utf-8")
    start = text.index("### `events.csv`")
    return text[start:text.index("\n### ", start + 1)]


def _kinds() -> tuple[str, ...]:
    try:  # the package layout of issue 23
        from dpmarket.schedule.events import KINDS
    except ImportError:  # before it
        from dpmarket.events import KINDS
    return KINDS


def test_every_event_kind_is_documented():
    """The events section's table of kinds lists exactly the kinds the event log has."""
    table = _events_section().split("| kind |", 1)[1]
    documented = set(re.findall(r"^\| `(\w+)`(?:, `(\w+)`)? \|", table, flags=re.M))
    assert {k for pair in documented for k in pair if k} == set(_kinds())


def test_every_detail_a_lossy_network_writes_is_documented(tmp_path):
    """A request-mode run with losses, carrier sensing, dropouts and a small budget writes every
    detail the engine has; each is quoted in the events section."""
    table = {"name": "lossy", "seed": 3, "data": {"owners": 3, "records": 300, "features": 3},
             "learner": {"rho": 3.0, "iterations": 400}, "privacy": {"split": "capped", "cap": 3},
             "network": {"mode": "request", "loss_probability": 0.2, "carrier_sense": True, "max_attempts": 1,
                         "transmission_time": 0.2, "dropout": {"mean_online": 3.0, "mean_offline": 1.0}}}
    (tmp_path / "lossy.toml").write_text(tomli_w.dumps(table), encoding="utf-8")
    subprocess.run([sys.executable, "-m", "dpmarket", "run", "lossy.toml", "--out", "run", "--quiet"],
                   cwd=tmp_path, check=True, capture_output=True)
    with open(tmp_path / "run" / "events.csv", encoding="utf-8") as fh:
        details = {row["detail"] for row in csv.DictReader(fh)} - {""}
    assert len(details) >= 4, details
    section = _events_section()
    assert all(f"`{d}`" in section for d in details), details
