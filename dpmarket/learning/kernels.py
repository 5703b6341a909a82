"""Which kernel computes what reads every record: numpy, or numba where it is installed (extra ``fast``).

The environment variable ``DPMARKET_KERNEL`` chooses, for every command and the Python API alike:

- ``auto`` (the default): numba where it is installed and pays for its start-up (importing numba and
  loading the cached kernels cost about a second per process): the replay of sufficient statistics from
  :data:`dpmarket.replay.compiled.AUTO_UPDATES` replication-updates, and the answers and ψ that read
  records when one run reads them (record × feature reads) at least :data:`AUTO_READS` times, or
  :data:`AUTO_READS_REPLICATED` times for the runs of an experiment (replications, sweeps: a worker
  runs many, and pays the start-up once); elsewhere numpy;
- ``numpy``: never numba;
- ``numba``: numba wherever it applies; an error (exit 2) if numba is not installed.

numba's answers and numpy's are equal within 10⁻¹² relative, not bit for bit (they sum in different
orders), so the choice is a function of the run's scenario alone — its data and its number of
updates, never the number of replications, the executor, the workers, how the replications were
split into tasks, or what ran before in the process — and everything the run computes from records
(answers, ψ) follows it (:func:`decided`). Each kernel gives the same bits for a query point whether
it is asked alone or with others (the replay's batches), so a run and the replay of its tape agree
bit for bit under either kernel. θ*, the own-data models and f* are numpy's always.

A numba that is installed but broken (its import fails, or compiling fails: an llvmlite that does
not match, a numpy too new for it) is found out before anything runs on it: it is imported when
``numba`` is asked for by name or ``auto`` would take it, and the replay's loop is compiled for its
block's argument types before it runs. Under ``numba`` that is an error (one line, as a missing
numba); under ``auto`` one warning per process, and numpy computes instead, with the same results.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from dpmarket.errors import KernelError, one_line, warn
from dpmarket.system import environment

VARIABLE = environment.KERNEL
CHOICES = environment.KERNELS
BACKENDS = ("numpy", "numba")
# Record × feature reads of answers and ψ from which ``auto`` takes numba: where one run's time under
# numba (its start-up, about 1 s of CPU per process, plus its reads) falls below numpy's. Measured end to
# end by benchmarks/bench_kernel_choice.py (a logistic run, 3 × 20,000 records, p = 11, T = 2,000–16,000,
# fresh processes, medians of 3 rounds; 2 shared cores, load average 5): the two kernels' lines cross at
# 2.2·10⁹ reads (2.21 and 2.22·10⁹ of CPU time in two sessions, 2.25·10⁹ of wall time), numba's
# start-up 1.0–1.1 s of CPU against the 0.43–0.49 ns it saves per read; at T = 16,000 (3.65·10⁹ reads)
# numba took 0.81–0.82 of numpy's CPU time. Hence 2·10⁹ (docs/how-to/performance.md). The runs of an
# experiment share a worker's start-up, a few hundred of them at least.
AUTO_READS = 2e9
AUTO_READS_REPLICATED = 5e7

_state = threading.local()  # the backend pinned in this thread, if any (Dask runs tasks in threads)
_broken: str | None = None  # why numba cannot be used in this process (its import or a compile failed)
_warned = False  # auto's fall-back is said once per process


def choice() -> str:
    """The kernel ``DPMARKET_KERNEL`` asks for (``auto`` when unset), checked: an unknown name, or
    ``numba`` where numba is not installed or does not import, is an error (no silent fallback)."""
    value = environment.read(VARIABLE) or "auto"  # an unknown name: a KernelError
    if value == "numba":
        if not available():
            raise KernelError(f"environment: {VARIABLE} = 'numba': numba is not installed "
                              "(pip install 'dpmarket[fast]', or unset it)")
        if not usable():  # asked for by name: a numba that is found but does not import is refused now
            raise unusable_error()
    return value


def available() -> bool:
    """numba is installed (looked up, not imported: a broken one is found out by :func:`usable`)."""
    return sys.modules.get("numba") is not None or importlib.util.find_spec("numba") is not None


def usable() -> bool:
    """numba imports and nothing compiled with it has failed in this process (imports it once)."""
    global _broken
    if _broken is None and "numba" not in sys.modules:
        try:
            import numba  # noqa: F401  (the optional extra: imported only where it would be used)
        except Exception as exc:  # found but broken: its import, or its llvmlite, fails
            _broken = reason(exc)
    return _broken is None


def broken() -> bool:
    """Whether numba turned out unusable in this process (then numpy computes everything)."""
    return _broken is not None


def mark_broken(exc: Exception) -> None:
    """Record that compiling with numba failed with ``exc``: nothing uses numba in this process again."""
    global _broken
    _broken = reason(exc)


def reason(exc: Exception) -> str:
    """The first line of what went wrong, with the exception's type."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def unusable_error() -> KernelError:
    """The one-line error of ``DPMARKET_KERNEL=numba`` with a numba that cannot be used."""
    return KernelError(one_line(f"environment: {VARIABLE} = 'numba': numba is installed but cannot be used "
                                f"({_broken}); repair it (pip install -U 'dpmarket[fast]'), or unset "
                                f"{VARIABLE}"))


def fall_back() -> None:
    """Under ``auto``: say once per process that numba is broken and numpy computes instead."""
    global _warned
    if not _warned:
        _warned = True
        warn(f"numba is installed but cannot be used ({_broken}); the numpy replay runs instead, with the "
             f"same results (set {VARIABLE}=numpy to skip numba)")


def resolve(reads: float, replicated: bool = False) -> str:
    """The backend of a run that reads records ``reads`` times (record × feature reads of its answers
    and ψ) under ``DPMARKET_KERNEL``: ``auto`` takes numba, where it is installed, from
    :data:`AUTO_READS` (:data:`AUTO_READS_REPLICATED` for a run of an experiment)."""
    value = choice()
    if value != "auto":
        return value
    threshold = AUTO_READS_REPLICATED if replicated else AUTO_READS
    if reads < threshold or not available():
        return "numpy"
    if not usable():
        fall_back()
        return "numpy"
    return "numba"


def backend() -> str:
    """The backend of the answers and ψ computed now: the one pinned in this thread, else numba only
    when ``DPMARKET_KERNEL=numba`` (``auto`` is decided for each run, from its workload)."""
    pinned_now = getattr(_state, "backend", None)
    if pinned_now is not None:
        return pinned_now
    return "numba" if choice() == "numba" else "numpy"


def pinned_backend() -> str | None:
    """The backend pinned in this thread, or None: what a per-update caller reads (no environment)."""
    return getattr(_state, "backend", None)


def is_pinned() -> bool:
    """Whether a command has decided the backend in this thread."""
    return getattr(_state, "backend", None) is not None


@contextmanager
def pinned(name: str | None) -> Iterator[None]:
    """Compute every answer and ψ in this thread with backend ``name`` ("numpy" or "numba") inside the
    block; None keeps what is pinned already (or nothing). The previous state comes back on exit."""
    if name is not None and name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; expected one of {BACKENDS}")
    before = getattr(_state, "backend", None)
    _state.backend = before if name is None else name
    try:
        yield
    finally:
        _state.backend = before


@contextmanager
def decided(reads: float, replicated: bool = False) -> Iterator[None]:
    """Pin the backend :func:`resolve` gives a run of ``reads``, unless one is pinned already (a task of
    an experiment decides for its runs; a run inside it does not decide again)."""
    with pinned(None if is_pinned() else resolve(reads, replicated)):
        yield
