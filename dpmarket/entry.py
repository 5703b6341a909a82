"""Modules that can be called: ``dpmarket.run(...)`` and ``dpmarket.market(...)``.

The notebook API's two verbs carry the names of existing modules (:mod:`dpmarket.run`, the run's
stages; :mod:`dpmarket.market`, the market layer), and Python sets ``dpmarket.run`` to the module
whenever anything imports it. So the modules themselves are made callable: calling one calls its
function of :mod:`dpmarket.api`, while ``from dpmarket.run import execute`` and
``dpmarket.run.execute`` keep working. ``inspect.signature`` and ``help`` show the function's.
"""

from __future__ import annotations

import inspect
import sys
import types
from collections.abc import Callable


def make_callable(module_name: str, function: Callable) -> None:
    """Calling module ``module_name`` calls ``function`` (documented on the module as such)."""

    class CallableModule(types.ModuleType):
        def __call__(self, *args, **kwargs):
            return function(*args, **kwargs)

    module = sys.modules[module_name]
    module.__class__ = CallableModule
    module.__signature__ = inspect.signature(function)
