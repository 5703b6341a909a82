"""Output files and processes under faults: damaged saved work, files a grid cell names, killed
processes and their helpers, signals, two writers at once, a full disk, names too long, and
results that another command must not replace. Signals are sent to real subprocesses; every
wait polls for what it waits for."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT, frozen, tiny_toml, wait_for

from dpmarket.cli import main
from dpmarket.errors import RunDirectoryError
from dpmarket.experiment import study
from dpmarket.output import results
from dpmarket.system import files

ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
TINY = tiny_toml()
# 300 tasks (a replayed task is a whole cell of 32 replications): far from done when it is stopped,
# and it stops soon after (running tasks finish first). Two cells of 64 were two tasks, done about
# when the first file appeared; under heavy load even 300 tasks of TINY could end before a second
# process looked: the signal tests freeze the sweep while they look and signal, on HEAVY's tasks.
CELLS = 300
MANY = ("--grid", "privacy.epsilon=" + ",".join(str(e) for e in range(1, CELLS + 1)), "--replications", "32",
        "--quiet")
PATIENCE = 600  # seconds a signal test waits for what it waits for: patience under load, never a pace
LINUX = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc, uses fork")
INTERRUPTED = "dpmarket: interrupted; nothing was written"


# MANY's tasks on HEAVY: a third of a second each (a whole cell of 32 replications of 1,000 updates,
# replayed), so 300 of them are far from done at the first saved one, whatever the load.
HEAVY = tiny_toml(learner={"iterations": 1000})


def slow(plots: bool = False) -> str:
    """TINY with 3000 records an owner and 200000 iterations: still running when it is stopped."""
    return tiny_toml(data={"records": 3000}, learner={"iterations": 200000}, output={"plots": plots})


def endless(plots: bool = False) -> str:
    """TINY with 10⁹ iterations (memory bounded whatever T): a run that cannot end before any signal,
    however fast the machine."""
    return tiny_toml(data={"records": 3000}, learner={"iterations": 10**9}, output={"plots": plots})


def write(tmp_path: Path, text: str = TINY, name: str = "s.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def start(*args: str, **options) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "dpmarket", *map(str, args)], env=ENV,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, **options)


def cli(*args: str, **options) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dpmarket", *map(str, args)], env=ENV,
                          capture_output=True, text=True, timeout=PATIENCE, **options)


def hidden(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith("."))


def staging_of(parent: Path, name: str) -> list[Path]:
    return [p for p in parent.iterdir() if p.is_dir() and p.name.startswith(f".{name}.")]


def children(pid: int) -> list[int]:
    """The child processes of ``pid`` (any of its threads may have started them; a thread that
    ends while they are read had none left)."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            found += [int(c) for c in (task / "children").read_text().split()]
    return found


