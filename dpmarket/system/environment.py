"""The environment variables dpmarket reads: each one parsed in one place, a bad value refused in one line.

A variable changes what a command does without a word on its command line, so a value dpmarket cannot
read must neither be ignored (``DPMARKET_MEMORY=abc``, ``nan`` or ``1X`` left the machine's memory in
force without a word) nor end in a traceback (``DPMARKET_MEMORY=inf`` or ``1e400`` was an OverflowError).
:data:`VARIABLES` lists every variable the package reads, with its parser and what it means; :func:`read`
is the only place that looks one up. A value that cannot be read is an
:class:`~dpmarket.errors.EnvironmentVariableError` naming the variable and the value
(``environment: DPMARKET_MEMORY = 'inf': ...``), and the commands call :func:`check` before any work,
so the error comes first whichever variable it is. Unset or empty means the default.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dpmarket.errors import EnvironmentVariableError, KernelError

MEMORY, KERNEL, FORECAST_CACHE = "DPMARKET_MEMORY", "DPMARKET_KERNEL", "DPMARKET_FORECAST_CACHE"
KERNELS = ("auto", "numpy", "numba")
UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40, "P": 2**50}
_SIZE = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:E([+-]?[0-9]+))?\s*([KMGTP]?)(?:I?B)?", re.ASCII)


@dataclass(frozen=True)
class Variable:
    """One environment variable: how its text becomes a value (``parse`` raises ValueError with the
    reason), what it does, and the error a value it cannot read raises."""

    name: str
    parse: Callable[[str], Any]
    means: str
    error: type[EnvironmentVariableError] = EnvironmentVariableError


def memory_size(text: str) -> int:
    """Bytes from ``512M``, ``8G``, ``1.5T``, ``1e9`` (binary units K, M, G, T, P; a trailing ``B`` or
    ``iB`` allowed): a finite number of at least one byte."""
    match = _SIZE.fullmatch(text.upper())
    if match is None:
        try:
            number = float(text)  # inf, nan, a negative number: what is wrong with it
        except ValueError:
            raise ValueError("expected a size in bytes, or a number with a unit K, M, G, T or P "
                             "(512M, 8G)") from None
        raise ValueError("is not a number" if math.isnan(number) else "is not a finite size"
                         if math.isinf(number) else "must be at least one byte")
    number, exponent, unit = match.groups()
    try:
        value = float(number) * 10.0 ** int(exponent or 0) * UNITS[unit]
    except OverflowError:
        value = math.inf
    if not math.isfinite(value):
        raise ValueError("is not a finite size")
    if value < 1:
        raise ValueError("must be at least one byte")
    return int(value)


def kernel(text: str) -> str:
    """``auto``, ``numpy`` or ``numba`` (any case)."""
    word = text.lower()
    if word not in KERNELS:
        raise ValueError(f"expected one of {', '.join(KERNELS)}")
    return word


def directory(text: str) -> Path:
    """A directory, or a path where one can be made (not an existing file)."""
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise ValueError("is not a directory")
    return path


VARIABLES = {v.name: v for v in (
    Variable(MEMORY, memory_size, "the memory a command may use, instead of the machine's (512M, 8G)"),
    Variable(KERNEL, kernel, "which kernel reads records: auto (default), numpy or numba", KernelError),
    Variable(FORECAST_CACHE, directory, "where calibrated forecasts are cached (default outputs/forecasts)"),
)}


def read(name: str) -> Any:
    """The value of variable ``name`` (one of :data:`VARIABLES`), parsed; None when unset or empty.
    Read at each call, so that a test or a notebook may change it."""
    text = os.environ.get(name, "")
    if not text.strip():
        return None
    try:
        return VARIABLES[name].parse(text.strip())
    except ValueError as exc:
        raise VARIABLES[name].error(f"environment: {name} = {text!r}: {exc}") from None


def check() -> None:
    """Read every variable: a value that cannot be read ends a command before it does anything."""
    for name in VARIABLES:
        read(name)
