"""Counts a user gives — owners, records, iterations, runs, replications, samples — bounded before any work.

A count a user types flows into numpy, and there it can fail late or never end: ``learner.iterations =
10**40`` was numpy's casting error, ``audit --method one-run --runs 10**18`` its "array is too big",
``audit --runs 10**12`` derived seeds silently for hours before running out of memory, and
``dpmarket.market(..., replications=10**9)`` the same. Every place that takes such a count checks it
here first, and a refusal names the count, its value and its bound with the reason. Two bounds apply
to every count:

- :data:`EXACT`: numpy holds counts (array lengths, indices, update numbers) in 64-bit integers and
  computes with them in 64-bit floats; beyond 2⁵³ neither holds every integer. The scenario's integer
  keys are bounded by it in the schema, the commands' and the API's counts by :func:`refusal`.
- memory: what the count makes a stage hold at once, ``count × bytes_each`` (a lower bound: the
  arrays or records it cannot do without), against :func:`dpmarket.system.memory.available`; the
  scenario's own sizes are :mod:`dpmarket.scenario.sizes`' terms.

A count that merely takes long (``learner.iterations = 10**12``) is not refused: its time depends on
the machine, and the progress line shows how long is left.
"""

from __future__ import annotations

from dpmarket.system import memory

EXACT = 2**53  # the largest count numpy holds exactly both as an int64 and as a float64
BEYOND_EXACT = (f"at most 2^53 = {EXACT:,}: numpy holds counts as 64-bit integers and computes with them "
                "as 64-bit floats, which hold no larger count exactly")


def exact(count: int) -> str | None:
    """Why ``count`` is more than numpy holds exactly, or None."""
    return BEYOND_EXACT if count > EXACT else None


def refusal(count: int, bytes_each: float, what: str) -> str | None:
    """Why ``count`` items, each holding at least ``bytes_each`` bytes at once, cannot be honoured —
    beyond :data:`EXACT`, or ``what`` would need more memory than there is — or None when they can."""
    return exact(count) or memory.shortfall(count * bytes_each, what)
