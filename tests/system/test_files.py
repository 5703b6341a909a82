"""Outputs as users expect them: modes from the umask (not tempfile's 0600/0700), strict JSON; one writer
that writes through links and refuses devices, FIFOs and directories."""

from __future__ import annotations

import errno
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import tiny_toml

from dpmarket.errors import OutputError
from dpmarket.system import files

TINY = tiny_toml()


def _modes(root: Path) -> set[tuple[str, int]]:
    """(kind, permission bits) of ``root`` and everything below it."""
    paths = [root, *root.rglob("*")]
    return {("dir" if p.is_dir() else "file", stat.S_IMODE(p.stat().st_mode)) for p in paths}


@pytest.mark.parametrize("mask", [0o022, 0o027])
def test_run_and_sweep_outputs_take_their_modes_from_the_umask(tmp_path, mask):
    """A run directory and a sweep directory: directories 0777 & ~umask, files 0666 & ~umask;
    tempfile's own modes (0700, 0600) — a deliberately wrong outcome — appear nowhere."""
    path = tmp_path / "s.toml"
    path.write_text(TINY)
    for args in (["run", str(path), "--out", str(tmp_path / "run")],
                 ["sweep", str(path), "--grid", "privacy.epsilon=1,10", "--replications", "2",
                  "--executor", "serial", "--quiet", "--out", str(tmp_path / "sweep")]):
        done = subprocess.run([sys.executable, "-m", "dpmarket", *args], capture_output=True, text=True,
                              timeout=120, umask=mask)
        assert done.returncode == 0, done.stderr
    for out in (tmp_path / "run", tmp_path / "sweep"):
        modes = _modes(out)
        assert modes <= {("dir", 0o777 & ~mask), ("file", 0o666 & ~mask)}, (out, modes)
        assert ("file", 0o600) not in modes and ("dir", 0o700) not in modes


def test_strict_json_writes_null_for_non_finite_numbers():
    text = files.dumps({"r2": float("nan"), "up": float("inf"), "ok": [1.5, float("-inf")], "n": 3})
    assert json.loads(text) == {"r2": None, "up": None, "ok": [1.5, None], "n": 3}
    with pytest.raises(ValueError):  # what json.dumps writes by default, the wrong input, is not JSON
        json.loads(json.dumps({"r2": float("nan")}), parse_constant=_refuse)


