"""The environment variables (dpmarket/system/environment.py, issue 43): one parser for every DPMARKET_*
variable the package reads, and a value it cannot read is one line naming the variable and the value,
exit status 2, before any work (DPMARKET_MEMORY=inf was an OverflowError traceback, abc, nan or 1X
were silently ignored)."""

from __future__ import annotations

import ast
import re
import time
from pathlib import Path

import pytest

import dpmarket
from dpmarket.cli import main
from dpmarket.errors import DPMarketError, EnvironmentVariableError, KernelError
from dpmarket.system import environment, memory

PACKAGE = Path(dpmarket.__file__).parent


@pytest.mark.parametrize("value, reason", [
    ("inf", "is not a finite size"), ("-inf", "is not a finite size"), ("1e400", "is not a finite size"),
    ("nan", "is not a number"), ("-5", "must be at least one byte"), ("0", "must be at least one byte"),
    ("abc", "expected a size in bytes, or a number with a unit K, M, G, T or P (512M, 8G)"),
    ("1X", "expected a size in bytes"), ("8 GB GB", "expected a size in bytes"),
])
def test_an_unreadable_memory_size_is_one_line_naming_it(monkeypatch, capsys, value, reason):
    monkeypatch.setenv("DPMARKET_MEMORY", value)
    assert main(["validate", "lending_banks", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"dpmarket: error: environment: DPMARKET_MEMORY = {value!r}: {reason}")
    assert err.count("\n") == 1


@pytest.mark.parametrize("text, size", [
    ("512M", 512 * 2**20), ("8G", 8 * 2**30), ("8GiB", 8 * 2**30), ("8gb", 8 * 2**30), (" 1.5 t ", 3 * 2**39),
    ("1P", 2**50), ("1e9", 10**9), ("4096", 4096), (".5K", 512),
])
def test_memory_sizes_with_their_units(monkeypatch, text, size):
    monkeypatch.setenv("DPMARKET_MEMORY", text)
    assert memory.available() == size


def test_unset_or_empty_means_the_default(monkeypatch):
    for name in environment.VARIABLES:
        monkeypatch.setenv(name, "  ")
        assert environment.read(name) is None
        monkeypatch.delenv(name)
        assert environment.read(name) is None


def test_the_api_refuses_an_unreadable_variable_before_any_work(monkeypatch):
    """dpmarket.load: the error the commands give, a DPMarketError (it was an OverflowError)."""
    monkeypatch.setenv("DPMARKET_MEMORY", "inf")
    with pytest.raises(EnvironmentVariableError, match=r"DPMARKET_MEMORY = 'inf': is not a finite size"):
        dpmarket.load("lending_banks")


def test_a_kernel_the_package_does_not_know_is_still_a_kernel_error(monkeypatch):
    monkeypatch.setenv("DPMARKET_KERNEL", "Fortran")
    with pytest.raises(KernelError, match="DPMARKET_KERNEL = 'Fortran': expected one of auto, numpy, numba"):
        environment.check()
    assert issubclass(KernelError, EnvironmentVariableError) and issubclass(KernelError, DPMarketError)


def test_a_forecast_cache_that_is_a_file_is_refused_before_any_work(monkeypatch, capsys, tmp_path):
    """Every command checks every variable first: `forecast` would have run its pilots before failing."""
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("DPMARKET_FORECAST_CACHE", str(tmp_path / "file"))
    start = time.process_time()
    assert main(["forecast", "banks_market", "--quiet"]) == 2
    assert time.process_time() - start < 2.0
    assert capsys.readouterr().err == (f"dpmarket: error: environment: DPMARKET_FORECAST_CACHE = "
                                       f"{str(tmp_path / 'file')!r}: is not a directory\n")


def _reads_of_the_environment(path: Path) -> list[str]:
    """Calls in ``path`` that read the environment directly (os.environ, os.getenv)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [ast.unparse(node) for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "os"
            and node.attr in ("environ", "getenv", "environb")]


def test_one_module_reads_the_environment_and_lists_every_variable():
    """Every DPMARKET_* name in the package is one of environment.VARIABLES, and no other module reads
    the environment itself: a new variable gets its parser there, and its one-line error with it."""
    names = set()
    for path in PACKAGE.rglob("*.py"):
        names |= set(re.findall(r"\bDPMARKET_[A-Z_]+[A-Z]\b", path.read_text(encoding="utf-8")))
        if path.name != "environment.py":
            assert _reads_of_the_environment(path) == [], path
    assert names <= set(environment.VARIABLES), names - set(environment.VARIABLES)
