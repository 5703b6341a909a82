"""Executors (dpmarket/experiment/executors.py): serial, process and Dask give byte-identical results;
a killed or failing worker loses no finished task and its error reaches the caller as itself; pool
workers use one BLAS thread. Under bad options (issue 24): no more workers than tasks, a scheduler
address checked for its form before any work, a scheduler that does not answer given up within Dask's
connect timeout, and Ctrl-C or SIGTERM while waiting for it ending the command as they end any other."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading

import numpy as np
import pytest
from helpers import ROOT, files, plan, published, saved_replications, tiny, tiny_toml

from dpmarket.cli import main
from dpmarket.errors import ScenarioError
from dpmarket.experiment import executors
from dpmarket.experiment.executors import ExecutorError
from dpmarket.experiment.study import Execution, make_plan, run_replications, run_sweep
from dpmarket.experiment.task import run_task

ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


@pytest.fixture
def tiny_file(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(tiny_toml())
    return path


def sweep(path, out, *extra: str) -> list[str]:
    return ["sweep", str(path), "--grid", "privacy.epsilon=1,2,3", "--replications", "1", "--out", str(out),
            "--quiet", *extra]


# --- workers -----------------------------------------------------------------------------------------

def test_a_thousand_workers_for_three_tasks_start_three_processes(tiny_file, tmp_path, monkeypatch):
    started = []
    real = executors.ProcessPoolExecutor

    def pool(max_workers, **options):
        started.append(max_workers)
        return real(max_workers=max_workers, **options)

    monkeypatch.setattr(executors, "ProcessPoolExecutor", pool)
    assert main(sweep(tiny_file, tmp_path / "out", "--executor", "process", "--workers", "1000")) == 0
    assert started == [3]


def test_a_thousand_dask_workers_for_three_tasks_ask_for_three(monkeypatch):
    pytest.importorskip("distributed")
    import distributed

    asked = []

    class StopError(Exception):
        pass

    def cluster(n_workers, **options):
        asked.append(n_workers)
        raise StopError

    monkeypatch.setattr(distributed, "LocalCluster", cluster)
    with pytest.raises(StopError):
        executors.run_tasks([object()] * 3, lambda task, records: None, "dask", 1000)
    assert asked == [3]


def test_no_tasks_start_no_pool(monkeypatch):
    monkeypatch.setattr(executors, "ProcessPoolExecutor", lambda **options: pytest.fail("a pool was started"))
    executors.run_tasks([], lambda task, records: None, "process", 4)


# --- the scheduler's address -------------------------------------------------------------------------

@pytest.mark.parametrize("address", ["", "  ", "not an address", "tcp://", "tcp://host:0", "tcp://host:99999",
                                     "host:port", "http://host:8786", "tcp://h:８７８６", "tcp://host:8786/x"])
def test_a_malformed_scheduler_address_is_one_line_exit_2_nothing_written(tiny_file, tmp_path, capsys,
                                                                          address):
    """``--scheduler ''`` ran locally; ``'not an address'`` was a traceback."""
    out = tmp_path / "out"
    assert main(sweep(tiny_file, out, "--scheduler", address)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"--scheduler {address.strip()!r}" in err or f"--scheduler {address!r}" in err
    assert "expected a Dask scheduler's address, such as tcp://HOST:8786" in err
    assert not out.exists()


@pytest.mark.parametrize("address", ["tcp://127.0.0.1:8786", "127.0.0.1:8786", "localhost", "tls://[::1]:9",
                                     "scheduler.example.org:8786", "inproc://192.0.2.2/9007/1"])
def test_well_formed_addresses_pass_the_check(address):
    assert executors.check_scheduler(address) == address


@pytest.fixture
def mute_server():
    """A TCP port where something listens, accepts connections and never says a word."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(120)
    yield server
    server.close()


