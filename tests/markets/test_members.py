"""Coalitions as the forecast reads them: every subset of some players, without its mask."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from dpmarket.markets.members import Masks, Subsets


def reference(players: np.ndarray, owners: int) -> np.ndarray:
    """Every subset's mask in itertools' order (player j is bit k−1−j of the code)."""
    bits = np.array(list(itertools.product([False, True], repeat=len(players))))
    masks = np.zeros((len(bits), owners), bool)
    masks[:, players] = bits
    return masks


@pytest.mark.parametrize("start,stop", [(0, None), (1, 512), (37, 700), (256, 768), (1000, 1024)])
def test_subset_sums_and_maxima_equal_those_of_the_masks(start, stop):
    gen = np.random.default_rng(4)
    players, owners = np.array([0, 2, 3, 5, 6, 7, 9, 10, 11, 12]), 14
    columns, values = gen.normal(size=(owners, 3)), gen.uniform(size=owners)
    subsets = Subsets(players, owners, start, stop)
    masks = Masks(reference(players, owners)[start:stop])
    assert subsets.count == masks.count
    assert np.allclose(subsets.sums(columns), masks.sums(columns), rtol=1e-12, atol=1e-12)
    assert np.allclose(subsets.sums(columns[:, 0]), masks.sums(columns[:, 0]), atol=1e-12)
    assert np.array_equal(subsets.largest(values), masks.largest(values))
    assert np.array_equal(subsets.masks(), masks.masks)
    assert np.array_equal(subsets.nonempty(), masks.nonempty())


def test_blocks_cover_every_nonempty_subset_once_and_stay_within_a_block():
    subsets = Subsets(np.arange(11), 11)
    blocks = subsets.blocks(256)
    codes = np.concatenate([b.codes() for b in blocks])
    assert np.array_equal(codes, np.arange(1, 2**11))
    assert all(b.start // 256 == (b.end - 1) // 256 for b in blocks)


def test_a_wrong_bit_order_is_caught():
    """The check above can tell: players read from the low bit up give other sums."""
    players, owners = np.arange(6), 6
    columns = np.arange(1.0, 7.0)
    wrong = Masks(reference(players[::-1], owners))
    assert not np.allclose(Subsets(players, owners).sums(columns), wrong.sums(columns))