def running(pid: int) -> bool:
    """Alive and not a zombie (a dead child waits for its new parent to reap it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in "ZX"
    except (FileNotFoundError, ProcessLookupError):
        return False


def contents(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# ------------------------------------------------------------------ damaged saved work (issue 13.3)


def sweep_args(path: Path, out: Path, *extra: str, grid: str = "privacy.epsilon=1,10") -> list[str]:
    return ["sweep", str(path), "--grid", grid, "--replications", "3",
            "--executor", "serial", "--quiet", "--out", str(out), *extra]


SIX = "privacy.epsilon=1,2,3,10,30,100"  # six cells: six saved tasks of three replications


def test_damaged_saved_tasks_are_recomputed_with_one_warning_each(tmp_path, capsys):
    path, out = write(tmp_path), tmp_path / "out"
    assert main(sweep_args(path, out, grid=SIX)) == 0
    tables = {n: (out / n).read_bytes() for n in ("sweep.csv", "sweep_owners.csv")}
    tasks = sorted((out / "tasks").glob("*.json"))
    assert [t.name for t in tasks] == [f"c{c:05d}-r00000-00002.json" for c in range(6)]
    whole = tasks[0].read_bytes()
    tasks[0].write_bytes(whole[: len(whole) // 2])  # truncated
    tasks[1].write_bytes(b"")  # empty
    tasks[2].write_text("[]")  # not a task
    task = json.loads(tasks[3].read_text())
    task["records"][1]["owners"]["epsilon"].pop()  # the shape of a task, but an owner list disagrees
    tasks[3].write_text(json.dumps(task))
    tasks[4].write_bytes(b"\xff\xfe\x00garbage")  # not text
    capsys.readouterr()
    assert main(sweep_args(path, out, grid=SIX)) == 0
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 5, err
    for line, task in zip(err, tasks, strict=False):
        assert line.startswith(f"dpmarket: warning: {task}: damaged (") and line.endswith("); recomputing it")
    assert "empty file" in err[1] and "truncated?" in err[0] and "records.1.owners" in err[3]
    assert {n: (out / n).read_bytes() for n in tables} == tables  # the bytes of the first run
    assert json.loads((out / "sweep.json").read_text())["reused_replications"] == 3
    assert main(sweep_args(path, out, grid=SIX)) == 0 and capsys.readouterr().err == ""  # warned once


def test_saved_work_of_older_versions_one_file_per_replication_is_resumed(tmp_path, capsys):
    path, out = write(tmp_path), tmp_path / "out"
    assert main(sweep_args(path, out)) == 0
    tables = {n: (out / n).read_bytes() for n in ("sweep.csv", "sweep_owners.csv")}
    first = sorted((out / "tasks").glob("*.json"))[0]
    for record in json.loads(first.read_text())["records"]:
        name = f"c{record['cell']:05d}-r{record['replication']:05d}.json"
        (out / "tasks" / name).write_text(json.dumps(record, separators=(",", ":")) + "\n")
    first.unlink()
    assert main(sweep_args(path, out)) == 0 and capsys.readouterr().err == ""
    assert json.loads((out / "sweep.json").read_text())["reused_replications"] == 6
    assert {n: (out / n).read_bytes() for n in tables} == tables


def test_a_saved_task_under_another_name_is_refused(tmp_path, capsys):
    path, out = write(tmp_path), tmp_path / "out"
    assert main(sweep_args(path, out)) == 0
    tasks = sorted((out / "tasks").glob("*.json"))
    shutil.copy(tasks[0], tasks[1])  # cell 0's whole task named as cell 1's
    before = contents(out)
    capsys.readouterr()
    assert main(sweep_args(path, out)) == 2
    line = one_line(capsys.readouterr().err)
    assert line.startswith(f"dpmarket: error: {tasks[1]}: holds cell 0, replication 0, seed ")
    assert "not this experiment's cell 1, replication 0" in line and contents(out) == before


def test_a_damaged_experiment_json_is_refused_if_work_is_saved_else_written_anew(tmp_path, capsys):
    path, out = write(tmp_path), tmp_path / "out"
    assert main(sweep_args(path, out)) == 0
    identity = (out / "experiment.json").read_text()
    (out / "experiment.json").write_text(identity[:40])
    before = contents(out)
    capsys.readouterr()
    assert main(sweep_args(path, out)) == 2
    line = one_line(capsys.readouterr().err)
    assert line.startswith(f"dpmarket: error: {out / 'experiment.json'}: damaged (not JSON (")
    assert "2 saved tasks" in line
    assert "cannot be rebuilt" in line and contents(out) == before
    fresh = tmp_path / "fresh"
    (fresh / "tasks").mkdir(parents=True)
    (fresh / "experiment.json").write_text("")  # killed while it was first written, say
    assert main(sweep_args(path, fresh)) == 0
    assert capsys.readouterr().err.splitlines() == [
        f"dpmarket: warning: {fresh / 'experiment.json'}: damaged (empty file); no replication is "
        f"saved yet, so it is written anew"]
    assert (fresh / "experiment.json").read_text() == identity


# ------------------------------------------------------------- every cell's files first (issue 13.7)


@pytest.mark.parametrize("key,good", [("data.path", "a.csv"), ("network.availability", "trace.csv")])
def test_a_grid_cell_naming_a_missing_file_fails_before_any_work(tmp_path, monkeypatch, key, good):
    monkeypatch.chdir(tmp_path)  # a data.path from the command line is relative to where it runs
    (tmp_path / "a.csv").write_text("site,a,b,y\n" + "".join(f"{'AB'[i % 2]},{i % 7},{i % 5},{i % 3}\n"
                                                             for i in range(300)))
    (tmp_path / "trace.csv").write_text("owner,start,end\n0,0,1000\n")
    table = ("name = 't'\n[data]\nsource = 'table'\npath = 'a.csv'\n[data.table]\ntarget = 'y'\n"
             "numeric = ['a', 'b']\npartition = 'site'\nholdout = 100\n"
             "[learner]\nrho = 3.0\niterations = 40\n")
    text = table if key == "data.path" else TINY + '[network]\nmode = "request"\n'
    path = write(tmp_path, text + "[output]\nplots = false\n" if key == "data.path" else text)
    done = cli("sweep", path.name, "--grid", f"{key}={good},missing.csv", "--out", "out", "--quiet")
    assert done.returncode == 2
    assert one_line(done.stderr).startswith(f"dpmarket: error: s.toml (with --grid {key}=missing.csv): "
                                            f"{key} = 'missing.csv': no such file")
    assert not (tmp_path / "out").exists() and not hidden(tmp_path)


# ----------------------------------------------------- killed processes, signals, locks (issue 13.8)


@LINUX
def test_a_killed_runs_staging_directory_is_removed_by_the_next_run_and_nothing_else(tmp_path):
    out = tmp_path / "run"
    proc = start("run", write(tmp_path, slow(), "slow.toml"), "--out", out, "--quiet")
    left = wait_for(lambda: staging_of(tmp_path, "run"))
    proc.kill()  # SIGKILL: no handler runs, the staging directory stays
    proc.communicate(timeout=30)
    assert all(p.is_dir() for p in left)
    (tmp_path / ".run.not-ours").mkdir()  # not the staging pattern
    (tmp_path / ".other.abcd1234").mkdir()  # another directory's staging
    assert cli("run", write(tmp_path), "--out", out).returncode == 0
    assert not any(p.exists() for p in left)
    assert hidden(tmp_path) == [".other.abcd1234", ".run.not-ours"]
    assert (out / "summary.json").is_file()


@LINUX
@pytest.mark.parametrize("command", ["run", "sweep"])
def test_helper_processes_die_with_a_killed_parent(tmp_path, command):
    """The figure painter of ``run`` and the pool workers of ``sweep`` end when their parent is
    killed outright (SIGKILL, which no handler sees)."""
    if command == "run":
        args = ["run", write(tmp_path, slow(plots=True)), "--quiet"]
        expected = 1
    else:
        args = ["sweep", write(tmp_path, slow()), "--grid", "privacy.epsilon=1,10", "--replications", "4",
                "--executor", "process", "--workers", "2", "--quiet"]
        expected = 2
    proc = start(*args, "--out", tmp_path / "out")
    helpers = wait_for(lambda: len(children(proc.pid)) >= expected and children(proc.pid))
    assert all(running(pid) for pid in helpers)
    proc.kill()
    proc.communicate(timeout=30)
    wait_for(lambda: not any(running(pid) for pid in helpers))


@LINUX
@pytest.mark.parametrize("sig,status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_ctrl_c_and_sigterm_on_a_run_say_one_line_and_leave_nothing(tmp_path, sig, status):
    """Sent to the whole process group, as a terminal (Ctrl-C) or a batch system does: the figure
    painter prints no traceback of its own; no staging directory, lock or run directory stays. The
    run cannot end before the signal (10⁹ iterations), and the signal is sent with its process tree
    frozen, once the painter is seen (under load a 200,000-update run could end first)."""
    path = write(tmp_path, endless(plots=True))
    proc = start("run", path, "--out", tmp_path / "run", "--quiet", start_new_session=True)
    # Training has begun once events.csv is being written. (Earlier, a Ctrl-C landing while numpy
    # first imports numpy.random is lost inside that import: numpy's, not ours to fix.)
    wait_for(lambda: any((p / "events.csv").exists() for p in staging_of(tmp_path, "run")), timeout=PATIENCE)
    wait_for(lambda: children(proc.pid), timeout=PATIENCE)  # the figure painter
    with frozen(proc.pid):
        assert children(proc.pid)
        os.killpg(proc.pid, sig)
    _, err = proc.communicate(timeout=PATIENCE)
    assert proc.returncode == status, err
    assert one_line(err) == INTERRUPTED
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.toml"]


@LINUX
def test_sigterm_on_a_sweep_keeps_finished_replications_like_ctrl_c(tmp_path):
    out = tmp_path / "out"
    proc = start("sweep", write(tmp_path, HEAVY), *MANY, "--executor", "process", "--workers", "2", "--out",
                 out)
    wait_for(lambda: list((out / "tasks").glob("c*.json")), timeout=PATIENCE)
    with frozen(proc.pid):  # the sweep cannot move on between the look and the signal
        assert len(list((out / "tasks").glob("c*.json"))) < CELLS  # work remains
        proc.terminate()
    _, err = proc.communicate(timeout=PATIENCE)
    assert proc.returncode == 143
    assert one_line(err) == (f"dpmarket: interrupted; finished replications are saved in {out}: "
                             f"re-run the same command to resume")
    for task in (out / "tasks").glob("*.json"):
        json.loads(task.read_text())
    assert not list(out.rglob(".*")) and not hidden(tmp_path)


@pytest.mark.slow
@LINUX
def test_ctrl_c_on_a_dask_sweep_is_one_line(tmp_path):
    pytest.importorskip("distributed")
    out = tmp_path / "out"
    proc = start("sweep", write(tmp_path, HEAVY), *MANY, "--executor", "dask", "--workers", "2", "--out", out,
                 start_new_session=True)
    wait_for(lambda: list((out / "tasks").glob("c*.json")), timeout=PATIENCE)
    with frozen(proc.pid):
        assert len(list((out / "tasks").glob("c*.json"))) < CELLS  # work remains
        os.killpg(proc.pid, signal.SIGINT)  # the terminal's Ctrl-C reaches Dask's workers too
    _, err = proc.communicate(timeout=PATIENCE)
    assert proc.returncode == 130
    assert one_line(err) == (f"dpmarket: interrupted; finished replications are saved in {out}: "
                             f"re-run the same command to resume")


@LINUX
def test_a_second_writer_into_the_same_directory_is_refused_with_one_line(tmp_path):
    """The first writer is frozen (SIGSTOP) while the second tries: it holds the directory's lock
    whatever the second's start-up costs (under load the first could finish before the second looked)."""
    out = tmp_path / "out"
    args = ["sweep", write(tmp_path, HEAVY), *MANY, "--executor", "process", "--workers", "1", "--out", out]
    first = start(*args)
    wait_for(lambda: (out / "tasks").is_dir(), timeout=PATIENCE)
    with frozen(first.pid):
        second = cli(*args)
        first.send_signal(signal.SIGINT)  # handled once the first goes on
    assert second.returncode == 2
    assert one_line(second.stderr) == (f"dpmarket: error: {out}: another dpmarket process (pid "
                                       f"{first.pid}) is writing there; wait for it to finish or "
                                       f"choose another --out")
    _, first_err = first.communicate(timeout=PATIENCE)
    # the second left the first's files alone, and the first ends as interrupted (it once ended with 0
    # under load: the Ctrl-C had landed in Python's at-fork handlers, which swallow it; the pool's
    # start now holds signals, dpmarket/experiment/executors.py)
    assert first.returncode == 130, (first.returncode, first_err,
                                     len(list((out / "tasks").glob("*.json"))) if (out / "tasks").is_dir()
                                     else None)
    assert not list(out.rglob(".*")) and not hidden(tmp_path)


