"""Executors: where an experiment's tasks run — this process, a process pool, or a Dask cluster.

Every executor calls the same pure :func:`~dpmarket.experiment.task.run_task`, so a seed gives
the same records whatever runs them; only speed differs. Results are handed to ``on_done`` in
the parent as each task finishes (the parent saves them at once), in completion order; the
parent sorts them before writing any table. A failure (a killed worker, Ctrl-C) never drops a
finished result: every task that completed is delivered before the error is raised.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import re
import sys
import threading
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool

from threadpoolctl import threadpool_limits

from dpmarket.errors import ExecutorError, one_line
from dpmarket.experiment.task import Task, run_task
from dpmarket.system import processes
from dpmarket.system.progress import SILENT, Progress

EXECUTORS = ("serial", "process", "dask")
OnDone = Callable[[Task, list[dict]], None]
# No dashboard, and the scheduler's HTTP endpoint on a free port rather than 8787 (which another
# cluster on the machine may hold).
NO_DASHBOARD = {"dashboard": False, "dashboard_address": ":0"}


SCHEMES = ("tcp", "tls", "ws", "wss", "ucx")  # Dask's comm protocols with an address on the network
EXAMPLE_ADDRESS = "tcp://HOST:8786"


def default_workers() -> int:
    """The cores this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def run_tasks(tasks: list[Task], on_done: OnDone, executor: str = "serial", workers: int = 1,
              scheduler: str | None = None, *, progress: Progress = SILENT) -> None:
    """Run ``tasks`` on ``executor`` and hand each task's records to ``on_done`` as it finishes;
    ``progress`` shows the wait for a Dask scheduler that does not answer at once.

    Never more workers than tasks: ``--workers 1000`` for 3 tasks starts 3 processes (or Dask
    workers), not 1,000 idle ones. (The default, the machine's cores, is chosen by the caller.)
    """
    workers = max(1, min(workers, len(tasks)))
    if executor == "serial":
        for task in tasks:
            on_done(task, run_task(task))
    elif executor == "process":
        if tasks:
            _run_pool(tasks, on_done, workers)
    elif executor == "dask":
        if tasks:
            _run_dask(tasks, on_done, workers, scheduler, progress)
    else:
        raise ExecutorError(f"--executor {executor!r}: expected one of {', '.join(EXECUTORS)}")


# [SCHEME://]HOST[:PORT], HOST a name, an IPv4 address or a bracketed IPv6 one (ASCII only)
ADDRESS = re.compile(r"(?:(?P<scheme>[a-z]+)://)?(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_][A-Za-z0-9._-]*)"
                     r"(?::(?P<port>[0-9]{1,5}))?", re.ASCII)


def check_scheduler(address: str) -> str:
    """A Dask scheduler's address as given, checked for its form (``[SCHEME://]HOST[:PORT]``, SCHEME one
    of Dask's protocols, PORT 1–65535); anything else, the empty text included, is one line saying
    what is expected (Dask's own parser takes ``'not an address'`` for a host name)."""
    expected = f"expected a Dask scheduler's address, such as {EXAMPLE_ADDRESS}"
    if re.fullmatch(r"inproc://\S+", address.strip(), re.ASCII):  # a cluster in this process (tests)
        return address.strip()
    match = ADDRESS.fullmatch(address.strip())
    if match is None or not 0 < int(match["port"] or 8786) < 65536:
        raise ExecutorError(f"--scheduler {address!r}: {expected}")
    if (match["scheme"] or "tcp") not in SCHEMES:
        raise ExecutorError(f"--scheduler {address!r}: unknown protocol {match['scheme']!r} "
                            f"({', '.join(SCHEMES)}); {expected}")
    return address.strip()


def _init_worker(parent: int | None = None) -> None:
    """Set up a pool worker: it ignores Ctrl-C, dies with its parent, and its BLAS uses one thread.

    The parent alone decides on Ctrl-C, so a keypress never kills a half task; a parent killed
    outright takes its workers with it (:func:`dpmarket.system.processes.die_with_parent`). One BLAS
    thread per worker because the pool already uses every core: OpenBLAS's own threads would
    oversubscribe them and, spinning after each matrix product of the data stage, take CPU
    from the other workers' simulations (as Dask does for its workers).
    """
    processes.init_helper(os.getppid() if parent is None else parent)
    threadpool_limits(1)