def start(tiny_file, out, address, **env) -> subprocess.Popen:
    args = [sys.executable, "-m", "dpmarket", *sweep(tiny_file, out, "--scheduler", address)]
    return subprocess.Popen(args, env={**ENV, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)


@pytest.mark.slow
def test_a_scheduler_that_never_answers_is_given_up_within_the_connect_timeout(tiny_file, tmp_path,
                                                                              mute_server):
    """Dask's Client waited for ever on such a peer (its handshake has no deadline)."""
    pytest.importorskip("distributed")
    port = mute_server.getsockname()[1]
    proc = start(tiny_file, tmp_path / "out", f"tcp://127.0.0.1:{port}",
                 DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT="2s")
    connection, _ = mute_server.accept()
    _, err = proc.communicate(timeout=120)
    connection.close()
    assert proc.returncode == 2
    assert err.strip() == (f"dpmarket: error: --scheduler tcp://127.0.0.1:{port}: no Dask scheduler answered "
                           "within 2 s (something may listen there without being one)")
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="POSIX signals")
@pytest.mark.parametrize("sig, status", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_while_waiting_for_a_scheduler_ends_the_command(tiny_file, tmp_path, mute_server, sig,
                                                                 status):
    """The wait was uninterruptible (the signals were ignored while connecting). Sent once the
    command is connected and waiting (the server accepted it: an observable state, not a sleep)."""
    pytest.importorskip("distributed")
    port = mute_server.getsockname()[1]
    proc = start(tiny_file, tmp_path / "out", f"tcp://127.0.0.1:{port}",
                 DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT="600s")
    connection, _ = mute_server.accept()
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    connection.close()
    assert proc.returncode == status
    assert err.strip() == "dpmarket: interrupted; nothing was written"
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="POSIX signals")
def test_an_interrupt_ends_a_command_started_with_sigint_ignored(tiny_file, tmp_path, mute_server):
    """A script's background job (`dpmarket ... &`) starts with SIGINT ignored, as POSIX shells start
    them: `kill -INT` was lost, and the command exited 2 once the connect timeout ran out (issue 43)."""
    pytest.importorskip("distributed")
    port = mute_server.getsockname()[1]
    args = [sys.executable, "-m", "dpmarket", *sweep(tiny_file, tmp_path / "out", "--scheduler",
                                                     f"tcp://127.0.0.1:{port}")]
    proc = subprocess.Popen(args, env={**ENV, "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "20s"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    connection, _ = mute_server.accept()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    connection.close()
    assert (proc.returncode, err.strip()) == (130, "dpmarket: interrupted; nothing was written")


def test_the_wait_for_a_scheduler_is_said_on_a_terminal(mute_server):
    """An unreachable scheduler was 30 silent seconds before its error: the wait is a progress line
    (after a second, on a terminal, cleared when it ends), saying what it waits for and how long at most."""
    pytest.importorskip("distributed")
    from dpmarket.system.progress import Terminal
    from tests.system.test_progress import FakeTerminal

    address = f"tcp://127.0.0.1:{mute_server.getsockname()[1]}"
    stream = FakeTerminal()
    with pytest.raises(ExecutorError, match="no Dask scheduler answered within 1.5 s"):
        executors._probe(address, 1.5, Terminal(stream, delay=0.1))
    text = stream.getvalue()
    assert f"waiting for the Dask scheduler at {address} (giving up after 1.5 s)" in text, text
    assert text.endswith("\r")  # cleared: the error is the one line left


# --- an interrupt while waiting for results ---------------------------------------------------------

def test_an_interrupt_inside_wait_leaves_no_futures_lock_held(monkeypatch):
    """concurrent.futures.wait takes the pending futures' locks one by one, in Python; a Ctrl-C landing
    half way left the rest held, and the pool's manager thread then blocked for ever on the next result:
    the sweep never ended after Ctrl-C or SIGTERM (seen as a hung test under load). The signal is sent
    here exactly there; it must still end the drain, with every lock free."""
    from concurrent.futures import Future, _base

    futures = [Future() for _ in range(40)]  # never complete: only the interrupt ends the drain
    real_enter, main = _base._AcquireFutures.__enter__, threading.get_ident()

    def enter(self):
        for k, future in enumerate(self.futures):
            future._condition.acquire()
            if k == len(self.futures) // 2:
                signal.pthread_kill(main, signal.SIGINT)  # handled at once, in this very loop

    monkeypatch.setattr(_base._AcquireFutures, "__enter__", enter)
    with pytest.raises(KeyboardInterrupt):
        executors._drain({f: object() for f in futures}, lambda task, records: None)
    monkeypatch.setattr(_base._AcquireFutures, "__enter__", real_enter)
    free: list[bool] = []  # tried from another thread, as the pool's manager would (the locks are RLocks)

    def probe() -> None:
        for future in futures:
            free.append(future._condition.acquire(blocking=False))
            if free[-1]:
                future._condition.release()

    checker = threading.Thread(target=probe)
    checker.start()
    checker.join()
    held = free.count(False)
    assert held == 0, f"{held} of 40 futures' locks left held"


# --- every executor, the same results ------------------------------------------------------------

@pytest.fixture(scope="module")
def dask_address():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                                  dashboard_address=None, scheduler_kwargs=executors.NO_DASHBOARD) as cluster:
        yield cluster.scheduler_address


def test_every_executor_gives_byte_identical_results_figures_and_report(tmp_path, dask_address):
    p = plan(replications=5, output={"plots": True})
    runs = {"serial": Execution("serial"), "process": Execution("process", 2),
            "dask": Execution("dask", scheduler=dask_address)}
    outputs = {}
    for name, how in runs.items():
        meta = run_sweep(p, tmp_path / name, how)
        assert meta["executor"] == name and meta["reused_replications"] == 0
        outputs[name] = published(tmp_path / name)
    assert {"psi_epsilon.png", "psi_records.png", "owner_benefit.png", "report.html", "sweep.csv",
            "sweep_owners.csv", "sweep.json"} <= set(outputs["serial"])
    assert outputs["serial"] == outputs["process"] == outputs["dask"]
    page = outputs["serial"]["report.html"].decode()
    assert page.count("base64,") == 3 and "dask" not in page and "process" not in page
    rep = plan("replications", replications=4, output={"plots": True})
    run_replications(rep, tmp_path / "r-serial", Execution("serial"))
    run_replications(rep, tmp_path / "r-dask", Execution("dask", scheduler=dask_address))
    serial, dask = published(tmp_path / "r-serial"), published(tmp_path / "r-dask")
    assert {"psi_band.png", "report.html", "metrics.csv", "replications.csv", "owners.csv"} <= set(serial)
    assert serial == dask


def test_dask_local_cluster_of_worker_processes(tmp_path):
    pytest.importorskip("distributed")
    p = plan(grid=["privacy.epsilon=1,10"], replications=2)
    run_sweep(p, tmp_path / "serial", Execution("serial"))
    run_sweep(p, tmp_path / "dask", Execution("dask", workers=1))
    assert files(tmp_path / "serial") == files(tmp_path / "dask")


def killing_task(task):
    """A task that takes its worker process down when it reaches cell 1."""
    if task.cell == 1:
        os._exit(1)
    return run_task(task)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="workers must fork to see the patched task")
