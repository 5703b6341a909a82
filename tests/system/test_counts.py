"""Bounds on the counts a user gives (dpmarket/system/counts.py, issue 43): every count is refused
before any work when numpy cannot hold it exactly (2^53) or what it makes a stage hold cannot fit in
memory, in one line naming the count, its value and the bound's reason. Each command's count is tried
with the work itself replaced by a failure, so a refusal that comes too late fails here at once."""

from __future__ import annotations

import time

import pytest

import dpmarket
from dpmarket.cli import main
from dpmarket.errors import ArgumentValueError
from dpmarket.system import counts

BIG = 10**40


@pytest.fixture(autouse=True)
def sixteen_gigabytes(monkeypatch):
    """The same answers on every machine: 16 GiB to fit in."""
    monkeypatch.setenv("DPMARKET_MEMORY", "16G")


@pytest.fixture
def no_work(monkeypatch):
    """The audit's, the comparison's and the experiments' first steps of work, each a failure."""
    def started(*args, **kwargs):
        raise AssertionError("the work started before the count was checked")

    monkeypatch.setattr("dpmarket.runs.audit.setting", started)
    monkeypatch.setattr("dpmarket.rng.replication_seeds", started)
    monkeypatch.setattr("dpmarket.experiment.compare.prepare", started)


def test_exact_and_memory_bounds():
    assert counts.exact(2**53) is None and counts.exact(2**53 + 1) == counts.BEYOND_EXACT
    assert counts.refusal(10, 8, "ten floats") is None
    assert counts.refusal(BIG, 0, "free things") == counts.BEYOND_EXACT  # beyond numpy whatever the size
    assert counts.refusal(2**40, 2**10, "a thousand TiB").startswith(
        "a thousand TiB would need at least 1 PiB of memory; DPMARKET_MEMORY allows 16 GiB")


@pytest.mark.parametrize("args, needle", [
    (["audit", "lending_banks", "--runs", "1000000000000"],
     "--runs 1000000000000: 2 worlds x 1,000,000,000,000 runs (each its seed, score and final model) would "
     "need at least 247 TiB of memory"),
    (["audit", "lending_banks", "--method", "one-run", "--runs", "1000000000000000000"],
     f"--runs 1000000000000000000: {counts.BEYOND_EXACT}"),
    (["audit", "lending_banks", "--method", "one-run", "--runs", "1000000000000000"],
     "--runs 1000000000000000: 1,000,000,000,000,000 runs' seeds and 10 canary bits each would need at "
     "least 107 PiB of memory"),
    (["market", "banks_market", "--policies", "auction", "--replications", "1000000000"],
     "--replications = 1000000000: 1,000,000,000 replications of 1 policy (each its seed, training jobs "
     "and psi) would need at least 96.9 GiB of memory"),
    (["market", "banks_market", "--policies", "auction,posted_price", "--replications", str(BIG)],
     f"--replications = {BIG}: {counts.BEYOND_EXACT}"),
    (["run", "lending_banks", "--replications", str(BIG)], f"--replications = {BIG}: {counts.BEYOND_EXACT}"),
    (["sweep", "lending_banks", "--grid", "privacy.epsilon=1,2", "--replications", str(BIG)],
     f"--replications = {BIG}: {counts.BEYOND_EXACT}"),
])
def test_a_count_no_machine_holds_is_refused_before_any_work(tmp_path, capsys, no_work, args, needle):
    """audit --runs 10^12 derived seeds silently for hours; --method one-run --runs 10^18 was numpy's
    "array is too big"; market --replications 10^9 hung, 10^40 an OverflowError traceback."""
    start = time.process_time()
    assert main([*args, "--out", str(tmp_path / "out"), "--quiet"]) == 2
    assert time.process_time() - start < 2.0
    err = capsys.readouterr().err
    assert err.startswith(f"dpmarket: error: {needle}") and err.count("\n") == 1, err
    assert not (tmp_path / "out").exists()


def test_the_api_refuses_the_same_counts_naming_its_argument(no_work):
    """dpmarket.market(..., replications=10**9) hung; audit's runs are the API's argument too."""
    with pytest.raises(ArgumentValueError, match=r"dpmarket.market\(\): replications = 1000000000: "
                                                 r"1,000,000,000 replications of 1 policy"):
        dpmarket.market("banks_market", policies=["auction"], replications=10**9)
    with pytest.raises(ArgumentValueError, match=r"dpmarket.audit\(\): runs = 1000000000000: 2 worlds"):
        dpmarket.audit("lending_banks", runs=10**12)
    with pytest.raises(ValueError, match=r"learner.iterations = 10{40}: at most 2\^53"):
        dpmarket.run("lending_banks", overrides={"learner.iterations": BIG})
