"""The public proxy's expectation over populations (dpmarket/data/proxy.py ``population_weights``):
the closed form equals the mean over many twins, the K-twin mean is what it says, nothing private
enters, and a table's hold-out (one dataset, no population) is left as it is."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from helpers import mean_within, tiny

from dpmarket.data import build_consortium, proxy
from dpmarket.data.proxy import (
    closed_weights,
    floor_terms,
    population_seeds,
    population_weights,
    small_twin,
    twin_seed,
    twins_weights,
)
from dpmarket.data.synthetic import PROFILES


def whitened(**data):
    """Three banks of 2,000 loans, 8 whitened features, squared loss: where the closed form holds."""
    return tiny(data={"generator": "whitened", "kind": "interest_rate", "features": 8, "records": 2000,
                      "seed": 5, **data}, model={"intercept": False})


def test_population_seeds_start_with_the_twins_and_never_repeat_the_owners():
    """Seed 0 is the twin's own (the pilots' data); the others differ from it, from each other and
    from the owners' seed; the same seed gives the same list."""
    seeds = population_seeds(7, 6)
    assert seeds[0] == twin_seed(7) and len(set(seeds)) == 6 and 7 not in seeds
    assert population_seeds(7, 6) == seeds and population_seeds(7, 3) == seeds[:3]


def test_closed_form_equals_the_mean_over_many_twins():
    """E ψ(0) in closed form (the twin's H and f*, the generator's E θ*θ*ᵀ) against ψ(0) of 64
    independent twins: within 5 standard errors; the closed form with the length-of-stay profile's
    signal (0.5 for 0.6: 31 % lower) is refused. ``twins_weights`` is the per-mode mean of the
    twins' weights."""
    s = whitened()
    consortium = build_consortium(s)
    closed = closed_weights(s, consortium)
    twins = [floor_terms(small_twin(s, consortium, seed))[1] for seed in population_seeds(s.data.seed, 64)]
    psi0 = np.sum(twins, axis=1)
    assert mean_within(psi0, float(closed.sum()))
    ratio = (PROFILES["length_of_stay"].signal / PROFILES["interest_rate"].signal) ** 2
    assert not mean_within(psi0, float(closed.sum()) * ratio)
    assert np.allclose(twins_weights(s, consortium, 64), np.mean(twins, axis=0), rtol=1e-12, atol=0)


def test_population_weights_read_nothing_private_and_are_cached():
    """The expectation reads the scenario's declared settings and the owners' sizes, never their
    records: a stand-in that holds the sizes alone gives the same bytes. A second call is cached."""
    s = whitened(seed=11)
    consortium = build_consortium(s)
    proxy._WEIGHTS.clear()
    first = population_weights(s, consortium)
    assert population_weights(s, consortium) is first
    proxy._WEIGHTS.clear()
    assert np.array_equal(population_weights(s, SimpleNamespace(sizes=consortium.sizes)), first)


def test_the_correlated_generator_takes_the_mean_of_its_twins():
    """No closed form for the correlated generator (feature shifts, an intercept): the mean of
    POPULATION_DRAWS twins' weights."""
    s = tiny()
    consortium = build_consortium(s)
    assert closed_weights(s, consortium) is None
    proxy._WEIGHTS.clear()
    expected = twins_weights(s, consortium, proxy.POPULATION_DRAWS)
    assert np.array_equal(population_weights(s, consortium), expected)
