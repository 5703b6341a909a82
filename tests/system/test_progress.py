"""Progress of long phases: shown on a terminal after a delay, silent otherwise, never in the maths."""

from __future__ import annotations

import io
import time
from contextlib import contextmanager

import numpy as np
from helpers import tiny, wait_for

from dpmarket.data.problem import prepare
from dpmarket.system import progress


class FakeTerminal(io.StringIO):
    """A stream that says it is a terminal (tqdm draws only on those)."""

    def isatty(self) -> bool:
        return True


class Recorder(progress.Progress):
    """Remembers each phase with the steps it reported."""

    def __init__(self) -> None:
        self.phases: list[tuple[str, int | None, int]] = []

    @contextmanager
    def phase(self, label, total=None, unit=None):
        counter = _Counter()
        yield counter
        self.phases.append((label, total, counter.n))


class _Counter:
    n = 0

    def update(self, n: int = 1) -> None:
        self.n += n


def test_a_phase_that_lasts_shows_its_label_count_and_is_cleared():
    stream = FakeTerminal()
    with progress.Terminal(stream, delay=0.05).phase("own-data models", total=4, unit="owner") as step:
        for _ in range(4):
            time.sleep(0.06)
            step.update()
        # past the delay the heartbeat thread draws the line: wait for it (a loaded machine may
        # run the thread late), not a fixed time
        wait_for(lambda: "/4" in stream.getvalue())
    text = stream.getvalue()
    assert "own-data models" in text and "/4" in text and "owner" in text
    assert text.endswith("\r"), "the line is cleared when the phase ends (leave=False)"


def test_a_phase_without_steps_still_shows_it_is_alive():
    stream = FakeTerminal()
    with progress.Terminal(stream, delay=0.05).phase("solving θ*"):
        wait_for(lambda: "solving θ* …" in stream.getvalue())  # no step: the heartbeat draws it
    assert stream.getvalue().endswith("\r")


def test_short_phases_quiet_runs_and_non_terminals_draw_nothing():
    short, pipe = FakeTerminal(), io.StringIO()
    with progress.Terminal(short, delay=60.0).phase("quick", total=3) as step:  # shorter than its delay
        step.update(3)
    with progress.Terminal(pipe, delay=0.0).phase("piped", total=3) as step:
        time.sleep(0.1)
        step.update(3)
    with progress.SILENT.phase("silent", total=3) as step:
        step.update(3)
    assert short.getvalue() == "" and pipe.getvalue() == ""


def test_flags_map_to_a_terminal_or_silence():
    assert isinstance(progress.of(True), progress.Terminal)
    assert progress.of(False) is progress.SILENT
    recorder = Recorder()
    assert progress.of(recorder) is recorder


def test_prepare_reports_the_solves_and_progress_changes_nothing():
    scenario = tiny(data={"kind": "card_fraud", "owners": 3, "records": 400},
                    model={"loss": "hinge", "theta_max": 10.0}, learner={"rho": 0.01})
    recorder = Recorder()
    seen = prepare(scenario, recorder)
    labels = [label for label, _, _ in recorder.phases]
    assert labels == ["building the owners' data", "solving θ* (hinge loss)", "own-data models θ_i*"]
    _, _, iterations = recorder.phases[1]
    assert iterations >= 3, "one step per L-BFGS iteration of each smoothing width"
    assert recorder.phases[2][1:] == (3, 3), "own-data models: total N, N steps"
    quiet = prepare(scenario)
    assert np.array_equal(seen.objective.theta_star, quiet.objective.theta_star)
    assert np.array_equal(seen.own_psi, quiet.own_psi)


def test_record_based_solves_run_on_one_blas_thread():
    """OpenBLAS's threads make the solvers' n × p matrix-vector products slower (and θ* depend on
    the cores): inside a hinge or logistic solve BLAS has one thread, outside it is as before."""
    from threadpoolctl import threadpool_info

    def blas_threads() -> int:
        return max(pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas")

    before = blas_threads()
    for loss in ("hinge", "logistic"):
        scenario = tiny(data={"kind": "card_fraud"}, model={"loss": loss}, learner={"rho": 0.01})
        inside: list[int] = []
        prepare(scenario).objective.minimize(on_iteration=lambda seen=inside: seen.append(blas_threads()))
        assert inside and set(inside) == {1}
    assert blas_threads() == before
