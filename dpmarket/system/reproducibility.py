"""What a seed reproduces, and where: the contract, the machine a result was made on, and the one
comparison that applies the contract to printed figures.

The contract (docs/reference/reproducibility.md):

- **Same machine, same package versions, same seed: the same bytes**, whatever the executor.
- **Another machine** (another CPU, so another BLAS kernel and other SIMD loops in numpy; another
  number of cores): **the same events** — every query, answer, collision, refusal and payment of
  the schedule — and every floating-point figure within :data:`RELATIVE` of the first machine's.

Why floats move at all: OpenBLAS chooses its kernels by CPU (``OPENBLAS_CORETYPE`` overrides the
choice) and numpy chooses its vector loops (``exp``, ``log``, sums) by CPU features, so a dot
product adds its terms in another order on another processor and its last bits differ (one or
two units in the last place, 10⁻¹⁶ relative). Algorithm 1 is a contraction towards θ*, so such
differences do not grow through the training; they grow only where a figure is a small
difference of large ones (ψ = f(θ)/f(θ*) − 1 when ψ is small) or where an iterative solver stops
at a tolerance. :data:`RELATIVE` is the largest relative difference measured between CPU kernels
on every bundled scenario and command (``benchmarks/bench_reproducibility.py``), with a margin.

Everything the schedule decides — who is asked when, what the channel loses, who refuses — comes
from the random streams and integer ledgers, never from a floating-point sum, so events agree
exactly. Decisions that do read a float (a market's seller choosing its ε, a ranking of owners,
a diagnostic's threshold) are made robust to last-bit noise where they are made (each says how).
"""

from __future__ import annotations

import copy
import csv
import functools
import io
import math
import platform as _platform
import re
import sys

# The contract's tolerance for floating-point figures across machines:
#     |a − b| ≤ RELATIVE·max(|a|, |b|) + ABSOLUTE,
# or one unit in the last digit a figure is printed with, whichever is larger. Measured (benchmarks/
# bench_reproducibility.py: 20 commands on 8 emulated machines, docs/reference/reproducibility.md): the
# largest relative difference is 4.5·10⁻¹⁰, the ε spent under dp-accounting's PLD with Laplace answers,
# whose ε at a fixed noise differs by up to 1.8·10⁻⁹ between numpy's vector loops; every other figure
# within 3.2·10⁻¹⁰ (the audit's scores, near 0). RELATIVE leaves a factor 5 over the PLD's own.
# ABSOLUTE is for figures that are small differences of order-one quantities: ψ = f(θ)/f(θ*) − 1 carries
# the last bits of f/f* (10⁻¹⁵), so a ψ of 10⁻⁵ may differ by 10⁻¹⁰ relative and one of 10⁻²⁷ (a floor
# the law rounds to nothing) by a factor.
RELATIVE = 1e-8
ABSOLUTE = 1e-12

# Wall-clock figures: the only values allowed to differ between two runs of the same command on one
# machine (console text ``1.07 s wall`` and ``in 3.2 s``; ``"wall_seconds": 1.07`` in JSON).
WALL_CLOCK = [
    (re.compile(r"\b\d+(?:\.\d+)? s wall\b"), "<wall> s wall"),
    (re.compile(r'"wall_seconds": \d+(?:\.\d+)?'), '"wall_seconds": <wall>'),
    (re.compile(r"\bin \d+(?:\.\d+)? s\b"), "in <wall> s"),
]

# A number as printed by Python, numpy, pandas and the csv module: an optional sign, digits with an
# optional fraction, an optional exponent; or a non-finite value. A number glued to a word's letters
# ("seed2015", "x1.5") is still a number: both sides split the same way.
NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?|[-+]?\b(?:inf|nan)\b")


def difference(a: float, b: float) -> float:
    """a − b, or 0.0 where that is within :data:`RELATIVE` of max(|a|, |b|): the difference of two figures
    equal in exact arithmetic (payments that add up to the value they share, by a Shapley value's
    efficiency) is a few units in their last place, of either sign by CPU, and a sign decides a warning."""
    gap = a - b
    return 0.0 if abs(gap) <= RELATIVE * max(abs(a), abs(b)) else gap


