"""The kernel switch (dpmarket/learning/kernels.py): DPMARKET_KERNEL, the auto rule, pins per thread,
and the record reads a run's choice is made from (dpmarket/runs/replications.py)."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from helpers import ROOT, tiny

from dpmarket.errors import KernelError
from dpmarket.learning import kernels
from dpmarket.runs.replications import record_reads


def test_auto_takes_numba_from_the_record_reads_where_it_is_installed(monkeypatch):
    monkeypatch.setenv(kernels.VARIABLE, "auto")
    monkeypatch.setattr(kernels, "available", lambda: True)
    assert kernels.resolve(kernels.AUTO_READS - 1) == "numpy"
    assert kernels.resolve(kernels.AUTO_READS) == "numba"
    assert kernels.resolve(kernels.AUTO_READS_REPLICATED, replicated=True) == "numba"
    assert kernels.resolve(kernels.AUTO_READS_REPLICATED - 1, replicated=True) == "numpy"
    monkeypatch.setattr(kernels, "available", lambda: False)
    assert kernels.resolve(1e30) == "numpy"  # not installed: numpy, no error
    monkeypatch.setenv(kernels.VARIABLE, "numpy")
    monkeypatch.setattr(kernels, "available", lambda: True)
    assert kernels.resolve(1e30) == "numpy"


def test_unpinned_answers_use_numba_only_when_asked_for(monkeypatch):
    monkeypatch.setenv(kernels.VARIABLE, "auto")
    assert kernels.backend() == "numpy"
    monkeypatch.setattr(kernels, "available", lambda: True)
    monkeypatch.setenv(kernels.VARIABLE, "numba")
    assert kernels.backend() == "numba"
    monkeypatch.setenv(kernels.VARIABLE, "fortran")
    with pytest.raises(KernelError, match="expected one of auto, numpy, numba"):
        kernels.backend()


def test_a_pin_holds_in_its_thread_until_the_block_ends_and_decided_never_overrides_it(monkeypatch):
    monkeypatch.setenv(kernels.VARIABLE, "auto")
    monkeypatch.setattr(kernels, "available", lambda: True)
    seen = {}

    def other_thread():
        seen["other"] = kernels.backend()

    with kernels.pinned("numba"):
        assert kernels.backend() == "numba" and kernels.is_pinned()
        with kernels.decided(0.0):  # a run inside an experiment's task does not decide again
            assert kernels.backend() == "numba"
        worker = threading.Thread(target=other_thread)
        worker.start()
        worker.join()
    assert seen["other"] == "numpy"  # a pin is the thread's own (Dask runs tasks in threads)
    assert kernels.backend() == "numpy" and not kernels.is_pinned()
    with kernels.decided(kernels.AUTO_READS):
        assert kernels.backend() == "numba"
    with pytest.raises(ValueError, match="unknown backend"), kernels.pinned("cuda"):
        pass


def test_record_reads_count_answers_and_psi_that_read_records():
    squared = tiny()
    sizes = np.array([100, 200, 300])
    assert record_reads(squared, sizes, 4) == 0.0  # statistics answer, statistics give f
    clipped = tiny(privacy={"sensitivity": "clip", "clip": 2.0}, owners=[{"clock_rate": 2.0}])
    T = clipped.learner.iterations
    shares = np.array([2.0, 1.0, 1.0]) / 4.0
    assert record_reads(clipped, sizes, 4) == pytest.approx(4 * T * float(shares @ sizes))
    logistic = tiny(data={"kind": "card_fraud"}, model={"loss": "logistic"})
    points = len(np.unique(np.linspace(0, T, min(logistic.output.metric_points, T) + 1).round()))
    assert record_reads(logistic, sizes, 4) == pytest.approx(4 * (T * sizes.mean() + points * sizes.sum()))


@pytest.mark.skipif(not kernels.available(), reason="numba not installed")
def test_auto_takes_numba_where_it_was_measured_faster(monkeypatch):
    """benchmarks/bench_kernel_choice.py: a logistic run of 3 × 20,000 records (p = 11) took 0.81 of
    numpy's CPU time under numba at T = 16,000 (3.65·10⁹ reads) and 1.33 of it at T = 4,000 (1.0·10⁹): auto
    takes numba for the first (it kept numpy up to 10¹⁰ reads) and numpy for the second."""
    from dpmarket.scenario.loading import load

    monkeypatch.setenv(kernels.VARIABLE, "auto")
    settings = ["model.loss=logistic", "data.records=20000", "learner.rho=auto", "output.metric_points=200",
                "privacy.preset=paper"]
    sizes, path = np.full(3, 20_000), ROOT / "scenarios" / "fraud_svm.toml"
    for iterations, faster in ((16_000, "numba"), (4_000, "numpy")):
        scenario = load(path, [*settings, f"learner.iterations={iterations}"])
        assert kernels.resolve(record_reads(scenario, sizes, 11)) == faster
