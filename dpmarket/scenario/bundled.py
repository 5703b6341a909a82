"""The example scenarios shipped with dpmarket: list them, and find one by name.

They are package data (``dpmarket/scenario/examples/``; in a source checkout that directory is a link to
the repository's ``scenarios/``, the files' one home), so an installed dpmarket runs them from any
directory: ``dpmarket run ny_hospitals``. A scenario argument is a file when such a file exists,
else the name of a bundled example, else an error listing the names — never a guess.

Real-data examples read a file that is not part of dpmarket (``data.path``, relative to the
scenario file: ``../shared/data/`` beside a checkout). Run from an installed package they stop at
once with the one-line "no such file" error of that key, unless ``--set data.path=FILE`` says
where the records are.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

from dpmarket.errors import _MISSING, ScenarioError


@dataclass(frozen=True)
class Example:
    """One bundled scenario: its name (its path under the directory, without ``.toml``), file,
    one-line description, and the records file it reads when the owners come from a table."""

    name: str
    path: Path
    description: str
    data: str | None


def directory() -> Path:
    """Where the bundled scenarios are."""
    return Path(__file__).parent / "examples"


def examples() -> list[Example]:
    """Every bundled scenario, sorted by name (the paper reproductions under ``paper/``)."""
    root = directory()
    found = []
    for path in sorted(root.rglob("*.toml")):
        table = tomllib.loads(path.read_text(encoding="utf-8"))
        data = table.get("data", {})
        reads = data.get("path") if data.get("source") == "table" else None
        name = path.relative_to(root).with_suffix("").as_posix()
        found.append(Example(name, path, table.get("description", ""), reads))
    return found


def find(scenario: str | Path) -> Path:
    """The file a scenario argument names: an existing path as given, else a bundled example by
    name (``ny_hospitals``, ``paper/many_banks``, with or without ``.toml``); else a ScenarioError
    whose one line lists the bundled names."""
    path = Path(scenario)
    if path.exists():
        return path
    name = str(scenario).removesuffix(".toml")
    known = {e.name: e.path for e in examples()}
    if name in known:
        return known[name]
    alike = [n for n in known if name.endswith(f"/{n}")]  # scenarios/ny_hospitals.toml elsewhere
    if alike:
        best = max(alike, key=len)
        raise ScenarioError(str(scenario), "", _MISSING, f"no such file here; the bundled example "
                            f"{best!r} runs from any directory by its name: dpmarket run {best}")
    raise ScenarioError(str(scenario), "", _MISSING,
                        f"no such file, nor a bundled scenario; bundled: {', '.join(known)} "
                        "(`dpmarket scenarios` describes them)")


def listing() -> str:
    """The ``scenarios`` command's text: each bundled example with its description."""
    items = examples()
    width = max(len(e.name) for e in items) + 2
    lines = [f"Bundled scenarios (in {directory()}); run one by name, e.g. `dpmarket run ny_hospitals`,",
             "or copy its file to change it:"]
    for e in items:
        lines.append(f"  {e.name:<{width}}{e.description}")
        if e.data is not None:
            lines.append(f"  {'':<{width}}reads {Path(e.data).name}, not bundled: "
                         "--set data.path=FILE says where it is")
    return "\n".join(lines)
