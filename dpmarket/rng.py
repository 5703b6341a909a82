"""Independent random streams, all derived from one run seed.

One ``SeedSequence`` per run is split by *name* so that adding a stream, or drawing more from
one stream, never changes the draws of another: the channel can change without touching the
DP noise, and two compensation policies can be compared on common random numbers.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Iterator, Sequence
from itertools import chain, repeat
from operator import methodcaller

import numpy as np
from numpy.random.bit_generator import ISeedSequence

_TOLIST = methodcaller("tolist")
STREAMS = ("data", "sizes", "selection", "clocks", "channel", "availability", "noise", "market", "arrivals")


@functools.cache  # a handful of names; hashing one costs a tenth of a stream
def _stream_key(name: str) -> int:
    """A stable 32-bit integer for a stream name (Python's hash() is salted per process)."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "little")


def stream(seed: int, name: str, *index: int) -> np.random.Generator:
    """The generator of stream ``name`` (optionally sub-indexed, e.g. per owner) for ``seed``."""
    entropy = _entropy(seed, name, *index)
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(entropy)))


def streams(requests: Sequence[tuple[int, str, int]]) -> list[np.random.Generator]:
    """``[stream(seed, name, index) for seed, name, index in requests]``: the same generators, built
    together.

    A stream costs about 20 µs, most of it numpy's ``SeedSequence`` hashing its entropy one word at a
    time in a Python-level loop; a replication of a network run needs a clock, an availability and a
    noise stream per owner (259 for ny_hospitals' 86 hospitals, more than its engine run of 1,000
    exchanges once that is lean). Here every entropy is hashed at once, by the same algorithm on
    arrays (:func:`_seed_states`), and each ``PCG64`` is seeded from its words as ``SeedSequence``
    would seed it. :func:`_check_batch` compares the two once per process and refuses to go on if
    they ever differ (a numpy that changed its algorithm), and the tests compare them on many keys.
    """
    _check_batch()
    return _generators([_entropy(seed, name, index) for seed, name, index in requests])


def _entropy(seed: int, name: str, *index: int) -> tuple[int, ...]:
    if name not in STREAMS:
        raise ValueError(f"Unknown random stream {name!r}; known: {', '.join(STREAMS)}")
    return (int(seed), _stream_key(name), *map(int, index))


def _generators(entropies: list[tuple[int, ...]]) -> list[np.random.Generator]:
    """A PCG64 generator per entropy, seeded with the words SeedSequence(entropy) would give it."""
    words = [_words(e) for e in entropies]
    states: list[np.ndarray | None] = [None] * len(words)
    for length in sorted({len(w) for w in words}):  # entropies of equal length, hashed together
        rows = [k for k, w in enumerate(words) if len(w) == length]
        for k, state in zip(rows, _seed_states(np.array([words[k] for k in rows], dtype=np.uint32)),
                            strict=True):
            states[k] = state
    return [np.random.Generator(np.random.PCG64(_Seeded(state))) for state in states]


def _words(entropy: tuple[int, ...]) -> list[int]:
    """An entropy tuple as SeedSequence reads it: each integer's 32-bit words, least significant first."""
    out = []
    for value in entropy:
        if value <= 0xFFFFFFFF:  # one word (zero too): most keys and indices
            out.append(value)
            continue
        while value:
            out.append(value & 0xFFFFFFFF)
            value >>= 32
    return out


# SeedSequence's constants (numpy/random/bit_generator.pyx, after M. E. O'Neill's seed_seq_fe)
_INIT_A, _MULT_A, _INIT_B, _MULT_B = 0x43B0D7E5, 0x931E8875, 0x8B51F9DD, 0x58F38DED
_MIX_L, _MIX_R, _POOL = np.uint32(0xCA01F9DD), np.uint32(0x4973F715), 4