def test_the_lock_is_exclusive_and_removed_on_release(tmp_path):
    target = tmp_path / "out"
    with files.locked(target):
        assert files.lock_path(target).read_text() == f"{os.getpid()}\n"
        with pytest.raises(RunDirectoryError, match=f"pid {os.getpid()}"), files.locked(target):
            pass
        with files.locked(tmp_path / "other"):  # another directory is another lock
            pass
    assert not hidden(tmp_path)
    with files.locked(target):  # free again
        pass


# --------------------------------------------- the file system failing (issue 13.5): one line each


NO_SPACE = os.strerror(errno.ENOSPC)  # "No space left on device"


def full_disk(*args, **kwargs):
    raise OSError(errno.ENOSPC, NO_SPACE)


def test_a_full_disk_is_one_line_and_leaves_nothing_half_written(tmp_path, monkeypatch, capsys):
    path, run_dir = write(tmp_path), tmp_path / "run"
    monkeypatch.setattr(results, "write_owners", full_disk)  # halfway through the run's files
    assert main(["run", str(path), "--out", str(run_dir)]) == 2
    assert one_line(capsys.readouterr().err) == f"dpmarket: error: {run_dir}: cannot write: {NO_SPACE}"
    assert not run_dir.exists() and not hidden(tmp_path)
    out = tmp_path / "sweep"
    monkeypatch.setattr(study, "write_csv", full_disk)  # the tables, after every replication is saved
    assert main(sweep_args(path, out)) == 2
    assert one_line(capsys.readouterr().err) == f"dpmarket: error: {out}: cannot write: {NO_SPACE}"
    assert sorted(p.name for p in out.iterdir()) == ["experiment.json", "tasks"] and not hidden(tmp_path)
    monkeypatch.undo()
    assert main(sweep_args(path, out)) == 0 and (out / "sweep.csv").is_file()


