"""Writing results the way users expect: whole or not at all, readable as their umask says, and
JSON that every parser reads.

``tempfile`` creates its files 0600 and its directories 0700 — right for secrets, wrong for
results a team shares on one server: everything dpmarket stages is given the mode a plain
``open``/``mkdir`` would have had under the process's umask before it is moved into place.
"""

from __future__ import annotations

import functools
import json
import math
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any


@functools.lru_cache(maxsize=1)
def umask() -> int:
    """The process's umask (read once: reading it means setting it, briefly)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def as_if_created(path: str | Path, directory: bool = False) -> None:
    """Give ``path`` the mode ``mkdir``/``open`` would have given it under the umask."""
    os.chmod(path, (0o777 if directory else 0o666) & ~umask())


def staging_dir(parent: Path, prefix: str, suffix: str = "") -> Path:
    """A new hidden directory in ``parent`` (to be renamed into place), mode as ``mkdir``'s."""
    path = Path(tempfile.mkdtemp(prefix=prefix, suffix=suffix, dir=parent))
    as_if_created(path, directory=True)
    return path


def write_atomic(path: Path, write: Callable[[Path], None]) -> None:
    """Call ``write(temp)`` on a hidden sibling of ``path``, then rename it over ``path``: a
    reader never sees half a file, and a failure leaves ``path`` as it was."""
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        as_if_created(temp)
        write(Path(temp))
        os.replace(temp, path)
    finally:
        if os.path.exists(temp):
            os.unlink(temp)


def strict(value: Any) -> Any:
    """``value`` with every non-finite float (NaN, ±inf) replaced by None, recursively: JSON has
    no NaN, and ``JSON.parse`` rejects Python's ``NaN`` token."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: strict(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [strict(v) for v in value]
    return value


def dumps(value: Any, **options: Any) -> str:
    """Strict JSON text of ``value`` (non-finite numbers as null)."""
    return json.dumps(strict(value), allow_nan=False, **options)