def _seed_states(entropy: np.ndarray) -> np.ndarray:
    """``SeedSequence(e).generate_state(4, np.uint64)`` for each row e of ``entropy`` (uint32 words).

    The hash constants evolve the same way whatever the data, so each step of SeedSequence's mixing
    is one operation on a column of every row; uint32 arrays wrap modulo 2³² as its C code does.
    """
    rows, length = entropy.shape
    constant = [_INIT_A]

    def hashmix(value: np.ndarray) -> np.ndarray:
        value = value ^ np.uint32(constant[0])
        constant[0] = (constant[0] * _MULT_A) & 0xFFFFFFFF
        value = value * np.uint32(constant[0])
        return value ^ (value >> np.uint32(16))

    def mix(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        result = _MIX_L * x - _MIX_R * y
        return result ^ (result >> np.uint32(16))

    zero = np.zeros(rows, dtype=np.uint32)
    pool = [hashmix(entropy[:, i] if i < length else zero) for i in range(_POOL)]
    for source in range(_POOL):
        for target in range(_POOL):
            if source != target:
                pool[target] = mix(pool[target], hashmix(pool[source]))
    for source in range(_POOL, length):
        for target in range(_POOL):
            pool[target] = mix(pool[target], hashmix(entropy[:, source]))
    out, constant[0] = np.empty((rows, 2 * _POOL), dtype=np.uint32), _INIT_B
    for i in range(2 * _POOL):  # four uint64 words: the pool cycled twice, as uint32 pairs
        value = pool[i % _POOL] ^ np.uint32(constant[0])
        constant[0] = (constant[0] * _MULT_B) & 0xFFFFFFFF
        value = value * np.uint32(constant[0])
        out[:, i] = value ^ (value >> np.uint32(16))
    return out.astype("<u4").view("<u8").astype(np.uint64)


class _Seeded(ISeedSequence):
    """A seed sequence whose state is already computed: what PCG64 asks of SeedSequence(entropy)."""

    def __init__(self, state: np.ndarray) -> None:
        self.state = state

    def generate_state(self, n_words: int, dtype=np.uint32) -> np.ndarray:
        if n_words != _POOL or np.dtype(dtype) != np.uint64:
            raise NotImplementedError("only PCG64's four uint64 words are precomputed")
        return self.state  # read once by PCG64, which copies it into its own state


@functools.cache
def _check_batch() -> None:
    """Once per process: the batched seeding gives SeedSequence's generators (else a RuntimeError)."""
    probes = [(2015, _stream_key("clocks"), 3), (2**62 + 12345, _stream_key("noise"), 85), (0, 1)]
    for probe, made in zip(probes, _generators(probes), strict=True):
        reference = np.random.Generator(np.random.PCG64(np.random.SeedSequence(probe)))
        if made.bit_generator.state != reference.bit_generator.state:
            raise RuntimeError(f"numpy {np.__version__} seeds streams differently from dpmarket.rng.streams")


def replication_seeds(seed: int, count: int) -> list[int]:
    """Seeds of ``count`` independent replications derived from a run seed."""
    children = np.random.SeedSequence(int(seed)).spawn(count)
    return [int(c.generate_state(1, np.uint64)[0] >> np.uint64(1)) for c in children]


def in_blocks(draw: Callable[[int], np.ndarray], block: int, most: int | None = None) -> Iterator[float]:
    """The variates of ``draw(size)`` one at a time, as Python floats, drawn ``block`` at a time
    (or, given ``most``, ``block`` first and then twice as many each time, up to ``most``: a stream
    of which few variates may be used costs few).

    numpy draws a block's variates one after another with the same algorithm as one call per
    variate, so the sequence is exactly that of scalar calls (``exponential(scale)`` is
    ``scale * standard_exponential()`` too), whatever the blocks, at a fraction of the per-call cost.
    The iterator is itertools' all the way down: taking a variate runs no Python code.
    """
    sizes = repeat(block) if most is None else chain(_doubling(block, most), repeat(most))
    return chain.from_iterable(map(_TOLIST, map(draw, sizes)))


def _doubling(block: int, most: int) -> list[int]:
    """block, 2·block, 4·block, … below ``most``."""
    sizes = []
    while block < most:
        sizes.append(block)
        block *= 2
    return sizes
