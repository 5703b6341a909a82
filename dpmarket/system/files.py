"""Writing results the way users expect: whole or not at all, one writer at a time, readable as
their umask says, JSON that every parser reads, and a failure of the file system as one line.

``tempfile`` creates its files 0600 and its directories 0700 — right for secrets, wrong for
results a team shares on one server: everything dpmarket stages is given the mode a plain
``open``/``mkdir`` would have had under the process's umask before it is moved into place.

An output directory ``D`` is written by one process at a time: the writer holds an exclusive
``flock`` on ``.D.lock`` beside it (:func:`locked`), and a second writer is refused with one
line. The kernel releases the lock when its holder dies, however it dies, so whoever holds it
knows that any staging directory of ``D`` (``.D.XXXXXXXX``, :func:`staging_dir`) was left by a
process that is gone, and removes it (:func:`remove_stale_staging`).

Every file dpmarket writes where a user may have put something goes through one writer,
:func:`write_atomic` (or :func:`place` for a file staged whole): it writes through symbolic links —
the file a link points to is replaced, the link stays — and refuses, in one line and before any
work, a path naming what is neither a regular file nor nothing (a device, a FIFO, a directory, a
socket), which a rename would otherwise have replaced by a file. Run directories are written
through a link to a directory the same way (:func:`real`).
"""

from __future__ import annotations

import errno
import functools
import hashlib
import json
import math
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dpmarket.errors import OutputError, RunDirectoryError

try:
    import fcntl
except ImportError:  # not POSIX: no locking (documented in the README)
    fcntl = None  # type: ignore[assignment]

STAGING_NAME = r"[a-z0-9_]{8}"  # what tempfile.mkdtemp appends to a staging directory's prefix


@functools.lru_cache(maxsize=1)
def umask() -> int:
    """The process's umask (read once: reading it means setting it, briefly)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def digest(path: str | Path) -> str | None:
    """SHA-256 of the file's content (None if it cannot be read: its reader reports that).

    What caches of data built from a file are keyed on, so that a file rewritten at the same path is
    never taken for the one they were built from. Hashed once per version of the file: the digest is
    remembered against the file's identity and change times (device, inode, size, mtime and ctime in
    ns), which every write or replacement changes.
    """
    try:
        info = os.stat(path)
    except OSError:
        return None
    version = (os.fspath(path), info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
    known = _DIGESTS.get(version)
    if known is None:
        sha = hashlib.sha256()
        try:
            with open(path, "rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    sha.update(block)
        except OSError:
            return None
        known = _DIGESTS[version] = sha.hexdigest()
        while len(_DIGESTS) > 64:
            _DIGESTS.pop(next(iter(_DIGESTS)))
    return known


_DIGESTS: dict[tuple, str] = {}


def as_if_created(path: str | Path, directory: bool = False) -> None:
    """Give ``path`` the mode ``mkdir``/``open`` would have given it under the umask."""
    os.chmod(path, (0o777 if directory else 0o666) & ~umask())


def staging_dir(parent: Path, prefix: str, suffix: str = "") -> Path:
    """A new hidden directory in ``parent`` (to be renamed into place), mode as ``mkdir``'s."""
    path = Path(tempfile.mkdtemp(prefix=prefix, suffix=suffix, dir=parent))
    as_if_created(path, directory=True)
    return path


def remove_stale_staging(parent: Path, prefix: str, suffix: str = "") -> list[Path]:
    """Remove the staging directories ``prefix + 8 characters + suffix`` in ``parent``.

    Call it only while holding the lock of the directory they stage (:func:`locked`): every
    writer holds that lock as long as its staging directory exists, so these were left by a
    killed process. Returns what was removed.
    """
    pattern = re.compile(re.escape(prefix) + STAGING_NAME + re.escape(suffix))
    stale = [p for p in Path(parent).iterdir() if pattern.fullmatch(p.name) and p.is_dir()
             and not p.is_symlink()] if Path(parent).is_dir() else []
    for path in stale:
        shutil.rmtree(path)
    return stale