def test_run_summary_is_strict_json(tmp_path):
    path = tmp_path / "s.toml"
    market = '[market]\npolicy = "posted_price"\nprice = 1.0\nforecast = {c1 = 1.0, c2 = 1.0}\n'
    path.write_text(TINY + market)
    done = subprocess.run([sys.executable, "-m", "dpmarket", "run", str(path), "--out", str(tmp_path / "r")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    summary = json.loads((tmp_path / "r" / "summary.json").read_text(), parse_constant=_refuse)
    assert summary["forecast"]["r2"] is None  # explicit constants have no fit: NaN inside, null outside


def _refuse(token: str):
    raise ValueError(f"not JSON: {token}")


# --- the one writer: through links, never over what is not a regular file ----------------------

def _write(path: Path, text: str = "new\n") -> None:
    files.write_atomic(path, lambda temp: temp.write_text(text))


def test_a_write_through_a_link_replaces_its_target_and_keeps_the_link(tmp_path):
    """The old writer renamed over the link itself: the link became a regular file and its target
    was never written."""
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "t.json"
    target.write_text("old\n")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    chain = tmp_path / "chain.json"  # a link to a link
    chain.symlink_to(link)
    _write(chain)
    assert chain.is_symlink() and link.is_symlink() and target.read_text() == "new\n"
    assert not [p for p in (tmp_path / "real").iterdir() if p.name != "t.json"]  # no temporary left
    dangling = tmp_path / "dangling.json"  # a link to nothing yet: its target is created, as `>` does
    dangling.symlink_to(tmp_path / "real" / "later.json")
    _write(dangling)
    assert dangling.is_symlink() and (tmp_path / "real" / "later.json").read_text() == "new\n"


@pytest.mark.parametrize("kind", ["fifo", "directory", "device through a link", "fifo through a link"])
def test_what_is_not_a_regular_file_is_refused_in_one_line_and_left_as_it_is(tmp_path, kind):
    """A FIFO, a directory or a character device (``/dev/null``, reached through a link so that even
    the old writer, which replaced what the path named, could only have replaced the link) is
    refused before anything is written; the old writer put a regular file in its place."""
    fifo = tmp_path / "p"
    os.mkfifo(fifo)
    named = {"fifo": fifo, "directory": tmp_path / "d", "device through a link": tmp_path / "null",
             "fifo through a link": tmp_path / "to-p"}[kind]
    (tmp_path / "d").mkdir()
    (tmp_path / "null").symlink_to("/dev/null")
    (tmp_path / "to-p").symlink_to(fifo)
    before = {p.name: (p.is_symlink(), os.lstat(p).st_mode) for p in tmp_path.iterdir()}
    called = []
    with pytest.raises(OutputError) as refused:
        files.write_atomic(named, called.append)
    message = str(refused.value)
    assert called == [] and "\n" not in message and message.startswith(f"{named}: is ")
    assert "not a regular file" in message
    assert {p.name: (p.is_symlink(), os.lstat(p).st_mode) for p in tmp_path.iterdir()} == before
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_not_regular_names_each_kind_without_opening_it(tmp_path):
    os.mkfifo(tmp_path / "p")  # opening it for reading would block: the check must not
    (tmp_path / "f").write_text("x")
    assert files.not_regular(tmp_path / "p") == "a FIFO (named pipe)"
    assert files.not_regular("/dev/null") == "a character device"
    assert files.not_regular(tmp_path) == "a directory"
    assert files.not_regular(tmp_path / "f") is None and files.not_regular(tmp_path / "none") is None


def test_a_replaced_file_keeps_its_permissions_and_a_new_one_has_the_umasks(tmp_path):
    """As ``>`` does; the old writer gave a replaced file the umask's mode (0644 here, not 0640)."""
    kept = tmp_path / "kept.csv"
    kept.write_text("old\n")
    kept.chmod(0o640)
    _write(kept)
    assert stat.S_IMODE(kept.stat().st_mode) == 0o640 and kept.read_text() == "new\n"
    fresh = tmp_path / "fresh.csv"
    _write(fresh)
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o666 & ~files.umask()


def test_a_staged_file_is_placed_through_a_link_and_copied_across_file_systems(tmp_path, monkeypatch):
    (tmp_path / "elsewhere").mkdir()
    target = tmp_path / "elsewhere" / "sweep.csv"
    target.write_text("old\n")
    link = tmp_path / "sweep.csv"
    link.symlink_to(target)
    staged = tmp_path / "staged.csv"
    staged.write_text("new\n")
    files.place(staged, link)
    assert link.is_symlink() and target.read_text() == "new\n" and not staged.exists()

    renames = []
    real_replace = os.replace

    def across(src, dst):  # the first rename crosses file systems; the writer's own is local
        renames.append(dst)
        if len(renames) == 1:
            raise OSError(errno.EXDEV, os.strerror(errno.EXDEV))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", across)
    staged.write_text("newer\n")
    files.place(staged, link)
    assert link.is_symlink() and target.read_text() == "newer\n" and len(renames) == 2
    os.mkfifo(tmp_path / "fifo.csv")
    with pytest.raises(OutputError):
        files.place(staged, tmp_path / "fifo.csv")
    assert stat.S_ISFIFO(os.lstat(tmp_path / "fifo.csv").st_mode)


def test_a_run_directory_named_through_a_link_is_written_there_and_the_link_kept(tmp_path):
    """The old publisher renamed the link away and failed ('Is a directory'), leaving a staging
    directory behind; now the directory the link points to holds the run."""
    path = tmp_path / "s.toml"
    path.write_text(TINY)
    (tmp_path / "real").mkdir()
    (tmp_path / "out").symlink_to(tmp_path / "real")
    for _ in range(2):  # a first run into the empty directory, then the same run again over it
        done = subprocess.run([sys.executable, "-m", "dpmarket", "run", str(path), "--out",
                               str(tmp_path / "out"), "--quiet"], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert (tmp_path / "out").is_symlink() and (tmp_path / "real" / "summary.json").is_file()
        assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "real", "s.toml"]  # no staging left
