"""The data owner: answers are projected onto Θ, so no query point makes an answer shift by more than the
sensitivity between neighbouring datasets; the replay's answers are the owner's."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import tiny

from dpmarket.data import build_consortium
from dpmarket.learning.objective import Objective, make_loss
from dpmarket.privacy.cohort import build_owners
from dpmarket.privacy.owners import project
from dpmarket.replay.kernel import Answers


def owners_at(loss: str = "squared", clip: float | None = None):
    privacy = {"sensitivity": "clip", "clip": clip} if clip else {}
    kind = "interest_rate" if loss == "squared" else "card_fraud"
    scenario = tiny(data={"kind": kind}, model={"loss": loss, "intercept": False}, privacy=privacy,
                    learner={"rho": 3.0})
    consortium = build_consortium(scenario)
    objective = Objective(make_loss(loss), consortium.owners, 1e-5, 1.0)
    return scenario, build_owners(scenario, consortium, objective)


def test_an_answer_far_outside_the_box_is_the_answer_at_its_projection():
    """θ = 10·θmax: the owner answers as at the box's corner, and the answer's shift between neighbours
    stays within 2Ξ/n_i; computed at θ itself (a wrong input, what an owner trusting the query did) a
    record's gradient moves the answer by more than 3.5 times the sensitivity (5.5 times here, three
    features)."""
    _, owners = owners_at()
    owner = owners[0]
    p = owner.data.stats.A.shape[0]
    far = np.full(p, 10.0 * owner.theta_max)
    assert np.array_equal(owner.exact_answer(far), owner.exact_answer(project(far, owner.theta_max)))

    def worst_shift(theta: np.ndarray) -> float:  # a corner record with y = −Y against y = +Y
        grads = [owner.loss.per_example_grads(theta, np.ones((1, p)), np.array([label]))[0]
                 for label in (3.0, -3.0)]
        return float(np.abs(grads[0] - grads[1]).sum()) / owner.data.n

    def worst_gradient(theta: np.ndarray) -> float:  # one record's gradient: half the replace-one shift
        return max(float(np.abs(owner.loss.per_example_grads(theta, np.full((1, p), s),
                                                             np.array([-3.0 * s]))).sum())
                   for s in (1.0, -1.0)) / owner.data.n

    assert worst_shift(project(far, 1.0)) <= 2 * worst_gradient(project(far, 1.0)) <= owner.sensitivity
    assert 2 * worst_gradient(far) > 3.5 * owner.sensitivity  # at θ itself (a wrong input)


@pytest.mark.parametrize("loss, clip", [("squared", None), ("squared", 2.0), ("logistic", None),
                                        ("hinge", None)])
def test_the_replays_answers_are_the_owners_inside_and_outside_the_box(loss, clip):
    """Answers.one, Answers.of and Answers.every equal DataOwner.exact_answer bit for bit at points of Θ
    (where the projection is the identity) and far outside it."""
    _, owners = owners_at(loss, clip)
    answers = Answers(owners)
    gen = np.random.default_rng(1)
    p = owners[0].noise.dim
    thetas = np.vstack([gen.uniform(-1, 1, (3, p)), gen.uniform(-50, 50, (3, p))])
    slots = np.array([0, 1, 2, 0, 1, 2])
    expected = np.array([owners[s].exact_answer(t) for s, t in zip(slots, thetas, strict=True)])
    assert np.array_equal(np.array([answers.one(int(s), t) for s, t in zip(slots, thetas, strict=True)]),
                          expected)
    assert np.array_equal(answers.of(slots, thetas), expected)
    every = answers.every(thetas)
    assert np.array_equal(every[np.arange(6), slots], expected)
    inside = project(thetas, 1.0)
    assert not np.array_equal(inside, thetas)  # the second half was outside Θ
