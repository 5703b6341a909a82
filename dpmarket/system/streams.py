"""A command's standard output and error: readable on any terminal, and a failure of either in one line.

dpmarket writes ε, θ, ψ, ×, ≤ and their like. A terminal or a pipe whose encoding is not a Unicode
one (``PYTHONIOENCODING=ascii``, a C locale on an old system) cannot encode them, and Python's
default for standard output is to raise. :func:`prepare` gives such a stream an error handler that
spells them in ASCII instead — ``epsilon``, ``theta``, ``psi``, ``x``, ``<=``, ``^-2`` — and writes
any other character as a ``\\uXXXX`` escape (exact, and valid in the TOML and JSON dpmarket prints).
A UTF-8 stream is left as it is.

What a command prints goes through :func:`say` and :func:`flush`: a standard output that fails
(``> /dev/full``, a full disk, a closed descriptor) becomes one :class:`~dpmarket.errors.OutputError`
instead of a traceback; a reader that leaves early (``| head``) is a ``BrokenPipeError`` the command
line ends quietly. Either way what is still buffered is discarded (:func:`abandon`), so that the
interpreter's last flush does not fail again on its way out.
"""

from __future__ import annotations

import codecs
import errno
import os
import sys
import unicodedata
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from dpmarket.errors import OutputError

HANDLER = "dpmarket.ascii"  # the name of the error handler :func:`prepare` installs
SPELLED = {
    "ε": "epsilon", "µ": "mu", "Σ": "Sum", "−": "-", "–": "-", "—": "--", "…": "...", "·": "*", "×": "x",
    "÷": "/", "±": "+/-", "∓": "-/+", "≤": "<=", "≥": ">=", "≠": "!=", "≈": "~", "≪": "<<", "∝": "~",
    "→": "->", "←": "<-", "↔": "<->", "√": "sqrt", "∞": "inf", "‖": "||", "∇": "grad", "∂": "d",
    "∈": " in ", "∅": "{}", "½": "1/2", "¼": "1/4", "§": "S", "″": "''", "‴": "'''", "⌊": "floor(",
    "⌋": ")", "\u0302": "_hat", "\u0304": "_bar", "\u0303": "_tilde", "\u2019": "'", "\u2018": "'",
    "\u201c": '"', "\u201d": '"', "\u00a0": " ",
}
SUPERSCRIPTS = dict(zip("⁰¹²³⁴⁵⁶⁷⁸⁹⁻⁺ᵀᵏᵗ", "0123456789-+Tkt", strict=True))
SUBSCRIPTS = dict(zip("₀₁₂₃₄₅₆₇₈₉₊₋", "0123456789+-", strict=True))
UNICODE = {"utf-8", "utf-16", "utf-32", "utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be", "utf-8-sig"}


def ascii_text(text: str) -> str:
    """``text`` in ASCII: dpmarket's symbols spelled (:data:`SPELLED`, Greek letters by name, a run
    of superscripts as ``^`` and the run, of subscripts as ``_`` and the run), any other character
    as a ``\\uXXXX`` escape."""
    out, mode = [], ""
    for char in text:
        kind = "^" if char in SUPERSCRIPTS else "_" if char in SUBSCRIPTS else ""
        if kind and kind != mode:
            out.append(kind)
        mode = kind
        out.append(SUPERSCRIPTS.get(char) or SUBSCRIPTS.get(char) or _spelled(char))
    return "".join(out)


def _spelled(char: str) -> str:
    """One character in ASCII: itself, its spelling, a Greek letter's name, the spelling of its parts
    (``ᾱ``: ``alpha_bar``), or its escape."""
    if char.isascii():
        return char
    if char in SPELLED:
        return SPELLED[char]
    greek = _greek(char)
    if greek:
        return greek
    parts = unicodedata.normalize("NFD", char)
    if len(parts) > 1 and all(c.isascii() or c in SPELLED or _greek(c) for c in parts):
        return "".join(_spelled(c) for c in parts)
    code = ord(char)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def _greek(char: str) -> str:
    """A Greek letter's name (``theta``, ``Xi``), or "" for any other character."""
    words = unicodedata.name(char, "").replace("LAMDA", "LAMBDA").split()
    if words[:1] != ["GREEK"] or words[2:3] != ["LETTER"] or len(words) != 4:
        return ""
    return words[3].lower() if words[1] == "SMALL" else words[3].capitalize()


def _handle(error: UnicodeError) -> tuple[str, int]:
    """The codec error handler: what a stream could not encode, in ASCII."""
    if not isinstance(error, UnicodeEncodeError):
        raise error
    return ascii_text(error.object[error.start:error.end]), error.end


codecs.register_error(HANDLER, _handle)


def prepare(streams: tuple[TextIO, ...] | None = None) -> None:
    """Let standard output and error (or ``streams``) write any text: a stream whose encoding is not
    a Unicode one gets the ASCII spelling of :func:`ascii_text` for what it cannot encode."""
    for stream in (sys.stdout, sys.stderr) if streams is None else streams:
        encoding = getattr(stream, "encoding", None) or "utf-8"
        try:
            unicode = codecs.lookup(encoding).name in UNICODE
        except LookupError:
            unicode = False
        if not unicode and hasattr(stream, "reconfigure"):
            stream.reconfigure(errors=HANDLER)


def say(text: str, end: str = "\n") -> None:
    """Print ``text`` and ``end`` on standard output; a failing output is one OutputError."""
    with _guarded():
        _stdout().write(f"{text}{end}")


def flush() -> None:
    """Flush standard output (all a command printed is then out); a failing output is one OutputError."""
    with _guarded():
        _stdout().flush()


def _stdout() -> TextIO:
    """Standard output, or an OutputError when the command was started with it closed (``>&-``)."""
    if sys.stdout is None:
        raise OutputError("standard output: cannot write: it is closed")
    return sys.stdout


@contextmanager
def _guarded() -> Iterator[None]:
    """Turn an ``OSError`` of standard output into an OutputError (a broken pipe passes, as itself),
    discarding what is still buffered in both cases."""
    try:
        yield
    except BrokenPipeError:
        abandon()
        raise
    except OSError as error:
        abandon()
        reason = error.strerror or errno.errorcode.get(error.errno or 0, "") or type(error).__name__
        raise OutputError(f"standard output: cannot write: {reason}") from None


def abandon() -> None:
    """Point standard output's descriptor at the null device: what is still buffered then goes
    nowhere instead of failing again when the interpreter flushes it on exit."""
    try:
        descriptor = sys.stdout.fileno()
    except (OSError, ValueError, AttributeError):  # not a file (a test's capture): nothing to flush
        return
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, descriptor)
    finally:
        os.close(null)