def test_a_failing_atomic_write_is_one_error_naming_the_file_and_keeps_the_old_one(tmp_path):
    target = tmp_path / "f.json"
    target.write_text("old")
    with pytest.raises(RunDirectoryError) as caught:
        files.write_atomic(target, full_disk)
    assert str(caught.value) == f"{target}: cannot write: {NO_SPACE}"
    assert target.read_text() == "old" and list(tmp_path.iterdir()) == [target]


def test_a_file_size_limit_reached_while_writing_events_is_one_line(tmp_path):
    """A real write failure (EFBIG under RLIMIT_FSIZE: no root needed) while events.csv streams."""
    out = tmp_path / "run"

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (64_000, 64_000))

    done = cli("run", write(tmp_path), "--set", "learner.iterations=5000", "--out", out, preexec_fn=limit)
    assert done.returncode == 2
    assert one_line(done.stderr) == f"dpmarket: error: {out}: cannot write: File too large"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.toml"]


def test_an_out_name_too_long_for_the_file_system_is_one_line(tmp_path, capsys):
    path = write(tmp_path)
    too_long = tmp_path / ("x" * 300)
    assert main(["run", str(path), "--out", str(too_long)]) == 2
    line = one_line(capsys.readouterr().err)
    assert line == f"dpmarket: error: {too_long}: cannot write: File name too long"
    assert main(sweep_args(path, too_long)) == 2
    assert one_line(capsys.readouterr().err).endswith("cannot write: File name too long")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.toml"]
    assert main(["run", str(path), "--out", str(tmp_path / ("y" * 250))]) == 0  # long but allowed
    assert not hidden(tmp_path)


