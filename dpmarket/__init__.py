"""dpmarket: a simulator of private, asynchronous data collaborations.

Stages, each usable alone: :mod:`dpmarket.scenario` (TOML → validated scenario),
:mod:`dpmarket.data` (owners' records), :mod:`dpmarket.models` (losses, f, θ*, ψ),
:mod:`dpmarket.privacy` (sensitivity, Laplace noise, accountant), :mod:`dpmarket.learner`
(Algorithm 1 and the synchronous baselines), :mod:`dpmarket.training` (the exchange protocol),
:mod:`dpmarket.run` and :mod:`dpmarket.output.results` (run directories).

The notebook API (:mod:`dpmarket.api`, results as pandas DataFrames)::

    import dpmarket
    result = dpmarket.run("ny_hospitals", seed=3, overrides={"market.price": 10})
    result.metrics, result.owners, result.events, result.summary
    dpmarket.replicate(...), dpmarket.sweep(...), dpmarket.market(...), dpmarket.load(...)

Nothing is imported until it is used: ``import dpmarket`` stays fast.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"
__all__ = ["__version__", "load", "market", "replicate", "run", "sweep"]

_API = ("load", "replicate", "sweep")
_CALLABLE_MODULES = ("run", "market")  # modules that, called, are the API's run and market


def __getattr__(name: str):
    """The API's names, imported on first use."""
    if name in _API:
        return getattr(importlib.import_module("dpmarket.api"), name)
    if name in _CALLABLE_MODULES:
        return importlib.import_module(f"dpmarket.{name}")
    raise AttributeError(f"module 'dpmarket' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
