"""The protocol of one run (dpmarket/schedule/protocol.py): ψ measured once, at the end, with each
recorded model's own value; the clocks' waits drawn in blocks with the values of one draw at a time."""

from __future__ import annotations

from unittest.mock import patch

import numpy as np
import pytest
from helpers import tiny

from dpmarket.data.problem import prepare
from dpmarket.experiment.grid import pin_data_seed
from dpmarket.learning import measure
from dpmarket.learning.learner import AsyncLearner
from dpmarket.runs import inline
from dpmarket.runs.inline import train
from dpmarket.schedule.protocol import WAITS, Superposition, Training, record_points, run_uniform

LOSSES = {"squared": {}, "logistic": {"data": {"kind": "card_fraud"}, "model": {"loss": "logistic"}},
          "hinge_capped": {"data": {"kind": "card_fraud"}, "model": {"loss": "hinge"},
                           "privacy": {"split": "capped", "cap": 8}}}  # budgets spent before T


@pytest.mark.parametrize("case", LOSSES)
def test_psi_is_measured_once_at_the_end_and_is_each_models_own(case):
    """One call of measure.psis for the whole run, at the recorded iterations (every point reached,
    then the last update), each value the bits Objective.psi gives that model alone; the models one
    update later (a deliberately wrong input) give other values."""
    scenario = pin_data_seed(tiny(**LOSSES[case]))
    prepared = prepare(scenario)
    calls, seen = [], []
    scored = measure.psis

    def counting(objective, thetas):
        calls.append(len(thetas))
        seen.extend(np.array(thetas, copy=True))
        return scored(objective, thetas)

    with patch.object(measure, "psis", counting):
        run = train(scenario, prepared.consortium, prepared.objective)
    m, objective = run.training.metrics, prepared.objective
    points = record_points(scenario.learner.iterations, scenario.output.metric_points)
    assert calls == [len(m.k)] and len(m.psi) == len(m.k) == len(m.time)
    assert m.k == [*points[points <= run.training.k].tolist()[:len(m.k) - 1], run.training.k]
    assert m.psi == [objective.psi(theta) for theta in seen]
    assert all(isinstance(v, float) for v in m.psi)
    assert np.array_equal(seen[-1], run.training.learner.model)
    assert m.psi[1:] != [objective.psi(theta) for theta in seen[:-1]]


class _Owner:
    """An owner whose budget is spent after ``allowed`` answers."""

    def __init__(self, allowed: int) -> None:
        self.allowed, self.exhausted = allowed, allowed == 0


class _Training:
    """What run_uniform drives: a learner (its type), owners, exchanges and leaves with their times."""

    def __init__(self, allowed: list[int]) -> None:
        self.learner = AsyncLearner(np.ones(len(allowed)), 2, 10, 1.0, 0.1, theta_max=1.0)
        self.owners, self.k, self.ticks = [_Owner(a) for a in allowed], 0, []

    def exchange(self, owner: int, time: float) -> None:
        self.ticks.append((owner, time))
        self.k += 1
        o = self.owners[owner]
        o.allowed -= 1
        o.exhausted = o.allowed == 0

    def leave(self, owner: int, time: float) -> None:
        self.ticks.append((-1 - owner, time))

    def finish(self) -> None:
        """Nothing to close: the recorder keeps its ticks in memory."""


def reference(allowed: list[int], iterations: int, seeds: tuple[int, int]) -> tuple[list, str]:
    """The ideal network one draw at a time: clocks.exponential(mean) per tick, the mean growing as
    owners leave."""
    selection, clocks = (np.random.default_rng(s) for s in seeds)
    clock, left, ticks, time, k = Superposition(len(allowed), None), list(allowed), [], 0.0, 0
    while k < iterations:
        if all(a == 0 for a in left):
            return ticks, "budgets exhausted"
        time += clocks.exponential(clock.mean_wait)
        owner = clock.pick(selection)
        if left[owner] == 0:
            ticks.append((-1 - owner, time))
            clock.remove(owner)
        else:
            ticks.append((owner, time))
            left[owner], k = left[owner] - 1, k + 1
    return ticks, "iterations"


@pytest.mark.parametrize("allowed, iterations", [([10**6] * 3, 3 * WAITS + 7), ([5, 600, 40, 0], 10**6)])
def test_the_waits_are_the_clocks_exponential_draws_one_at_a_time(allowed, iterations):
    """run_uniform draws the waits in blocks (standard exponentials scaled by each tick's mean):
    the ticks, owners and stop reason of one clocks.exponential(mean) per tick, across blocks and
    as owners leave (the mean changes); another clocks stream (a wrong input) gives other times."""
    want, why = reference(allowed, iterations, (3, 5))
    training = _Training(allowed)
    got = run_uniform(training, iterations, np.random.default_rng(3), np.random.default_rng(5))
    assert (training.ticks, got) == (want, why) and len(want) > 2 * WAITS
    other = _Training(allowed)
    run_uniform(other, iterations, np.random.default_rng(3), np.random.default_rng(6))
    assert [t for _, t in other.ticks] != [t for _, t in want]


@pytest.mark.parametrize("case", LOSSES)
def test_the_one_call_exchange_logs_and_learns_what_its_three_steps_do(case, tmp_path):
    """Training.exchange does query, answer and apply in one call, its rows appended straight to the
    log's block: events.csv (refusals of spent budgets included), θ_L, ψ and the owner sequence are
    the bytes of the same run through the three methods (a subclass overriding one of them); the run
    of another seed (a wrong input) differs."""
    class Stepwise(Training):
        def query(self, owner, time, channel=None):
            return Training.query(self, owner, time, channel)

    def run(cls, seed: int = 0) -> tuple:
        scenario = pin_data_seed(tiny(**LOSSES[case]))
        prepared = prepare(scenario.model_copy(update={"seed": scenario.seed + seed}))
        path = tmp_path / f"{cls.__name__}{seed}.csv"
        with patch.object(inline, "Training", cls):
            t = train(scenario.model_copy(update={"seed": scenario.seed + seed}), prepared.consortium,
                      prepared.objective, events_path=path).training
        assert t._fused is (cls is Training)
        return path.read_bytes(), t.learner.theta_L.tobytes(), t.metrics.psi, t.sequence.items

    one = run(Training)
    assert one == run(Stepwise)
    assert b"refusal" in one[0] or case != "hinge_capped"
    assert one[0] != run(Training, seed=1)[0]
