"""An experiment's output directory: its identity, one file per finished replication, atomic writes.

Long experiments must survive Ctrl-C and killed workers, so the directory is filled as work
completes rather than staged and renamed like a single run's
(:func:`dpmarket.output.directories.run_directory`):

- ``experiment.json`` — what the experiment is (kind, resolved base scenario, grid). Re-running
  into the same directory continues that experiment; a different one is refused with one line.
- ``tasks/c00003-r00040-00047.json`` — one finished task: cell 3's replications 40…47, written when
  the task finishes (a task is a cell's block of consecutive replications). Saved work of older
  versions, one replication per file (``c00003-r00042.json``), is read too.
- the aggregate tables, figures and report.html, written last and published together
  (:func:`dpmarket.experiment.publish.published`).

Every file is written to a hidden temporary name in its final directory and moved into place
with ``os.replace``, so a reader (or a resumed run) sees a complete file or none.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from dpmarket.errors import CorruptTaskError, ExperimentDirectoryError, warn
from dpmarket.system import files, processes
from dpmarket.system.files import first_difference

IDENTITY = "experiment.json"
TASKS = "tasks"
TASK_NAME = re.compile(r"c(\d{5})-r(\d{5})(?:-(\d{5}))?\.json")  # a task's cell and replications


held_interrupt = processes.held  # the name the experiment modules use


def write_atomic(path: Path, write: Callable[[Path], None]) -> None:
    """Call ``write(temp)`` on a hidden temporary file beside ``path``, then move it into place."""
    with held_interrupt():
        files.write_atomic(path, write)


def write_text_atomic(path: Path, text: str) -> None:
    """``path`` gets ``text`` (UTF-8) atomically."""
    write_atomic(path, lambda temp: temp.write_text(text, encoding="utf-8"))


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")


class _Owners(_Strict):
    name: list[str]
    records: list[int]
    epsilon: list[float]
    own_psi: list[float]

    @model_validator(mode="after")
    def _aligned(self) -> _Owners:
        lengths = {len(self.name), len(self.records), len(self.epsilon), len(self.own_psi)}
        if not self.name or len(lengths) > 1:
            raise ValueError("owners: lists of unequal length, or empty")
        return self


class _Metrics(_Strict):
    k: list[int]
    time: list[float]
    psi: list[float]

    @model_validator(mode="after")
    def _aligned(self) -> _Metrics:
        if not self.k or len({len(self.k), len(self.time), len(self.psi)}) > 1:
            raise ValueError("metrics: lists of unequal length, or empty")
        return self


class SavedReplication(_Strict):
    """The shape of a saved replication (:func:`dpmarket.experiment.task.replicate`), checked on
    load so that a damaged file is recomputed rather than read into the tables."""

    cell: int
    replication: int
    seed: int
    psi_final: float
    psi_zero: float | None = None  # absent in records of older versions
    iterations: int
    stop_reason: str
    collisions: int
    dropouts: int
    losses: int
    refusals: int
    simulated_time: float
    owners: _Owners
    metrics: _Metrics | None = None


class SavedTask(_Strict):
    """The shape of a saved task: its cell, its replications in order and their records."""

    cell: int
    replications: list[int]
    records: list[SavedReplication]

    @model_validator(mode="after")
    def _aligned(self) -> SavedTask:
        if not self.records or [r.replication for r in self.records] != self.replications:
            raise ValueError("records: not one per replication of the task, in order")
        if any(r.cell != self.cell for r in self.records):
            raise ValueError("records: of another cell than the task's")
        return self


def damage(path: Path, metrics: bool) -> tuple[list[dict] | None, str]:
    """(the records, "") if ``path`` holds a whole saved task (or, as older versions saved them, one
    replication), else (None, what is wrong)."""
    raw = path.read_bytes()
    if not raw.strip():
        return None, "empty file"
    try:
        document = json.loads(raw)
        if isinstance(document, dict) and "records" in document:
            records = document["records"]
            checked = SavedTask.model_validate(document).records
        else:
            records, checked = [document], [SavedReplication.model_validate(document)]
    except UnicodeDecodeError:
        return None, "not UTF-8 text"
    except json.JSONDecodeError as exc:
        return None, _not_json(exc)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "the record"
        return None, f"{where}: {first['msg']}"
    if metrics and any(c.metrics is None for c in checked):
        return None, "metrics: missing"
    return records, ""


def _not_json(exc: json.JSONDecodeError) -> str:
    return f"not JSON ({exc.msg}, character {exc.pos}: truncated?)"


class Store:
    """The directory of one experiment; :meth:`open` creates it or checks it is the same one.

    ``metrics``: saved replications must carry the ψ-against-k series (replicated runs)."""

    def __init__(self, directory: Path, identity: dict, metrics: bool = False,
                 warn: Callable[[str], None] = warn) -> None:
        self.directory, self.identity, self.metrics, self.warn = Path(directory), identity, metrics, warn
        self.tasks = self.directory / TASKS

    def open(self) -> None:
        """Create the directory, or check that it holds this experiment; drop stale temporaries.

        Call it holding the directory's lock (:func:`dpmarket.system.files.locked`): the temporaries
        and staging directories it removes are then certainly left by a process that is gone.
        """
        marker = self.directory / IDENTITY
        stored = self._stored_identity(marker) if marker.is_file() else None
        if stored is not None:
            diff = first_difference(self.identity, stored)
            if diff is not None:
                raise ExperimentDirectoryError(
                    f"{self.directory}: holds a different experiment ({diff}); choose another --out")
        elif self.directory.exists() and not self._empty():
            raise ExperimentDirectoryError(
                f"{self.directory}: exists and is not a dpmarket experiment directory; choose another --out")
        try:
            self.tasks.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ExperimentDirectoryError(f"{self.directory}: cannot create: {exc.strerror}") from None
        if not marker.is_file():
            write_text_atomic(marker, json.dumps(self.identity, indent=2) + "\n")
        for stale in [*self.tasks.glob(".*.tmp"), *self.directory.glob(".*.tmp")]:
            # left by a killed process: a temporary file, or the staging directory of the
            # results (publish.published), which a resumed run draws again
            shutil.rmtree(stale) if stale.is_dir() else stale.unlink()

    def _empty(self) -> bool:
        """Nothing here but an empty ``tasks/`` and temporaries: nothing a run would lose."""
        if not self.directory.is_dir():
            return False
        return all((p.name == TASKS and p.is_dir() and not any(self.saved())) or
                   (p.name.startswith(".") and p.name.endswith(".tmp")) for p in self.directory.iterdir())

    def saved(self) -> list[Path]:
        """The saved tasks' files."""
        return sorted(p for p in self.tasks.glob("c*-r*.json") if TASK_NAME.fullmatch(p.name)) \
            if self.tasks.is_dir() else []

    def _stored_identity(self, marker: Path) -> dict | None:
        """The identity on disk. A damaged one is rewritten if no replication is saved (nothing to
        mix up), else refused: it alone says which experiment the saved tasks belong to."""
        try:
            stored = json.loads(marker.read_bytes())
            if not isinstance(stored, dict) or "kind" not in stored:
                raise ValueError("not an experiment's identity")
            return stored
        except ValueError as exc:  # JSON and UTF-8 errors included
            reason = ("empty file" if not marker.read_bytes().strip() else
                      _not_json(exc) if isinstance(exc, json.JSONDecodeError) else str(exc).split(":")[0])
        if self.saved():
            raise ExperimentDirectoryError(
                f"{marker}: damaged ({reason}); it records which experiment the {len(self.saved())} saved "
                f"tasks belong to and cannot be rebuilt: restore it, or remove {self.directory} or choose "
                f"another --out to start afresh")
        self.warn(f"{marker}: damaged ({reason}); no replication is saved yet, so it is written anew")
        marker.unlink()
        return None

    def task_path(self, cell: int, replications: Sequence[int]) -> Path:
        """Where the task of cell ``cell``'s consecutive ``replications`` is saved."""
        return self.tasks / f"c{cell:05d}-r{replications[0]:05d}-{replications[-1]:05d}.json"

    def save(self, cell: int, replications: Sequence[int], records: list[dict]) -> None:
        """Save one finished task (atomically): its records, one per replication, in order."""
        if list(replications) != list(range(replications[0], replications[-1] + 1)):
            raise ValueError(f"a task's replications must be consecutive, got {list(replications)}")
        document = {"cell": cell, "replications": list(replications), "records": records}
        text = json.dumps(document, separators=(",", ":")) + "\n"
        write_text_atomic(self.task_path(cell, replications), text)

    def load(self, seeds: Sequence[int]) -> dict[tuple[int, int], dict]:
        """Every saved replication of the first ``len(seeds)`` of each cell, by (cell, replication),
        each file read once. A damaged file (truncated, empty, not the shape of a task) is removed
        with one warning line, its replications to be recomputed; a whole file that holds other
        replications or seeds than its name and this experiment say is refused, as it means the
        directory was tampered with."""
        found: dict[tuple[int, int], dict] = {}
        for path in self.saved():
            records, wrong = damage(path, self.metrics)
            if records is None:
                self.warn(f"{path}: damaged ({wrong}); recomputing it")
                path.unlink()
                continue
            for record in self._belonging(path, records, seeds):
                key = (record["cell"], record["replication"])
                if key in found:
                    raise CorruptTaskError(f"{path}: holds cell {key[0]}, replication {key[1]}, which "
                                           "another saved task holds too; remove one or choose another --out")
                found[key] = record
        return found

    @staticmethod
    def _belonging(path: Path, records: list[dict], seeds: Sequence[int]) -> list[dict]:
        """The records of ``path`` within the first ``len(seeds)`` replications, checked against the
        file's name and the experiment's seeds."""
        cell, first, last = TASK_NAME.fullmatch(path.name).groups()
        named = list(range(int(first), int(first if last is None else last) + 1))
        out = []
        for i, record in enumerate(records):
            replication = named[i] if i < len(named) else named[-1] + i
            expected = seeds[replication] if replication < len(seeds) else record["seed"]
            if (record["seed"], record["cell"], record["replication"]) != (expected, int(cell), replication) \
                    or len(records) != len(named):
                raise CorruptTaskError(
                    f"{path}: holds cell {record['cell']}, replication {record['replication']}, seed "
                    f"{record['seed']}, not this experiment's cell {int(cell)}, replication {replication}, "
                    f"seed {expected}; remove the file or choose another --out")
            if replication < len(seeds):
                out.append(record)
        return out

    def remove_if_empty(self) -> None:
        """Remove the directory if no replication was saved in it (nothing worth keeping)."""
        if not any(self.tasks.glob("*.json")):
            shutil.rmtree(self.directory, ignore_errors=True)


def holds(directory: Path, identity: dict) -> bool:
    """Whether ``directory`` holds the experiment ``identity`` (to resume it)."""
    try:
        stored = json.loads((directory / IDENTITY).read_bytes())
    except (OSError, ValueError):
        return False
    return first_difference(identity, stored) is None
