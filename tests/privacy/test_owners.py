"""The data owner: answers are projected onto Θ, so no query point makes an answer shift by more than the
sensitivity between neighbouring datasets; the replay's answers are the owner's."""

from __future__ import annotations

import copy
import pickle
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from helpers import tiny

from dpmarket.data import build_consortium
from dpmarket.learning import kernels
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


@pytest.mark.parametrize("loss, clip", [("squared", None), ("squared", 2.0), ("logistic", None),
                                        ("logistic", 0.5), ("hinge", 0.5)])
def test_the_bound_answer_is_the_bits_of_the_projection_and_the_losss_own_methods(loss, clip):
    """exact_answer binds the statistics or the records, the clip limits, the kernel and a buffer once per
    backend and thread: each answer is the bits of project() then the loss's mean_grad (or
    clipped_mean_grad), under numpy and numba, after a switch of backend, in another thread and in a
    copy; the loss's method at an unprojected point (a wrong input) gives another answer."""
    _, owners = owners_at(loss, clip)
    owner = owners[0]
    gen = np.random.default_rng(2)
    p = owner.noise.dim
    thetas = np.vstack([gen.uniform(-1, 1, (4, p)), gen.uniform(-20, 20, (2, p))])

    def methods(theta: np.ndarray, at=project) -> np.ndarray:
        q = at(theta, owner.theta_max)
        if clip is None:
            return owner.loss.mean_grad(q, owner.data)
        return owner.loss.clipped_mean_grad(q, owner.data, clip, owner.norm)

    def agree(who) -> bool:
        return all(np.array_equal(who.exact_answer(t), methods(t)) for t in thetas)

    for backend in [*kernels.BACKENDS[:1 + kernels.available()]] * 2:  # numpy, numba, and back again
        with kernels.pinned(backend):
            assert agree(owner)
            with ThreadPoolExecutor(1) as pool:  # the thread binds its own (the pin is per thread)
                assert pool.submit(lambda b=backend: kernels.pinned(b).__enter__() or agree(owner)).result()
            assert agree(copy.deepcopy(owner)) and agree(pickle.loads(pickle.dumps(owner)))
    assert not np.array_equal(owner.exact_answer(thetas[-1]), methods(thetas[-1], at=lambda t, _: t))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("where", [0, -1])
def test_an_answer_with_one_non_finite_coordinate_is_never_let_out(bad, where):
    """respond's finiteness check (a dot product with weights 2⁻ᵏ ≤ 1/p) catches NaN, +inf and −inf in any
    coordinate; the same answer with every coordinate finite passes, the largest doubles of one sign
    included (their weighted sum stays finite)."""
    _, owners = owners_at()
    owner = owners[0]
    p = owner.noise.dim
    exact = np.full(p, 0.25)
    owner.exact_answer = lambda theta: exact.copy()
    assert np.isfinite(owner.respond(np.zeros(p))).all()
    exact[:] = np.finfo(float).max / 2  # no noise draw takes these over the largest double
    assert np.isfinite(owner.respond(np.zeros(p))).all()
    exact[where] = bad
    with pytest.raises(FloatingPointError, match="non-finite answer"):
        owner.respond(np.zeros(p))