def sibling_prefix(target: Path) -> str:
    """``.NAME.``: how the hidden siblings of ``target`` (its lock, its staging directories) start.
    A name near the file system's limit of 255 bytes is shortened, with a hash of the whole."""
    name = Path(target).name
    raw = os.fsencode(name)
    if len(raw) > 200:
        name = f"{raw[:150].decode(errors='ignore')}~{hashlib.sha256(raw).hexdigest()[:16]}"
    return f".{name}."


def lock_path(target: Path) -> Path:
    """The lock file of output directory ``target``: hidden, beside it."""
    return target.parent / f"{sibling_prefix(target)}lock"


@contextmanager
def locked(target: Path) -> Iterator[None]:
    """Hold the exclusive lock of output directory ``target`` (creating its parent if needed);
    another process holding it is one :class:`RunDirectoryError`. The lock file is removed on
    release; a new holder checks that the file it locked is still the one on disk. The lock of a
    directory named through a symbolic link lies beside the directory the link points to, so two
    writers naming it differently still meet there."""
    target = real(target)
    if fcntl is None:
        yield
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    path = lock_path(target)
    fd = _acquire(path, target)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        try:
            os.unlink(path)
        finally:
            os.close(fd)


def _acquire(path: Path, target: Path) -> int:
    """An open descriptor of ``path`` holding its flock (see :func:`locked`)."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666 & ~umask())
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise RunDirectoryError(f"{target}: another dpmarket process (pid {holder}) is writing "
                                    f"there; wait for it to finish or choose another --out") from None
        try:
            if os.path.samestat(os.fstat(fd), os.stat(path)):
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)  # the holder removed it as we opened it: lock the new one


@contextmanager
def writing(target: Path) -> Iterator[None]:
    """Turn an ``OSError`` of the file system while writing ``target`` (full disk, quota, read-only,
    permission, name too long) into one :class:`RunDirectoryError` naming the path. A broken pipe
    is the reader's business (the CLI handles it) and passes through."""
    try:
        yield
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise RunDirectoryError(write_failure(Path(target), exc)) from None


def write_failure(target: Path, exc: OSError) -> str:
    """``target: cannot write: <reason>``, naming the file too when it lies elsewhere."""
    reason = exc.strerror or errno.errorcode.get(exc.errno or 0, "") or str(exc) or type(exc).__name__
    other = exc.filename
    where = "" if other is None or _inside(Path(os.fsdecode(other)), Path(target).parent) else f" ({other})"
    return f"{target}: cannot write{where}: {reason}"


def _inside(path: Path, directory: Path) -> bool:
    try:
        return path.resolve().is_relative_to(directory.resolve())
    except (OSError, ValueError):
        return False


def write_atomic(path: Path, write: Callable[[Path], None]) -> None:
    """Call ``write(temp)`` on a hidden file beside the file ``path`` names, then rename it over that
    file: a reader never sees half a file, and a failure leaves it as it was. ``path`` may be a
    symbolic link: the file it points to is replaced and the link kept (:func:`destination`);
    anything but a regular file or nothing is refused before ``write`` is called. A replaced file
    keeps its permissions, a new one has the umask's. A failing file system (full disk,
    permissions…) is one :class:`RunDirectoryError` naming ``path``."""
    with writing(path):
        target = destination(path)
        fd, temp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        os.close(fd)
        try:
            _take_mode(temp, target)
            write(Path(temp))
            os.replace(temp, target)
        finally:
            if os.path.exists(temp):
                os.unlink(temp)


