"""Signals and helper processes: Ctrl-C and SIGTERM end a command the same way, and no helper
outlives the process that started it.

- SIGTERM (``kill``, a batch system, ``timeout``) raises :class:`Terminated`, a
  ``KeyboardInterrupt``, so everything that cleans up after Ctrl-C (staging directories, pools,
  the finished replications handed over) does so after SIGTERM too; the CLI exits 130 after
  Ctrl-C and 143 after SIGTERM (128 + the signal's number, as shells report a killed command).
  A command started with SIGINT ignored — a script's background job (``dpmarket run … &``), which
  POSIX shells start so — still ends on SIGINT: ``kill -INT`` then waited out a 30 s connect timeout
  and exited 2. Its work is saved and resumable as after any interrupt.
- :func:`held` delays both while a file is moved into place.
- A helper process (a pool worker, the figure painter) ignores Ctrl-C — the terminal sends it to
  the whole process group, and the parent alone decides what an interrupt means — and dies with
  its parent (:func:`die_with_parent`), even when the parent is killed outright (SIGKILL), which
  no handler can see.

Only the standard library is imported: the painter loads this before anything heavy.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

PR_SET_PDEATHSIG = 1  # linux/prctl.h


class Terminated(KeyboardInterrupt):
    """SIGTERM, delivered like Ctrl-C (see the module docstring)."""


def exit_status(interrupt: KeyboardInterrupt) -> int:
    """The exit status of a command ended by ``interrupt``: 143 for SIGTERM, 130 for Ctrl-C."""
    return 128 + (signal.SIGTERM if isinstance(interrupt, Terminated) else signal.SIGINT)


def _raise_terminated(signum, frame) -> None:
    raise Terminated


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within the block (main thread only), SIGTERM raises :class:`Terminated`, and SIGINT raises
    ``KeyboardInterrupt`` even where the process was started with it ignored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    ignored = signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    if ignored:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
        if ignored:
            signal.signal(signal.SIGINT, signal.SIG_IGN)


@contextmanager
def held() -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM until the block is over (then raise the first), so that neither
    lands between creating a temporary file and moving or removing it. Only the main thread
    receives signals; elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    catch = [signal.SIGINT, signal.SIGTERM]
    previous = {s: signal.signal(s, lambda signum, frame: received.append(signum)) for s in catch}
    try:
        yield
    finally:
        _restore(previous)
        if received:
            raise Terminated if received[0] == signal.SIGTERM else KeyboardInterrupt


def init_helper(parent: int) -> None:
    """Initializer of every helper process: ignore Ctrl-C, end quietly on SIGTERM (a forked
    helper would otherwise inherit :func:`sigterm_as_interrupt` and print a traceback), and die
    with ``parent`` (its pid)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    die_with_parent(parent)


def die_with_parent(parent: int) -> None:
    """End this process when ``parent`` ends. On Linux the kernel does it (PR_SET_PDEATHSIG:
    SIGKILL when the parent exits, however); elsewhere a daemon thread checks every half second
    whether this process was re-parented. Either way, a parent already gone means exit now."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0:
                if os.getppid() != parent:  # it died before the request took effect
                    os._exit(1)
                return
        except (OSError, AttributeError):
            pass
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(1)


@contextmanager
def interrupts_ignored() -> Iterator[None]:
    """Ignore SIGINT and SIGTERM for the block (main thread only; elsewhere this does nothing).

    Processes started inside inherit the ignored signals — across ``exec`` too, where a Python
    handler would be reset — so helpers another library spawns (Dask's worker processes, which
    Dask stops by message and, failing that, SIGKILL, and which end when their parent does) never
    act on a Ctrl-C or SIGTERM sent to the whole process group, and print no traceback: this
    process alone handles it. (Blocking the signals instead would not do: ``multiprocessing``
    unblocks them in the threads that start its resource tracker, and Dask's threads spawn the
    workers.) A signal arriving during the block itself is lost.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        _restore(previous)


def _restore(previous: dict) -> None:
    """Put back the signal handlers ``previous`` maps each signal to (None, a handler installed
    outside Python: SIGINT's default KeyboardInterrupt, or the default action)."""
    for s, handler in previous.items():
        fallback = signal.default_int_handler if s == signal.SIGINT else signal.SIG_DFL
        signal.signal(s, handler if handler is not None else fallback)
