"""The project's exceptions: every error dpmarket raises on purpose derives from DPMarketError.

The CLI turns a DPMarketError into one line on stderr and exit status 2; anything else is a
bug and keeps its traceback. Errors about a value are also the builtin a Python user catches for
one, as numpy's and pandas' are: a :class:`ScenarioError` is a ``ValueError``; the notebook API's
argument errors are :class:`ArgumentTypeError` (a ``TypeError``) or :class:`ArgumentValueError`
(a ``ValueError``); a run directory that does not exist is a ``FileNotFoundError`` too.
"""

from __future__ import annotations

import reprlib
import sys
from typing import Any

# Characters that end a line for str.splitlines() (and for terminals or log readers)
_LINE_BREAKS = {**{c: f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"
                   for c in (0x0B, 0x0C, 0x1C, 0x1D, 0x1E, 0x85, 0x2028, 0x2029)},
                0x0A: "\\n", 0x0D: "\\r"}


def one_line(text: str) -> str:
    """``text`` with every line break escaped (``\\n``, ``\\x1e``…): a message that quotes a user's
    key, value or path stays one line whatever they contain."""
    return text.translate(_LINE_BREAKS)


def warn(text: str) -> None:
    """One warning line on stderr: something was repaired or skipped, and the command goes on."""
    print(f"dpmarket: warning: {one_line(text)}", file=sys.stderr)


class DPMarketError(Exception):
    """Base class of all errors a user can cause (bad scenario, missing file, bad value)."""


class ScenarioError(DPMarketError, ValueError):
    """A scenario file, or an override, that cannot be turned into a valid scenario (a ValueError).

    Carries the file, the dotted key path and the offending value so that the message names
    all three, as in ``ny.toml: data.owners = -3: must be >= 1``.
    """

    def __init__(self, source: str, key: str, value: Any, reason: str) -> None:
        self.source, self.key, self.value, self.reason = source, key, value, reason
        where = f"{source}: {key}" if key else source
        shown = "" if value is _MISSING else f" = {value!r}"
        super().__init__(f"{where}{shown}: {reason}")

    def __reduce__(self):
        # Rebuilt from its fields, so that it crosses a process boundary (experiment workers).
        return (type(self), (self.source, self.key, self.value, self.reason))


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"

    def __reduce__(self) -> str:
        return "_MISSING"  # unpickles as the one sentinel, so ``value is _MISSING`` still holds


_MISSING: Any = _Missing()


class ArgumentError(DPMarketError):
    """An argument the notebook API (``dpmarket.run``, ``replicate``, ``sweep``, ``market``, ``load``)
    cannot take, checked at its boundary before any work: the message names the function, the
    argument and its value, as in ``dpmarket.run(): seed = 'abc': must be an integer >= 0``."""

    def __init__(self, function: str, argument: str, value: Any, reason: str) -> None:
        self.function, self.argument, self.value, self.reason = function, argument, value, reason
        super().__init__(one_line(f"dpmarket.{function}(): {argument} = {_SHORT.repr(value)}: {reason}"))

    def __reduce__(self):
        return (type(self), (self.function, self.argument, self.value, self.reason))


class ArgumentTypeError(ArgumentError, TypeError):
    """An API argument of a type the function does not take (also a ``TypeError``)."""


class ArgumentValueError(ArgumentError, ValueError):
    """An API argument of the right type but a value the function cannot take, or that cannot fit
    (also a ``ValueError``)."""


_SHORT = reprlib.Repr()  # a value quoted in a message: long strings, lists and mappings shortened
_SHORT.maxstring, _SHORT.maxother, _SHORT.maxlist, _SHORT.maxdict = 60, 60, 6, 4


class RunDirectoryError(DPMarketError):
    """An output directory that cannot be used (exists and is not empty, cannot be created)."""


class OutputError(DPMarketError):
    """An output that cannot go where it was sent: a path naming a device, a FIFO, a directory or a
    socket where a file is written (it is left as it is), or a standard output that fails (a full
    disk, ``/dev/full``)."""


class MissingRunError(RunDirectoryError, FileNotFoundError):
    """A run directory to read that does not exist or is not a directory (a ``FileNotFoundError``)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)

    def __str__(self) -> str:
        return str(self.args[0])

    def __reduce__(self):
        return (type(self), (self.args[0],))


class BudgetExhaustedError(DPMarketError):
    """Raised by the accountant when a charge would take an owner beyond its budget."""

    def __init__(self, owner: int, spent: float, charge: float, budget: float) -> None:
        self.owner, self.spent, self.charge, self.budget = owner, spent, charge, budget
        super().__init__(
            f"owner {owner}: charge {charge!r} on top of {spent!r} would exceed budget {budget!r}"
        )

    def __reduce__(self):
        return (type(self), (self.owner, self.spent, self.charge, self.budget))


class DataError(DPMarketError):
    """A data file that cannot be turned into owners as the scenario asks.

    The message names the file, the column and how many rows are affected, as in
    ``x.csv: column 'los': 12 non-numeric values (rows 3, 17, …)``.
    """

    def __init__(self, path: str, column: str | None, reason: str) -> None:
        self.path, self.column, self.reason = path, column, reason
        where = f"{path}: column {column!r}" if column else path
        super().__init__(f"{where}: {reason}")

    def __reduce__(self):
        return (type(self), (self.path, self.column, self.reason))


class MarketError(DPMarketError):
    """A market that cannot proceed: nobody takes part, or no forecast constants are available."""


class CalibrationError(DPMarketError, ValueError):
    """No noise within the search range lets an owner's m answers compose to its (ε, δ); the caller
    names the scenario key (``privacy.delta``, ``privacy.epsilon``) in the error it raises."""


class DeltaError(CalibrationError):
    """A δ no calibration can honour: 0 for Gaussian answers, or so large (δ ≥ 1/n_i) that the
    guarantee says nothing (a mechanism that publishes a record outright with probability δ meets
    it); the caller names ``privacy.delta`` (or the owner's own δ)."""


class UsageError(DPMarketError):
    """Command-line options that do not go together."""


class AuditError(DPMarketError):
    """An audit that cannot be run as asked (no such participant, too few runs, a market in time)."""


class EnvironmentVariableError(DPMarketError):
    """An environment variable dpmarket reads (``DPMARKET_MEMORY``, ``DPMARKET_KERNEL``…) set to a value
    it cannot use; the message names the variable and the value."""


class KernelError(EnvironmentVariableError):
    """``DPMARKET_KERNEL`` names no kernel, or names numba where it is not installed."""


class ExecutorError(DPMarketError):
    """Tasks that could not run (a worker died, a cluster is unreachable); finished ones are saved."""


class ExperimentDirectoryError(RunDirectoryError):
    """The output directory holds another experiment (or something that is not one)."""


class CorruptTaskError(DPMarketError):
    """A saved replication that does not belong to the experiment it sits in."""


class TimelineError(DPMarketError):
    """A run directory or a selection the timeline cannot work with."""
