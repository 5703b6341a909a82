"""Independent random streams, all derived from one run seed.

One ``SeedSequence`` per run is split by *name* so that adding a stream, or drawing more from
one stream, never changes the draws of another: the channel can change without touching the
DP noise, and two compensation policies can be compared on common random numbers.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Iterator

import numpy as np

STREAMS = ("data", "sizes", "selection", "clocks", "channel", "availability", "noise", "market", "arrivals")


@functools.cache  # a handful of names; hashing one costs a tenth of a stream
def _stream_key(name: str) -> int:
    """A stable 32-bit integer for a stream name (Python's hash() is salted per process)."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "little")


def stream(seed: int, name: str, *index: int) -> np.random.Generator:
    """The generator of stream ``name`` (optionally sub-indexed, e.g. per owner) for ``seed``."""
    if name not in STREAMS:
        raise ValueError(f"Unknown random stream {name!r}; known: {', '.join(STREAMS)}")
    entropy = (int(seed), _stream_key(name), *map(int, index))
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(entropy)))


def replication_seeds(seed: int, count: int) -> list[int]:
    """Seeds of ``count`` independent replications derived from a run seed."""
    children = np.random.SeedSequence(int(seed)).spawn(count)
    return [int(c.generate_state(1, np.uint64)[0] >> np.uint64(1)) for c in children]


def in_blocks(draw: Callable[[int], np.ndarray], block: int) -> Iterator[float]:
    """The variates of ``draw(size)`` one at a time, as Python floats, drawn ``block`` at a time.

    numpy draws a block's variates one after another with the same algorithm as one call per
    variate, so the sequence is exactly that of scalar calls (``exponential(scale)`` is
    ``scale * standard_exponential()`` too), at a fraction of the per-call cost.
    """
    while True:
        yield from draw(block).tolist()
