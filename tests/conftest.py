"""Test-suite configuration: the Hypothesis fuzz suite is deterministic (fixed seeds, as every
statistical test here) and leaves no example database in the checkout; the forecast cache of
market runs (also those of CLI subprocesses, which inherit the environment) goes to a temporary
directory, so a test run leaves the checkout as it was."""

import signal

import pytest
from hypothesis import HealthCheck, settings

from dpmarket.runs.pilots import CACHE_ENV

settings.register_profile(
    "dpmarket",
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=60,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("dpmarket")

# A suite started in the background of a non-interactive shell (``pytest &``, nohup, some CI runners)
# inherits SIGINT ignored, and so would every subprocess it starts: the signal tests' Ctrl-C would then
# reach a command that cannot hear it. Python's own handler here makes the subprocesses start with the
# default disposition (a handler is reset at exec, an ignored signal is not).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True, scope="session")
def _forecast_cache(tmp_path_factory):
    """$DPMARKET_FORECAST_CACHE set to one temporary directory for the whole session (shared, so the
    pilots of a scenario run once, as they would in outputs/forecasts/)."""
    mp = pytest.MonkeyPatch()
    mp.setenv(CACHE_ENV, str(tmp_path_factory.mktemp("forecasts")))
    yield
    mp.undo()


@pytest.fixture
def drawn(monkeypatch):
    """Every figure saved during the test, kept for inspection (the file is still written): tests that
    read a figure's data or layout (tests/output/figures, tests/integration/test_figures_read.py)."""
    from matplotlib.figure import Figure  # deferred: most tests draw nothing

    figures: list = []
    original = Figure.savefig

    def keep(fig, *args, **kwargs):
        figures.append(fig)
        return original(fig, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    return figures