def test_a_killed_worker_loses_no_finished_task(tmp_path, monkeypatch):
    p = plan(replications=4)
    monkeypatch.setattr(executors, "run_task", killing_task)
    with pytest.raises(ExecutorError, match="re-run the same command"):
        run_sweep(p, tmp_path / "out", Execution("process", 1))
    saved = sorted((tmp_path / "out" / "tasks").glob("*.json"))
    kept = saved_replications(tmp_path / "out")
    assert saved and not any(f.name.startswith("c00001") for f in saved)
    assert not list((tmp_path / "out").glob("sweep*"))  # no aggregate from a partial experiment
    for f in saved:
        json.loads(f.read_text())  # every saved file is whole
    monkeypatch.setattr(executors, "run_task", run_task)
    meta = run_sweep(p, tmp_path / "out", Execution("serial"))
    assert meta["reused_replications"] == len(kept)
    run_sweep(p, tmp_path / "clean", Execution("serial"))
    assert files(tmp_path / "out") == files(tmp_path / "clean")


def dying_task(task):
    """A task whose worker process dies before any result exists."""
    os._exit(1)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="workers must fork to see the patched task")
def test_a_failure_before_any_result_leaves_no_directory(tmp_path, monkeypatch):
    monkeypatch.setattr(executors, "run_task", dying_task)
    with pytest.raises(ExecutorError):
        run_sweep(plan(replications=1), tmp_path / "out", Execution("process", 1))
    assert not (tmp_path / "out").exists()


def failing_task(task):
    """A task with a bug (or a user error found while running) in cell 1."""
    if task.cell == 1:
        raise ScenarioError("t.toml", "network.availability", "x.csv", "no such file")
    return run_task(task)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="workers must fork to see the patched task")
def test_an_error_inside_a_task_reaches_the_caller_as_itself(tmp_path, monkeypatch):
    monkeypatch.setattr(executors, "run_task", failing_task)
    with pytest.raises(ScenarioError, match="network.availability"):
        run_sweep(plan(replications=2), tmp_path / "out", Execution("process", 2))
    assert len(saved_replications(tmp_path / "out")) == 3 * 2  # the other cells' work


def test_cli_sweep_on_a_given_dask_scheduler(tmp_path, capsys, dask_address):
    path = tmp_path / "s.toml"
    path.write_text(tiny().to_toml())
    out = tmp_path / "out"
    assert main(["sweep", str(path), "--grid", "privacy.epsilon=1,10", "--replications", "2",
                 "--scheduler", dask_address, "--out", str(out), "--quiet"]) == 0
    assert f"the Dask cluster at {dask_address}" in capsys.readouterr().out
    meta = json.loads((out / "sweep.json").read_text())
    assert meta["executor"] == "dask" and meta["workers"] is None and meta["replications"] == 2
    reference = make_plan("sweep", tiny(), ["privacy.epsilon=1,10"], 2, str(path))
    run_sweep(reference, tmp_path / "serial", Execution("serial"))
    assert files(out) == files(tmp_path / "serial")


def _blas_threads() -> int:
    """The most threads any BLAS library loaded in this process may use."""
    from threadpoolctl import threadpool_info

    return max(pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas")


def test_pool_workers_use_one_blas_thread_each():
    """Two workers on two cores with a multithreaded BLAS each would oversubscribe the machine."""
    from concurrent.futures import ProcessPoolExecutor

    np.ones((64, 64)) @ np.ones((64, 64))  # BLAS loaded in the parent, as before a sweep
    with ProcessPoolExecutor(1, initializer=executors._init_worker,
                             mp_context=executors._context()) as pool:
        assert pool.submit(_blas_threads).result() == 1
    with ProcessPoolExecutor(1, mp_context=executors._context()) as pool:  # without it
        assert pool.submit(_blas_threads).result() == _blas_threads()