def reaches(value: float, threshold: float) -> bool:
    """value ≥ threshold, counting a value within :data:`RELATIVE` below it as there: a figure a formula
    puts exactly on a threshold (a stability number of 2 × learner.auto_stability when that bound
    sets ρ) is computed a unit in the last place to either side, by CPU."""
    return value >= threshold - RELATIVE * abs(threshold)


def exceeds(value: float, threshold: float) -> bool:
    """value > threshold by more than :data:`RELATIVE` of it (see :func:`reaches`)."""
    return value > threshold + RELATIVE * abs(threshold)


@functools.cache
def machine() -> dict:
    """The numeric libraries a result was made with, for ``summary.json`` (``machine``): dpmarket, Python,
    numpy, scipy, and the BLAS each calls (numpy's and scipy's wheels ship their own OpenBLAS) — its
    library, version and the kernel it chose for this CPU (``core_type``; ``OPENBLAS_CORETYPE``
    overrides it), as threadpoolctl reports them.

    scipy's BLAS is loaded first (scipy.linalg), so the record does not depend on what the run happened
    to import. The number of BLAS threads is left out: pool workers run with one thread and the parent
    with all cores, and the same seed gives the same bytes on either."""
    import numpy
    import scipy
    import scipy.linalg  # noqa: F401 — loads scipy's BLAS, which threadpoolctl lists only once loaded
    from threadpoolctl import threadpool_info

    from dpmarket._version import __version__

    blas = [m for m in threadpool_info() if m.get("user_api") == "blas"]
    return {"dpmarket": __version__, "python": _platform.python_version(), "numpy": numpy.__version__,
            "scipy": scipy.__version__, "blas": _blas(blas, "numpy"), "scipy_blas": _blas(blas, "scipy"),
            "cpu": _platform.machine() or sys.platform}


def _blas(libraries: list[dict], package: str) -> dict:
    """The BLAS ``package`` calls, of threadpoolctl's ``libraries``: the one shipped in its wheel
    (``numpy.libs``, ``scipy.libs``), else the first (a shared BLAS, as conda installs one)."""
    own = [m for m in libraries if f"{package}.libs" in str(m.get("filepath", ""))]
    found = (own or libraries or [{}])[0]
    return {"library": found.get("internal_api", "unknown"), "version": found.get("version") or "unknown",
            "core_type": found.get("architecture") or "unknown"}


def statement() -> dict:
    """The ``reproducibility`` key of every ``summary.json``: what the seed reproduces on this machine
    and on another, and the machine this file was made on (:func:`machine`)."""
    return {"same_machine": "the same bytes for the same seed and package versions, whatever the executor "
                            "(the wall time aside)",
            "other_machines": f"the same events; every other figure within {RELATIVE:g} relative "
                              f"+ {ABSOLUTE:g} absolute",
            "machine": copy.deepcopy(machine())}


def _unit(token: str) -> float:
    """One unit in the last digit ``token`` is printed with: 1e-5 for ``0.01757``, 1e-8 for
    ``1.234e-05``, 0 for an integer (integers are compared exactly)."""
    mantissa, _, exponent = token.lower().partition("e")
    if "." not in mantissa and not exponent:
        return 0.0
    decimals = len(mantissa.partition(".")[2])
    return 10.0 ** (int(exponent or 0) - decimals)


def without_wall_clock(text: str) -> str:
    """``text`` with every wall-clock figure replaced by ``<wall>`` (:data:`WALL_CLOCK`)."""
    for pattern, replacement in WALL_CLOCK:
        text = pattern.sub(replacement, text)
    return text


def within(a: float, b: float, relative: float = RELATIVE, absolute: float = ABSOLUTE) -> bool:
    """Whether two floats agree under the contract: |a − b| ≤ relative·max(|a|, |b|) + absolute
    (equal non-finite values agree; NaN agrees with NaN, as a missing figure with a missing one)."""
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= relative * max(abs(a), abs(b)) + absolute


