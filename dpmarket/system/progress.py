"""Progress of a computation's long phases, shown on a terminal and kept out of the maths.

A computation takes a :class:`Progress` and wraps each phase in ``with progress.phase(label,
total) as step:``, calling ``step.update()`` (or ``update(n)``) as work gets done; it never
formats or prints anything itself. The default, :data:`SILENT`, ignores all of it: library
calls, ``--quiet`` and tests. :class:`Terminal` draws one line on stderr per phase — a bar with
an ETA when the phase knows its total, the count and the elapsed time otherwise — but only once
the phase has lasted ``delay`` seconds, so phases that end sooner never flicker, and it clears
the line when the phase ends. It draws nothing when its stream is not a terminal (tqdm's own
check), so logs, pipes and CI output stay clean.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol, TextIO

DELAY = 1.0  # seconds a phase runs before its line appears
BEAT = 0.5  # seconds between redraws of a phase that reports no steps (its elapsed time moves)


class Step(Protocol):
    """What a phase hands its computation: something to call as work gets done."""

    def update(self, n: int = 1) -> object:
        """``n`` more units of the phase are done."""


class _Ignore:
    """The step of a silent phase."""

    def update(self, n: int = 1) -> None:
        """Nothing to show."""


class Progress:
    """Reports nothing (the base class: a computation can always be given one)."""

    @contextmanager
    def phase(self, label: str, total: int | None = None, unit: str | None = None) -> Iterator[Step]:
        """A phase called ``label`` of ``total`` steps (None: unknown) counted in ``unit``s."""
        yield _Ignore()


SILENT = Progress()


class Terminal(Progress):
    """tqdm lines on ``stream`` (default stderr), shown after ``delay`` seconds, when it is a terminal."""

    def __init__(self, stream: TextIO | None = None, delay: float = DELAY) -> None:
        self.stream, self.delay = stream, delay

    @contextmanager
    def phase(self, label: str, total: int | None = None, unit: str | None = None) -> Iterator[Step]:
        from tqdm import tqdm  # deferred: only terminals need it

        bar = tqdm(total=total, desc=label, unit=unit or "it", file=self.stream or sys.stderr,
                   leave=False, delay=self.delay, mininterval=BEAT, disable=None,
                   bar_format=None if total else _format(unit))
        stop = threading.Event()
        beat = threading.Thread(target=_heartbeat, args=(bar, stop, self.delay), daemon=True)
        if not bar.disable:
            beat.start()
        try:
            yield bar
        finally:
            stop.set()
            if beat.is_alive():
                beat.join()
            bar.close()


def _format(unit: str | None) -> str:
    """The line of a phase of unknown length: its count (if it counts anything) and elapsed time."""
    return "{desc}: {n_fmt} " + unit + " [{elapsed}]" if unit else "{desc} … [{elapsed}]"


def _heartbeat(bar, stop: threading.Event, delay: float) -> None:
    """Redraw ``bar`` every BEAT seconds from ``delay`` on until ``stop``: a phase whose steps are
    slow, or that has none (one long solve), still shows that it is alive."""
    if stop.wait(delay):
        return
    while True:
        bar.refresh()  # under tqdm's lock, like the computation's own updates
        bar.last_print_t = time.time()  # tqdm clears on close only a line it knows it drew
        if stop.wait(BEAT):
            return


def of(enabled: bool | Progress) -> Progress:
    """A Progress from a command's flag: a terminal's when True, silent when False, else as given."""
    if isinstance(enabled, Progress):
        return enabled
    return Terminal() if enabled else SILENT