def _run_pool(tasks: list[Task], on_done: OnDone, workers: int) -> None:
    """A ProcessPoolExecutor of ``workers`` processes; on Ctrl-C (or SIGTERM), queued tasks are
    cancelled and the running ones finish and are saved before the interrupt goes on."""
    pool = ProcessPoolExecutor(max_workers=workers, initializer=_init_worker, initargs=(os.getpid(),),
                               mp_context=_context())
    futures: dict[Future, Task] = {}
    try:
        # The first submit forks the workers; a Ctrl-C raised inside Python's at-fork handlers is
        # swallowed ("Exception ignored in _releaseLock", and the command ran to its end with status
        # 0: seen once under load in tests/integration/test_faults.py), so it waits for the block's end.
        with processes.held():
            futures.update({pool.submit(run_task, t): t for t in tasks})
        _drain(futures, on_done)
    except KeyboardInterrupt:
        pool.shutdown(wait=True, cancel_futures=True)
        _deliver_finished(futures, on_done)
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _context() -> multiprocessing.context.BaseContext:
    """Fork on Linux: workers start with dpmarket already imported (no second of imports per
    worker; Python 3.14 would default to forkserver). Elsewhere the platform's safe default."""
    return multiprocessing.get_context("fork" if sys.platform.startswith("linux") else None)


WAIT_SECONDS = 0.2  # the longest a Ctrl-C or SIGTERM waits for concurrent.futures.wait to let go


def _drain(futures: dict[Future, Task], on_done: OnDone) -> None:
    """Deliver results as they come; after a failure keep delivering the others, then raise.

    ``wait`` takes every pending future's lock in turn, in Python: an interrupt raised in the middle
    left some of them held, and the pool's manager thread then blocked for ever on the next result,
    so the shutdown after Ctrl-C or SIGTERM never ended (a sweep of 300 tasks hung about once in ten
    under load). Signals are held while it runs, in slices of :data:`WAIT_SECONDS`, and act between
    them."""
    pending, failure = set(futures), None
    while pending:
        with processes.held():
            finished, pending = wait(pending, timeout=WAIT_SECONDS, return_when=FIRST_COMPLETED)
        for future in sorted(finished, key=lambda f: futures[f].cell):
            if future.exception() is None:
                on_done(futures[future], future.result())
                futures[future] = None  # delivered
            elif failure is None:
                failure = future.exception()
    if isinstance(failure, BrokenProcessPool):
        raise ExecutorError("a worker process died; every finished task is saved, re-run the same "
                            "command to resume") from failure
    if failure is not None:
        raise failure  # a bug, or a user error found while running: as it would be in serial


def _deliver_finished(futures: dict[Future, Task | None], on_done: OnDone) -> None:
    """After an interrupt: hand over the tasks that completed but were not delivered yet."""
    for future, task in futures.items():
        if task is not None and future.done() and not future.cancelled() and future.exception() is None:
            on_done(task, future.result())
            futures[future] = None


def _dask_client(workers: int, scheduler: str | None, progress: Progress = SILENT):
    """A Client of the cluster at ``scheduler``, or of a new LocalCluster; (client, cluster or None).

    A new LocalCluster starts with Ctrl-C and SIGTERM ignored, which its worker processes inherit (see
    :func:`_run_dask`). A given scheduler is first asked who it is within Dask's connect timeout
    (:func:`_probe`), with the signals handled: Dask's own Client waits for ever on a peer that
    accepts the connection and never answers."""
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise ExecutorError("--executor dask needs dask.distributed: pip install 'dpmarket[dask]'") from None
    if scheduler is not None:
        seconds = connect_timeout()
        _probe(scheduler, seconds, progress)
        try:
            return Client(scheduler, timeout=seconds), None
        except (OSError, TimeoutError) as exc:
            raise ExecutorError(f"--scheduler {scheduler}: cannot connect ({exc})") from None
    with processes.interrupts_ignored():
        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                               dashboard_address=None, silence_logs=logging.CRITICAL,
                               scheduler_kwargs=NO_DASHBOARD)
        return Client(cluster, timeout="20s"), cluster


def connect_timeout() -> float:
    """Seconds to wait for a Dask scheduler: Dask's ``distributed.comm.timeouts.connect`` (30 s unless
    configured, e.g. ``DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT=5s``)."""
    import dask
    from dask.utils import parse_timedelta

    return float(parse_timedelta(dask.config.get("distributed.comm.timeouts.connect"), default="seconds"))