# -------------------------------------------------------------- no silent overwrites (issue 14.2)


def test_run_writes_again_only_for_the_same_scenario(tmp_path, capsys):
    path, out = write(tmp_path), tmp_path / "run"
    assert main(["run", str(path), "--out", str(out)]) == 0
    before = contents(out)
    for other in (["--set", "privacy.epsilon=2"], ["--seed", "7"]):
        assert main(["run", str(path), "--out", str(out), *other]) == 2
        line = one_line(capsys.readouterr().err)
        assert line.startswith(f"dpmarket: error: {out}: holds a run with other settings (")
        assert contents(out) == before
    assert "(privacy.epsilon = 1.0 there, 2.0 here)" in cli("run", path, "--out", out,
                                                              "--set", "privacy.epsilon=2").stderr
    assert main(["run", str(path), "--out", str(out)]) == 0  # the same command: the same bytes
    again = contents(out)
    assert {k for k in before if before[k] != again[k]} <= {"summary.json"}  # wall_seconds only
    assert main(["sweep", str(path), "--grid", "privacy.epsilon=1", "--out", str(out)]) == 2
    assert contents(out) == again and not hidden(tmp_path)


def test_default_directories_take_a_new_name_for_other_results(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    path = write(tmp_path)
    for args, expected in ((["run", "s.toml"], "tiny-seed5"),
                           (["run", "s.toml", "--set", "privacy.epsilon=2"], "tiny-seed5-2"),
                           (["run", "s.toml"], "tiny-seed5"),
                           (["run", "s.toml", "--set", "privacy.epsilon=2"], "tiny-seed5-2"),
                           (["run", "s.toml", "--seed", "5", "--set", "privacy.epsilon=3"], "tiny-seed5-3")):
        assert main(args) == 0
        assert capsys.readouterr().out.rstrip().endswith(str(Path("outputs") / expected))
    assert sorted(p.name for p in (tmp_path / "outputs").iterdir()) == ["tiny-seed5", "tiny-seed5-2",
                                                                        "tiny-seed5-3"]
    assert 'epsilon = 2.0' in (tmp_path / "outputs" / "tiny-seed5-2" / "scenario.toml").read_text()
    sweep = ["sweep", str(path), "--grid", "privacy.epsilon=1,10", "--executor", "serial", "--quiet"]
    assert main(sweep) == 0 and main([*sweep, "--set", "learner.iterations=40"]) == 0
    assert main(sweep) == 0  # resumes its own directory
    made = sorted(p.name for p in (tmp_path / "outputs").iterdir() if "sweep" in p.name)
    assert made == ["tiny-sweep-privacy.epsilon-seed5", "tiny-sweep-privacy.epsilon-seed5-2"]
    meta = json.loads((tmp_path / "outputs" / made[0] / "sweep.json").read_text())
    assert meta["reused_replications"] == 2


def test_market_writes_again_only_for_the_same_comparison(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    market = '[market]\npolicy = "posted_price"\nprice = 1.0\nforecast = {c1 = 1.0, c2 = 1.0}\n'
    path, out = write(tmp_path, TINY + market), tmp_path / "cmp"
    assert main(["market", str(path), "--policies", "posted_price", "--out", str(out)]) == 0
    before = contents(out)
    assert main(["market", str(path), "--policies", "posted_price", "--replications", "2",
                 "--out", str(out)]) == 2
    line = one_line(capsys.readouterr().err)
    assert line.startswith(f"dpmarket: error: {out}: holds a market comparison with other settings (seeds")
    assert contents(out) == before
    assert main(["market", str(path), "--policies", "posted_price", "--out", str(out)]) == 0
    assert main(["run", str(path), "--out", str(out)]) == 2  # a run never replaces a comparison
    assert "holds other files, not a run" in capsys.readouterr().err
    for replications, expected in (("1", "tiny-market"), ("2", "tiny-market-2"), ("1", "tiny-market")):
        assert main(["market", str(path), "--policies", "posted_price", "--replications", replications]) == 0
        assert capsys.readouterr().out.rstrip().endswith(str(Path("outputs") / expected))


# ------------------------------------------------------ indices and trace fields (issue 13.5)


@pytest.mark.parametrize("digit", ["١", "²", "٣", "０"])
def test_a_non_ascii_digit_is_no_list_index(tmp_path, capsys, digit):
    path = write(tmp_path, TINY + '[[owners]]\nname = "a"\n[[owners]]\nname = "b"\n')
    assert main(["validate", str(path), "--set", f"owners.{digit}.epsilon=2"]) == 2
    assert one_line(capsys.readouterr().err).endswith(f"owners.{digit}: no item '{digit}' (the list has 2)")
    grid = ["sweep", str(path), "--grid", f"owners.{digit}.epsilon=2,3", "--out", str(tmp_path / "o")]
    assert main(grid) == 2
    assert f"no item '{digit}'" in one_line(capsys.readouterr().err) and not (tmp_path / "o").exists()


@pytest.mark.parametrize("row,expected", [
    ("²,0,5", "trace.csv:2: owner = '²': is neither an owner name nor an index"),
    ("١,0,5", "trace.csv:2: owner = '١': is neither an owner name nor an index"),
    ("1," + "9" * 140_000 + ",6", "trace.csv:2: row: not CSV: field larger than field limit (131072)"),
])
def test_a_bad_trace_row_is_one_line_naming_the_file_and_row(tmp_path, capsys, row, expected):
    (tmp_path / "trace.csv").write_text(f"owner,start,end\n{row}\n")
    path = write(tmp_path, TINY + '[network]\nmode = "request"\navailability = "trace.csv"\n')
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out)]) == 2
    assert one_line(capsys.readouterr().err) == f"dpmarket: error: {tmp_path / expected}"
    assert not out.exists() and not hidden(tmp_path)
