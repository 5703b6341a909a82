"""Random streams: the batched constructor gives numpy's generators, blocks give scalar sequences."""

from __future__ import annotations

from functools import partial
from itertools import islice

import numpy as np
import pytest
from helpers import ks_accepts
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

from dpmarket import rng
from dpmarket.rng import STREAMS, in_blocks, stream, streams

SEEDS = st.one_of(st.integers(0, 2**32 - 1), st.integers(2**32, 2**63), st.sampled_from([0, 2015, 2**32]))
REQUESTS = st.lists(st.tuples(SEEDS, st.sampled_from(STREAMS), st.integers(0, 2**40)), min_size=1,
                    max_size=30)


@given(REQUESTS)
def test_batched_streams_are_the_streams_one_by_one(requests):
    """Seeds of one and two 32-bit words (replication seeds are 63-bit, scenario seeds small), indices
    of one and two words, every stream name, mixed in one batch: the same state and the same draws."""
    made = streams(requests)
    for (seed, name, index), gen in zip(requests, made, strict=True):
        one = stream(seed, name, index)
        assert gen.bit_generator.state == one.bit_generator.state
        assert gen.standard_exponential(3).tolist() == one.standard_exponential(3).tolist()


def test_the_seed_hash_is_seed_sequences_on_every_entropy_length():
    """Entropies longer than SeedSequence's pool of four words take its extra mixing loop."""
    entropies = [(2**63 + 5, 7, 2**40 + 3, 9), (1, 2, 3, 4, 5, 6), (0,), (2**64 - 1,)]
    for entropy in entropies:
        words = np.array([rng._words(entropy)], dtype=np.uint32)
        expected = np.random.SeedSequence(entropy).generate_state(4, np.uint64)
        assert rng._seed_states(words)[0].tolist() == expected.tolist()


def test_a_wrong_hash_is_caught(monkeypatch):
    """The comparison the batch relies on fails on a hash that is off in one constant."""
    monkeypatch.setattr(rng, "_MULT_B", rng._MULT_B + 2)
    rng._check_batch.cache_clear()
    try:
        with pytest.raises(RuntimeError, match="seeds streams differently"):
            streams([(1, "clocks", 0)])
    finally:
        monkeypatch.undo()
        rng._check_batch.cache_clear()
    assert streams([(1, "clocks", 0)])[0].random() == stream(1, "clocks", 0).random()


def test_an_unknown_stream_name_is_refused_in_a_batch():
    with pytest.raises(ValueError, match="Unknown random stream 'clock'"):
        streams([(1, "clocks", 0), (1, "clock", 1)])


@pytest.mark.parametrize(("block", "most"), [(1, 7), (16, 256), (3, 3)])
def test_growing_blocks_give_exactly_the_scalar_sequence(block, most):
    """A clock draws 16 waits first and twice as many each time after: the same values as scalar calls."""
    scalar = stream(5, "clocks", 3)
    blocks = in_blocks(partial(stream(5, "clocks", 3).exponential, 0.25), block, most)
    assert list(islice(blocks, 700)) == [scalar.exponential(0.25) for _ in range(700)]


def test_blocks_grow_up_to_the_most():
    sizes = []

    def draw(size):
        sizes.append(size)
        return np.zeros(size)

    list(islice(in_blocks(draw, 16, 100), 400))
    assert sizes == [16, 32, 64, 100, 100, 100]


def test_replication_seeds_are_distinct_and_prefix_stable():
    seeds = rng.replication_seeds(7, 200)
    assert len(set(seeds)) == 200 and rng.replication_seeds(7, 20) == seeds[:20]
    assert set(seeds).isdisjoint(rng.replication_seeds(8, 200))


def test_replication_noise_streams_are_independent_laplace_draws():
    """The first noise draw of owner 0 under 2,000 replication seeds: Laplace(0, 1) by KS, and no
    lag-1 correlation (within 5 SE = 5/sqrt(n)); the same seed repeated must fail both."""
    def first_draws(seeds):
        return np.array([rng.stream(s, "noise", 0).laplace() for s in seeds])

    draws = first_draws(rng.replication_seeds(2024, 2000))
    assert ks_accepts(draws, stats.laplace)
    assert abs(np.corrcoef(draws[:-1], draws[1:])[0, 1]) < 5 / np.sqrt(len(draws))
    repeated = first_draws([rng.replication_seeds(2024, 1)[0]] * 2000)
    assert not ks_accepts(repeated, stats.laplace)
