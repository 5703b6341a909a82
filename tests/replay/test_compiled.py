"""The compiled replay kernel (:mod:`dpmarket.replay.compiled`, extra ``fast``) and its switch.

With numba installed, the replay with ``DPMARKET_KERNEL=numba`` must give the numpy replay's models
(θ_L at every recorded k, each replication's last) and ψ within 10⁻¹² relative, on every case the
kernel handles, and must really have run the kernel there; a kernel fed a wrong step or a wrong
noise draw must be caught. Without numba (simulated, so it runs everywhere) asking for numba, or
for an unknown kernel, is one error line and exit 2 before anything is written; ``auto`` never
imports numba for a small replay, and importing dpmarket never imports it.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from helpers import ROOT, tiny_toml

from dpmarket.cli import main
from dpmarket.learning import kernels
from dpmarket.replay import compiled
from dpmarket.replay import kernel as replay_module
from dpmarket.runs.replications import run_cell
from dpmarket.schedule.tape import CHUNK
from tests.replay.test_kernel import SEEDS, dealt, setup

RELATIVE = 1e-12
HANDLED = ("squared_async", "squared_capped_leaves", "unequal_rates_caps", "inverse_frequency", "proof_step",
           "gaussian_rdp", "laplace_pld_capped", "request", "market_decliners")
STALE = ("broadcast", "request_two_channels_sensing")  # two channels: queries older than k − 1 (or
NOT_HANDLED = ("squared_clip", "logistic", "sync", *STALE)  # kept for later) in every block, even of 7
RIGHT = compiled.async_block


def replayed(case: str, kernel: str, monkeypatch, wrong=None, block: int | None = None) -> tuple:
    """The cell of ``case`` (replications ``SEEDS``) replayed with ``kernel``, and how many blocks the
    compiled kernel ran (``wrong``: a change to its arguments, to show the comparison can fail;
    ``block``: updates per block of the replay, and per chunk of tape)."""
    calls = []
    if block is not None:
        monkeypatch.setattr(replay_module, "CHUNK_LIMIT", block)

    def counted(theta_L, copies, counts, k, stats, *, learner, block, models):
        calls.append(k)
        if wrong is not None:
            learner, block = wrong(learner, block)
        return RIGHT(theta_L, copies, counts, k, stats, learner=learner, block=block, models=models)

    monkeypatch.setenv(compiled.VARIABLE, kernel)
    monkeypatch.setattr(compiled, "async_block", counted)
    scenario, prepared, market = setup(case)
    cell = run_cell(scenario, SEEDS, prepared.consortium, prepared.objective, **dealt(market),
                    size=block or CHUNK)
    return cell, len(calls)


def difference(a, b) -> float:
    """max |Δθ| / max |θ| over every replication's recorded and last models, +inf if ψ differs beyond
    the same tolerance."""
    worst = 0.0
    for r in range(len(SEEDS)):
        ks = a.metrics[r].k
        ours = np.array([a.model(r, k) for k in ks] + [a.replayed[0].final[r]])
        theirs = np.array([b.model(r, k) for k in ks] + [b.replayed[0].final[r]])
        worst = max(worst, float(np.max(np.abs(ours - theirs)) / max(np.max(np.abs(theirs)), 1e-300)))
        if not np.allclose(a.metrics[r].psi, b.metrics[r].psi, rtol=1e-9, atol=0.0):
            return float("inf")
    return worst


@pytest.mark.parametrize("case", HANDLED)
def test_kernel_gives_the_numpy_replay(case, monkeypatch):
    pytest.importorskip("numba")
    numpy_cell, none = replayed(case, "numpy", monkeypatch)
    numba_cell, ran = replayed(case, "numba", monkeypatch)
    assert none == 0 and ran > 0
    assert difference(numba_cell, numpy_cell) <= RELATIVE


@pytest.mark.parametrize("case", ["inverse_frequency", "squared_capped_leaves", "request"])
def test_kernel_across_blocks(case, monkeypatch):
    """Blocks of 7 updates: k, the counts and the recorded models carried from block to block."""
    pytest.importorskip("numba")
    numpy_cell, _ = replayed(case, "numpy", monkeypatch, block=7)
    numba_cell, ran = replayed(case, "numba", monkeypatch, block=7)
    assert ran > 1
    assert difference(numba_cell, numpy_cell) <= RELATIVE


@pytest.mark.parametrize("case", NOT_HANDLED)
def test_cases_it_does_not_handle_stay_numpy(case, monkeypatch):
    """Losses answered from records, synchronous rounds and stale queries never reach the kernel; the
    answers from records are numba's (dpmarket.learning.compiled), within 10⁻¹² of numpy's."""
    pytest.importorskip("numba")
    numpy_cell, _ = replayed(case, "numpy", monkeypatch)
    numba_cell, ran = replayed(case, "numba", monkeypatch)
    assert ran == 0
    reads_records = case in ("squared_clip", "logistic")
    assert (0.0 < difference(numba_cell, numpy_cell) <= RELATIVE) if reads_records else \
        difference(numba_cell, numpy_cell) == 0.0


def wrong_step(learner, block):
    """A wrong kernel input: θ_L's step one part in a million too long (the owners' copies of this
    case sit on the box's faces, where a wrong owners' step would not show)."""
    lam, step_owner, step_central, *rest = learner
    return (lam, step_owner, step_central * (1 + 1e-6), *rest), block


def wrong_draw(learner, block):
    """A wrong kernel input: every answer carries the pool's next draw (its owner's next, or another's)."""
    slots, lengths, pool, rows, scales, record = block
    return learner, (slots, lengths, pool, (rows + 1) % len(pool), scales, record)


