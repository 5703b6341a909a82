"""A command's standard streams (dpmarket/system/streams.py): every command's text survives an ASCII
terminal, a standard output that fails is one line and exit 2, a reader leaving early is quiet."""

from __future__ import annotations

import errno
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import tiny_toml

from dpmarket.errors import OutputError
from dpmarket.system import streams

FULL = Path("/dev/full")  # a device on which every write fails with ENOSPC (Linux)


def dpmarket(*args: str, env: dict | None = None, **options) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dpmarket", *args], capture_output=True, timeout=120,
                          env={**os.environ, **(env or {})}, **options)


def test_the_ascii_spelling_of_what_dpmarket_prints():
    assert streams.ascii_text("ψ(θ) = f(θ)/f(θ*) − 1, ε ≤ 5 × 10⁻², Ξ = 260, σ = 2λ") == \
        "psi(theta) = f(theta)/f(theta*) - 1, epsilon <= 5 x 10^-2, Xi = 260, sigma = 2lambda"
    assert streams.ascii_text("ψ̂ x₁₂ ᾱ …") == "psi_hat x_12 alpha_bar ..."
    assert streams.ascii_text("Zürich 😀") == "Z\\u00fcrich \\U0001f600"  # exact: a TOML or JSON escape


def test_prepare_gives_a_non_unicode_stream_the_spelling_and_leaves_utf8_alone():
    ascii_stream = io.TextIOWrapper(io.BytesIO(), encoding="ascii")
    utf8 = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    streams.prepare((ascii_stream, utf8))
    ascii_stream.write("ε = 1\n")
    ascii_stream.flush()
    assert ascii_stream.buffer.getvalue() == b"epsilon = 1\n"
    assert utf8.errors == "strict"
    bare = io.TextIOWrapper(io.BytesIO(), encoding="ascii")
    with pytest.raises(UnicodeEncodeError):  # the wrong outcome the handler prevents
        bare.write("ε")


ASCII_COMMANDS = [["explain", "privacy.epsilon"], ["explain"], ["run", "--help"],
                  ["validate", "lending_banks"]]


@pytest.mark.parametrize("args", ASCII_COMMANDS, ids=" ".join)
def test_every_command_survives_an_ascii_terminal(args):
    """The old commands ended in a UnicodeEncodeError traceback on the first ε, θ or ψ."""
    done = dpmarket(*args, env={"PYTHONIOENCODING": "ascii"})
    assert done.returncode == 0, done.stderr.decode("ascii", "replace")
    assert done.stdout.isascii() and done.stderr.isascii() and b"Traceback" not in done.stderr
    assert b"epsilon" in done.stdout or b"psi" in done.stdout


def test_a_run_survives_an_ascii_terminal(tmp_path):
    (tmp_path / "s.toml").write_text(tiny_toml())
    done = dpmarket("run", str(tmp_path / "s.toml"), "--out", str(tmp_path / "r"), "--quiet",
                    env={"PYTHONIOENCODING": "ascii"})
    assert done.returncode == 0 and b"psi final" in done.stdout and b"epsilon = 1" in done.stdout, done.stderr
    assert done.stdout.isascii()


@pytest.mark.skipif(not FULL.exists(), reason="no /dev/full on this system")
@pytest.mark.parametrize("buffered", [True, False], ids=["buffered", "unbuffered"])
@pytest.mark.parametrize("args", [["validate", "lending_banks"], ["explain", "privacy.epsilon"], ["--help"],
                                  ["--version"]], ids=" ".join)
def test_a_failing_standard_output_is_one_line_and_exit_2(args, buffered):
    """``> /dev/full``: the old command ended in an ENOSPC traceback (or, for --help, exit 0 with the
    text lost; buffered, Python's 'Exception ignored' and status 120)."""
    with open(FULL, "w") as full:
        done = subprocess.run([sys.executable, "-m", "dpmarket", *args], stdout=full, stderr=subprocess.PIPE,
                              timeout=120, text=True,
                              env={**os.environ, "PYTHONUNBUFFERED": "" if buffered else "1"})
    assert done.returncode == 2, done.stderr
    assert done.stderr == "dpmarket: error: standard output: cannot write: No space left on device\n"


def test_a_reader_that_leaves_early_ends_the_command_quietly():
    """``| head``: no BrokenPipeError traceback nor 'Exception ignored' line (a guard: the old
    command already ended quietly)."""
    process = subprocess.Popen([sys.executable, "-m", "dpmarket", "explain"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    process.stdout.close()  # before the command writes: its first write meets a closed pipe
    _, err = process.communicate(timeout=120)
    assert process.returncode == 1 and err == b""


def test_say_turns_a_failing_output_into_one_error_and_lets_a_broken_pipe_pass(monkeypatch):
    class Failing(io.StringIO):
        def __init__(self, error: OSError) -> None:
            super().__init__()
            self.error = error

        def write(self, text: str) -> int:
            raise self.error

    monkeypatch.setattr(sys, "stdout", Failing(OSError(errno.EIO, os.strerror(errno.EIO))))
    with pytest.raises(OutputError, match=r"^standard output: cannot write: Input/output error$"):
        streams.say("x")
    monkeypatch.setattr(sys, "stdout", Failing(BrokenPipeError(errno.EPIPE, "Broken pipe")))
    with pytest.raises(BrokenPipeError):
        streams.say("x")
    monkeypatch.setattr(sys, "stdout", None)  # started with standard output closed (>&-)
    with pytest.raises(OutputError, match="it is closed"):
        streams.say("x")
