"""Modules that can be called: ``dpmarket.run(...)`` and ``dpmarket.market(...)``.

The notebook API's two verbs carry the names of existing modules (:mod:`dpmarket.run`, the run's
stages; :mod:`dpmarket.market`, the market layer), and Python sets ``dpmarket.run`` to the module
whenever anything imports it. So the modules themselves are made callable: calling one calls its
function of :mod:`dpmarket.api`, while ``from dpmarket.run import execute`` and
``dpmarket.run.execute`` keep working. ``inspect.signature`` and ``help`` show the function's.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import types


def _api(name: str):
    """The notebook API's function ``name``, imported on first use: the computation modules made
    callable must not import :mod:`dpmarket.api`, which imports them (no import circle)."""
    return getattr(importlib.import_module("dpmarket.api"), name)


def make_callable(module_name: str, api_name: str) -> None:
    """Calling module ``module_name`` calls :mod:`dpmarket.api`'s ``api_name`` (documented as such)."""

    class CallableModule(types.ModuleType):
        def __call__(self, *args, **kwargs):
            return _api(api_name)(*args, **kwargs)

        @property
        def __signature__(self) -> inspect.Signature:
            return inspect.signature(_api(api_name))

    sys.modules[module_name].__class__ = CallableModule