@pytest.mark.parametrize("wrong", [wrong_step, wrong_draw])
def test_comparison_catches_a_wrong_kernel(wrong, monkeypatch):
    pytest.importorskip("numba")
    numpy_cell, _ = replayed("squared_async", "numpy", monkeypatch)
    numba_cell, ran = replayed("squared_async", "numba", monkeypatch, wrong)
    assert ran > 0
    assert difference(numba_cell, numpy_cell) > RELATIVE


def test_choice_reads_the_environment(monkeypatch):
    monkeypatch.delenv(compiled.VARIABLE, raising=False)
    assert compiled.choice() == "auto"
    monkeypatch.setenv(compiled.VARIABLE, " NumPy ")
    assert compiled.choice() == "numpy"
    assert not compiled.wanted(10 * compiled.AUTO_UPDATES)
    monkeypatch.setenv(compiled.VARIABLE, "fortran")
    with pytest.raises(compiled.KernelError, match="DPMARKET_KERNEL = 'fortran': expected one of"):
        compiled.choice()


def test_auto_takes_numba_only_where_it_pays(monkeypatch):
    monkeypatch.setenv(compiled.VARIABLE, "auto")
    monkeypatch.setattr(compiled, "available", lambda: True)
    assert not compiled.wanted(compiled.AUTO_UPDATES - 1)
    assert compiled.wanted(compiled.AUTO_UPDATES)
    monkeypatch.setattr(compiled, "available", lambda: False)
    assert not compiled.wanted(10 * compiled.AUTO_UPDATES)  # not installed: numpy, no error


def test_numba_asked_for_but_missing_is_one_line_and_exit_2(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "numba", None)  # as if not installed: find_spec gives None
    assert not compiled.available()
    monkeypatch.setenv(compiled.VARIABLE, "numba")
    path = tmp_path / "tiny.toml"
    path.write_text(tiny_toml())
    status = main(["run", str(path), "--out", str(tmp_path / "out"), "--replications", "2", "--quiet"])
    err = capsys.readouterr().err
    assert status == 2 and not (tmp_path / "out").exists()
    assert err == ("dpmarket: error: environment: DPMARKET_KERNEL = 'numba': numba is not installed "
                   "(pip install 'dpmarket[fast]', or unset it)\n")


def test_unknown_kernel_is_one_line_and_exit_2(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv(compiled.VARIABLE, "fortran\nx")
    path = tmp_path / "tiny.toml"
    path.write_text(tiny_toml())
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "DPMARKET_KERNEL = 'fortran\\nx'" in err
    assert not (tmp_path / "out").exists()


def test_small_runs_never_import_numba(tmp_path):
    """Importing dpmarket, and a replicated run far below the threshold under ``auto``, leave numba
    unimported (its import alone costs a third of a second): the default install's bytes and times."""
    (tmp_path / "tiny.toml").write_text(tiny_toml())
    code = ("import sys; from dpmarket.cli import main; "
            f"status = main(['run', {str(tmp_path / 'tiny.toml')!r}, '--out', {str(tmp_path / 'o')!r}, "
            "'--replications', '3', '--executor', 'serial', '--quiet']); "
            "print(status, 'numba' in sys.modules)")
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "DPMARKET_KERNEL": "auto"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT)
    assert done.stdout.split()[-2:] == ["0", "False"], done.stderr


# --- a numba that is installed but broken (issue 24) ---------------------------------------------------

class BrokenDispatcher:
    """What numba.njit returns in an installation whose compiler fails (an llvmlite that does not
    match, a numpy too new for it): types are read, compiling raises."""

    def __init__(self, function):
        self.function = function

    def typeof_pyval(self, value):
        return type(value)

    def compile(self, signature):
        raise RuntimeError("LLVM ERROR: symbol not found\nsecond line")

    def __call__(self, *args):
        pytest.fail("a kernel that did not compile was called")