def _probe(address: str, seconds: float, progress: Progress = SILENT) -> None:
    """Connect to the scheduler at ``address`` and ask its identity, all within ``seconds``; else one
    line (nothing listens, something else listens, or it does not answer). The asking runs on a
    daemon thread with an event loop of its own while this thread waits for it: Ctrl-C and SIGTERM
    land here, in the main thread, and end the wait as they end any other (no traceback from inside
    the loop; the thread dies with the process). A wait that lasts is a ``progress`` phase saying what
    it waits for and for how long at most (on a terminal, after a second, then cleared): an unreachable
    host used to be 30 silent seconds before the error."""
    import asyncio

    from distributed.comm import connect

    async def ask() -> dict:
        comm = await connect(address, timeout=seconds)
        try:
            await comm.write({"op": "identity", "reply": True})
            return await comm.read()
        finally:
            comm.abort()

    outcome: dict = {}

    def work() -> None:
        try:
            outcome["reply"] = asyncio.run(asyncio.wait_for(ask(), seconds))
        except Exception as exc:  # handed to the waiting thread, which reports it
            outcome["error"] = exc

    thread = threading.Thread(target=work, name="dpmarket-scheduler-probe", daemon=True)
    thread.start()
    with progress.phase(f"waiting for the Dask scheduler at {address} (giving up after {seconds:g} s)"):
        thread.join(seconds + 1.0)
    error = outcome.get("error")
    if thread.is_alive() or isinstance(error, TimeoutError):  # asyncio's is the builtin since 3.11
        raise ExecutorError(f"--scheduler {address}: no Dask scheduler answered within {seconds:g} s "
                            "(something may listen there without being one)")
    if error is not None:  # refused, unreachable, not Dask's protocol
        raise ExecutorError(f"--scheduler {address}: cannot connect ({one_line(str(error))})")
    reply = outcome.get("reply")
    if not isinstance(reply, dict) or reply.get("type") != "Scheduler":
        raise ExecutorError(f"--scheduler {address}: what answers there is not a Dask scheduler")


def _run_dask(tasks: list[Task], on_done: OnDone, workers: int, scheduler: str | None,
              progress: Progress = SILENT) -> None:
    """A dask.distributed client: on the cluster at ``scheduler``, else on a LocalCluster of
    ``workers`` single-threaded processes. Dask re-runs the tasks of a killed worker elsewhere."""
    # Ctrl-C and SIGTERM are ignored while Dask starts its worker processes, which inherit that:
    # the terminal's Ctrl-C then stops this process alone, and no worker prints a traceback.
    client = cluster = None
    futures: dict = {}
    logger = logging.getLogger("distributed")
    level = logger.level
    try:
        client, cluster = _dask_client(workers, scheduler, progress)
        _drain_dask(client, tasks, futures, on_done)
    except KeyboardInterrupt:
        # Once interrupted, the scheduler in this process logs CRITICAL tracebacks of the comms the
        # shutdown closes under it (silence_logs stops below CRITICAL): none of them is the user's
        # concern, whose message is the interrupt's one line.
        logger.setLevel(logging.CRITICAL + 1)
        if client is not None:
            client.cancel([f for f in futures if f.status == "pending"])
        for future, task in list(futures.items()):  # results that arrived but were not handed over
            if future.status == "finished":
                on_done(task, future.result())
        raise
    finally:
        if client is not None:
            client.close()
        if cluster is not None:
            cluster.close()
        logger.setLevel(level)


def _drain_dask(client, tasks: list[Task], futures: dict, on_done: OnDone) -> None:
    """Submit ``tasks`` (recorded in ``futures``, delivered ones removed) and deliver results as
    they come; after a failure keep delivering the others, then raise."""
    from distributed import KilledWorker, as_completed

    futures.update({client.submit(run_task, t, pure=False): t for t in tasks})
    failure = None
    for future in as_completed(list(futures)):
        if future.status == "finished":
            on_done(futures.pop(future), future.result())
        elif failure is None:
            failure = future.exception()
    if isinstance(failure, KilledWorker):
        raise ExecutorError(f"Dask workers died running a task ({failure}); every finished task "
                            f"is saved, re-run the same command to resume")
    if failure is not None:
        raise failure
