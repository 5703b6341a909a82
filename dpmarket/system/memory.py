"""Sizes that cannot fit: the machine's memory, and what a refusal says about it.

A scenario can ask for arrays no machine holds (``data.records = 1e12``, ``data.features = 1e6``,
a billion channels or replications, N × N arrays on 10⁵ owners). numpy would fail deep inside with
a MemoryError traceback — or, worse, the system would start swapping. Each place that allocates in
proportion to a user's size estimates, before any work, a lower bound of the bytes it needs, and
:func:`shortfall` says whether that fits: a refusal then names the key, its value and the size it
would need against the memory there is. The bound is a lower one (the arrays the stage cannot do
without), so nothing that fits is refused.

``DPMARKET_MEMORY`` (bytes, or with a unit: ``512M``, ``8G``) replaces the machine's memory, for a
shared server's quota or for tests; a value it cannot read is an error
(:mod:`dpmarket.system.environment`).
"""

from __future__ import annotations

import os

from dpmarket.system import environment

VARIABLE = environment.MEMORY


def available() -> int:
    """The memory a run may use, in bytes: ``DPMARKET_MEMORY`` if set, else the machine's physical
    memory."""
    given = environment.read(VARIABLE)
    if given is not None:
        return given
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not POSIX: no bound
        return 2**62


def size(count: float) -> str:
    """Bytes for a reader: ``87.3 TiB``, ``512 MiB``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if count < 1024 or unit == "PiB":
            return f"{count:.3g} {unit}"
        count /= 1024
    return f"{count:.3g} PiB"


def shortfall(needed: float, what: str) -> str | None:
    """None when ``needed`` bytes fit in :func:`available`; else the reason a refusal gives,
    ``"<what> would need at least 87.3 TiB of memory; this machine has 23.4 GiB"``."""
    have = available()
    if needed <= have:
        return None
    where = f"{VARIABLE} allows" if environment.read(VARIABLE) is not None else "this machine has"
    return f"{what} would need at least {size(needed)} of memory; {where} {size(have)}"