def fresh_state(monkeypatch):
    """No kernel made and numba not yet found broken, in this process (restored after the test)."""
    monkeypatch.setattr(compiled, "_kernel", None)
    monkeypatch.setattr(kernels, "_broken", None)
    monkeypatch.setattr(kernels, "_warned", False)


@pytest.fixture
def broken_numba(monkeypatch):
    """numba importable, its compiler broken; the kernel module's state fresh."""
    import types

    fake = types.ModuleType("numba")
    fake.njit = lambda **options: BrokenDispatcher
    monkeypatch.setitem(sys.modules, "numba", fake)
    fresh_state(monkeypatch)


def test_a_numba_that_cannot_compile_falls_back_to_numpy_with_one_warning_under_auto(
        broken_numba, monkeypatch, capsys):
    """Same models as the numpy replay, bit for bit; one warning however many blocks."""
    numpy_cell, _ = replayed("squared_async", "numpy", monkeypatch, block=7)
    capsys.readouterr()
    monkeypatch.setattr(compiled, "AUTO_UPDATES", 0)
    auto_cell, tried = replayed("squared_async", "auto", monkeypatch, block=7)
    err = capsys.readouterr().err
    assert tried == 1  # the first block found numba broken; the others never asked
    assert difference(auto_cell, numpy_cell) == 0.0
    assert err == ("dpmarket: warning: numba is installed but cannot be used (RuntimeError: LLVM ERROR: "
                   "symbol not found); the numpy replay runs instead, with the same results (set "
                   "DPMARKET_KERNEL=numpy to skip numba)\n")


def test_a_numba_that_cannot_compile_is_one_line_and_exit_2_under_numba(broken_numba, monkeypatch, tmp_path,
                                                                          capsys):
    monkeypatch.setenv(compiled.VARIABLE, "numba")
    path = tmp_path / "tiny.toml"
    path.write_text(tiny_toml())
    status = main(["run", str(path), "--out", str(tmp_path / "out"), "--replications", "2", "--executor",
                   "serial", "--quiet"])
    err = capsys.readouterr().err
    assert status == 2 and not (tmp_path / "out").exists()
    assert err == ("dpmarket: error: environment: DPMARKET_KERNEL = 'numba': numba is installed but cannot "
                   "be used (RuntimeError: LLVM ERROR: symbol not found); repair it (pip install -U "
                   "'dpmarket[fast]'), or unset DPMARKET_KERNEL\n")


def fake_numba(directory):
    """A package named numba whose import fails, as a numba built for another llvmlite does."""
    package = directory / "site" / "numba"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text('raise ImportError("numba needs llvmlite 0.99")\n')
    return package.parent


def test_a_numba_that_is_found_but_does_not_import_is_one_line_under_numba(tmp_path):
    """find_spec alone found it, and the command ended in a traceback: one line, exit 2, nothing written."""
    site = fake_numba(tmp_path)
    (tmp_path / "tiny.toml").write_text(tiny_toml())
    env = {"PYTHONPATH": f"{site}:{ROOT}", "PATH": "/usr/bin:/bin", "DPMARKET_KERNEL": "numba"}
    args = [sys.executable, "-m", "dpmarket", "run", str(tmp_path / "tiny.toml"), "--replications", "2",
            "--quiet", "--out", str(tmp_path / "out")]
    done = subprocess.run(args, capture_output=True, text=True, env=env)
    assert done.returncode == 2 and not (tmp_path / "out").exists()
    assert done.stderr == ("dpmarket: error: environment: DPMARKET_KERNEL = 'numba': numba is installed but "
                           "cannot be used (ImportError: numba needs llvmlite 0.99); repair it (pip install "
                           "-U 'dpmarket[fast]'), or unset DPMARKET_KERNEL\n")


def test_a_numba_that_does_not_import_falls_back_to_numpy_under_auto(tmp_path, monkeypatch, capsys):
    """At the size auto takes numba for (2,000 replications in the red team's case): one warning and
    the numpy replay's models, bit for bit."""
    numpy_cell, _ = replayed("squared_async", "numpy", monkeypatch)
    monkeypatch.delitem(sys.modules, "numba", raising=False)
    monkeypatch.syspath_prepend(str(fake_numba(tmp_path)))
    fresh_state(monkeypatch)
    monkeypatch.setattr(compiled, "AUTO_UPDATES", 0)
    capsys.readouterr()
    auto_cell, tried = replayed("squared_async", "auto", monkeypatch)
    assert tried == 1 and difference(auto_cell, numpy_cell) == 0.0
    assert capsys.readouterr().err == (
        "dpmarket: warning: numba is installed but cannot be used (ImportError: numba needs llvmlite 0.99); "
        "the numpy replay runs instead, with the same results (set DPMARKET_KERNEL=numpy to skip numba)\n")
