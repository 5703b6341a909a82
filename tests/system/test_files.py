"""Outputs as users expect them: modes from the umask (not tempfile's 0600/0700), strict JSON."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import tiny_toml

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