def place(staged: Path, path: Path) -> None:
    """Move the finished file ``staged`` to ``path`` as :func:`write_atomic` writes it: through a
    symbolic link, never over what is not a regular file, keeping a replaced file's permissions;
    renamed when both lie on one file system, else copied beside the target and renamed."""
    with writing(path):
        target = destination(path)
        _take_mode(staged, target)
        try:
            os.replace(staged, target)
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                raise
            write_atomic(target, lambda temp: shutil.copyfile(staged, temp))


def destination(path: Path) -> Path:
    """The file that writing to ``path`` replaces: ``path``, or the end of the symbolic links it
    starts (the links stay as they are). What is there must be a regular file or nothing:
    replacing a device, a FIFO, a directory or a socket by a file would harm what is outside the
    results (as root, ``/dev/sda``), and writing into one may block for ever or send the results
    nowhere, so it is one :class:`OutputError` naming ``path``."""
    target = real(path)
    what = not_regular(target)
    if what is not None:
        via = "" if target == Path(path).absolute() else f" (through a link: {target})"
        raise OutputError(f"{path}: is {what}{via}, not a regular file: dpmarket replaces only regular "
                          f"files (it was left as it is); name a file")
    return target


def real(path: str | Path) -> Path:
    """``path`` with every symbolic link followed (absolute): where a write to it lands."""
    return Path(os.path.realpath(path))


def not_regular(path: str | Path) -> str | None:
    """What ``path`` names (following links) when that is neither a regular file nor nothing: "a
    directory", "a FIFO (named pipe)", "a character device", "a block device", "a socket"; None
    for a regular file or for nothing. Never opens it (opening a FIFO blocks until a writer
    comes)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return None
    if stat.S_ISREG(mode):
        return None
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
             (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISSOCK, "a socket"))
    return next((name for test, name in kinds if test(mode)), "a special file")


def _take_mode(temp: str | Path, target: Path) -> None:
    """Give ``temp`` the permissions of ``target`` if it exists (as ``>`` keeps them), else the
    umask's (``tempfile`` makes files 0600)."""
    try:
        os.chmod(temp, stat.S_IMODE(os.stat(target).st_mode))
    except FileNotFoundError:
        as_if_created(temp)


def first_difference(a: Any, b: Any, where: str = "") -> str | None:
    """The dotted path of the first difference between two JSON-like values (None if equal),
    as ``key = <b> there, <a> here``: ``a`` is what would be written, ``b`` what is on disk."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            found = first_difference(a.get(key), b.get(key), f"{where}.{key}" if where else key)
            if found is not None:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            found = first_difference(x, y, f"{where}.{i}")
            if found is not None:
                return found
        return None
    return None if a == b else f"{where or 'value'} = {b!r} there, {a!r} here"


def default_directory(base: Path, holds_these: Callable[[Path], bool]) -> Path:
    """Where a command writes when no --out is given: ``base``, or ``base-2``, ``base-3``, …

    The first of them that already holds these results (``holds_these``: the same command
    re-run, or resumed), else the first that is free (missing or empty): a default directory is
    never refused and never overwritten with other results.
    """
    with writing(base):
        return _first_default(base, holds_these)


def _first_default(base: Path, holds_these: Callable[[Path], bool]) -> Path:
    taken = [base, *sorted((p for p in base.parent.glob(f"{glob_escape(base.name)}-*")
                            if re.fullmatch(re.escape(base.name) + r"-[1-9][0-9]*", p.name)),
                           key=lambda p: int(p.name.rsplit("-", 1)[1]))]
    for path in taken:
        if _non_empty_dir(path) and holds_these(path):
            return path
    n = 1
    while True:
        path = base if n == 1 else base.with_name(f"{base.name}-{n}")
        if not path.exists() or (path.is_dir() and not any(path.iterdir())):
            return path
        n += 1


def glob_escape(name: str) -> str:
    """``name`` with glob's special characters taken literally."""
    return re.sub(r"([*?\[])", r"[\1]", name)


def _non_empty_dir(path: Path) -> bool:
    return path.is_dir() and any(path.iterdir())


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
