"""dpmarket: a simulator of private, asynchronous data collaborations.

The notebook API, with results as pandas DataFrames (:mod:`dpmarket.api`)::

    import dpmarket
    result = dpmarket.run("ny_hospitals", seed=3, overrides={"privacy.epsilon": 100})
    result.metrics, result.owners, result.events, result.summary
    dpmarket.replicate(...), dpmarket.sweep(...), dpmarket.market(...), dpmarket.load(...)
    dpmarket.audit("lending_banks", runs=2000).table    # an empirical privacy audit

The packages follow the pipeline, upstream to downstream (``docs/architecture.md``):
:mod:`~dpmarket.scenario` → :mod:`~dpmarket.learning` → :mod:`~dpmarket.data` →
:mod:`~dpmarket.privacy` → :mod:`~dpmarket.markets` → :mod:`~dpmarket.schedule` →
:mod:`~dpmarket.replay` → :mod:`~dpmarket.runs` → :mod:`~dpmarket.output` →
:mod:`~dpmarket.experiment` → :mod:`~dpmarket.api` and :mod:`~dpmarket.cli`; :mod:`~dpmarket.errors`,
:mod:`~dpmarket.rng` and :mod:`~dpmarket.system` serve them all.

The API's names are loaded on first use (Scientific Python's SPEC 1, lazy loading), so
``import dpmarket`` stays fast; ``dir(dpmarket)``, ``help(dpmarket.run)`` and static tools (through
the ``TYPE_CHECKING`` imports below) see them as the functions they are.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dpmarket._version import __version__

__all__ = [
    "Audit", "DPMarketError", "Replications", "Run", "Scenario", "Sweep", "MarketComparison",
    "__version__", "audit", "load", "market", "replicate", "run", "sweep",
]

if TYPE_CHECKING:
    from dpmarket.api import (
        Audit,
        MarketComparison,
        Replications,
        Run,
        Sweep,
        audit,
        load,
        market,
        replicate,
        run,
        sweep,
    )
    from dpmarket.errors import DPMarketError
    from dpmarket.scenario.schema import Scenario

_HOMES = {
    "load": "api", "run": "api", "replicate": "api", "sweep": "api", "market": "api",
    "Run": "api", "Replications": "api", "Sweep": "api", "MarketComparison": "api", "audit": "api",
    "Audit": "api",
    "DPMarketError": "errors", "Scenario": "scenario",
}


def __getattr__(name: str):
    """The API's names, imported on first use (and then kept as ordinary attributes)."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'dpmarket' has no attribute {name!r}")
    if home == "api":
        from dpmarket import api as module
    elif home == "errors":
        from dpmarket import errors as module
    else:
        from dpmarket import scenario as module
    value = getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
