"""An experiment's output directory: its identity, one file per finished replication, atomic writes.

Long experiments must survive Ctrl-C and killed workers, so the directory is filled as work
completes rather than staged and renamed like a single run's (:func:`dpmarket.results.run_directory`):

- ``experiment.json`` — what the experiment is (kind, resolved base scenario, grid). Re-running
  into the same directory continues that experiment; a different one is refused with one line.
- ``tasks/c00003-r00042.json`` — one finished replication, written when its task finishes.
- the aggregate tables, figures and report.html, written last and published together
  (:func:`dpmarket.experiment.publish.published`).

Every file is written to a hidden temporary name in its final directory and moved into place
with ``os.replace``, so a reader (or a resumed run) sees a complete file or none.
"""

from __future__ import annotations

import json
import shutil
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dpmarket import files
from dpmarket.errors import DPMarketError, RunDirectoryError

IDENTITY = "experiment.json"
TASKS = "tasks"


class ExperimentDirectoryError(RunDirectoryError):
    """The output directory holds another experiment (or something that is not one)."""


class CorruptTaskError(DPMarketError):
    """A saved replication that does not belong to the experiment it sits in."""


@contextmanager
def held_interrupt() -> Iterator[None]:
    """Hold Ctrl-C until the block is over (then raise it), so that it cannot land between
    creating a temporary file and moving or removing it. Only the main thread receives signals."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    previous = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, lambda signum, frame: received.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous if previous is not None else signal.default_int_handler)
        if received:
            raise KeyboardInterrupt


def write_atomic(path: Path, write: Callable[[Path], None]) -> None:
    """Call ``write(temp)`` on a hidden temporary file beside ``path``, then move it into place."""
    with held_interrupt():
        files.write_atomic(path, write)


def write_text_atomic(path: Path, text: str) -> None:
    """``path`` gets ``text`` (UTF-8) atomically."""
    write_atomic(path, lambda temp: temp.write_text(text, encoding="utf-8"))


def first_difference(a: Any, b: Any, where: str = "") -> str | None:
    """The dotted path of the first difference between two JSON-like values (None if equal)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            found = first_difference(a.get(key), b.get(key), f"{where}.{key}" if where else key)
            if found is not None:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            found = first_difference(x, y, f"{where}.{i}")
            if found is not None:
                return found
        return None
    return None if a == b else f"{where} = {b!r} there, {a!r} here"


class Store:
    """The directory of one experiment; :meth:`open` creates it or checks it is the same one."""

    def __init__(self, directory: Path, identity: dict) -> None:
        self.directory, self.identity = Path(directory), identity
        self.tasks = self.directory / TASKS

    def open(self) -> None:
        """Create the directory, or check that it holds this experiment; drop stale temporaries."""
        marker = self.directory / IDENTITY
        if marker.is_file():
            stored = json.loads(marker.read_text(encoding="utf-8"))
            diff = first_difference(self.identity, stored)
            if diff is not None:
                raise ExperimentDirectoryError(
                    f"{self.directory}: holds a different experiment ({diff}); choose another --out")
        elif self.directory.exists() and (not self.directory.is_dir() or any(self.directory.iterdir())):
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

    def task_path(self, cell: int, replication: int) -> Path:
        """Where replication ``replication`` of cell ``cell`` is saved."""
        return self.tasks / f"c{cell:05d}-r{replication:05d}.json"

    def save(self, record: dict) -> None:
        """Save one finished replication (atomically)."""
        path = self.task_path(record["cell"], record["replication"])
        write_text_atomic(path, json.dumps(record, separators=(",", ":")) + "\n")

    def load(self, cell: int, replication: int, seed: int) -> dict | None:
        """The saved replication, or None if not done yet; its seed must be the expected one."""
        path = self.task_path(cell, replication)
        if not path.is_file():
            return None
        record = json.loads(path.read_text(encoding="utf-8"))
        if record.get("seed") != seed or record.get("cell") != cell:
            raise CorruptTaskError(f"{path}: seed {record.get('seed')} is not this experiment's "
                                   f"{seed}; remove the file or choose another --out")
        return record

    def remove_if_empty(self) -> None:
        """Remove the directory if no replication was saved in it (nothing worth keeping)."""
        if not any(self.tasks.glob("*.json")):
            shutil.rmtree(self.directory, ignore_errors=True)