def agree(expected: str, actual: str, relative: float = RELATIVE) -> bool:
    """Whether two printed numbers agree under the contract: integers exactly (they count events);
    other figures :func:`within` the contract, or within one unit of the last digit either is
    printed with (a figure at a rounding boundary may round either way on another machine)."""
    if expected == actual:
        return True
    unit = max(_unit(expected), _unit(actual))
    if unit == 0.0:
        return False  # two integers: exact
    a, b = float(expected), float(actual)
    slack = 1e-12 * unit  # the decimal text's own rounding when parsed
    return within(a, b, relative) or (math.isfinite(a - b) and abs(a - b) <= unit + slack)


def differences(expected: str, actual: str, relative: float = RELATIVE, limit: int = 5) -> list[str]:
    """What keeps ``actual`` from reproducing ``expected`` under the contract: the text between numbers
    must be identical and each pair of numbers must :func:`agree`; wall-clock figures are not compared.
    Returns at most ``limit`` descriptions (line numbers 1-based); an empty list means the two agree."""
    expected, actual = without_wall_clock(expected), without_wall_clock(actual)
    found: list[str] = []
    e_lines, a_lines = expected.splitlines(), actual.splitlines()
    if len(e_lines) != len(a_lines):
        found.append(f"{len(e_lines)} lines expected, {len(a_lines)} printed")
    for number, (e, a) in enumerate(zip(e_lines, a_lines, strict=False), start=1):
        problem = line_difference(e, a, relative)
        if problem:
            found.append(f"line {number}: {problem}")
        if len(found) >= limit:
            break
    return found


# The columns of events.csv that are figures rather than the schedule: the ε an answer spent (exact
# arithmetic under basic composition; dp-accounting's RDP and PLD curves are vector sums) and a market
# in time's prices and payments (read from the forecast). Every other column is compared exactly.
EVENT_FIGURES = ("epsilon_spent", "amount")


def event_differences(expected: str, actual: str, limit: int = 5) -> list[str]:
    """What keeps the events.csv ``actual`` from reproducing ``expected``: the same rows in the same
    order, each with the same time, kind, owner, iteration, channel and detail, character for character;
    the columns of :data:`EVENT_FIGURES` within the contract (:func:`agree`)."""
    e_rows, a_rows = list(csv.reader(io.StringIO(expected))), list(csv.reader(io.StringIO(actual)))
    found = [] if len(e_rows) == len(a_rows) else [f"{len(e_rows)} rows expected, {len(a_rows)} written"]
    header = e_rows[0] if e_rows else []
    figures = {j for j, name in enumerate(header) if name in EVENT_FIGURES}
    for number, (e, a) in enumerate(zip(e_rows, a_rows, strict=False), start=1):
        same = len(e) == len(a) and all(x == y or (j in figures and agree(x, y)) for j, (x, y)
                                        in enumerate(zip(e, a, strict=True)))
        if not same:
            found.append(f"row {number}: {','.join(e)!r} != {','.join(a)!r}")
        if len(found) >= limit:
            break
    return found


def words(text: str) -> list[str]:
    """The text between the numbers of ``text``, without its layout: a right-aligned column holding
    −0.0 on one machine and 0.0 on another pads it with one space less."""
    return ["".join(piece.split()) for piece in NUMBER.split(text)]


def line_difference(expected: str, actual: str, relative: float = RELATIVE) -> str | None:
    """Why the line ``actual`` does not reproduce ``expected`` under the contract, or None if it does."""
    if expected == actual:
        return None
    if words(expected) != words(actual):
        return f"{expected!r} != {actual!r}"
    for e, a in zip(NUMBER.findall(expected), NUMBER.findall(actual), strict=True):
        if not agree(e, a, relative):
            return f"{e} != {a} (beyond the contract) in {expected!r}"
    return None
