"""Scenarios: what a run is, as a TOML file, validated and fully resolved.

Modules, in the order a scenario goes through them:

- :mod:`~dpmarket.scenario.bundled`: the example scenarios shipped with dpmarket, found by name
  (their files are ``examples/``, a link to the repository's ``scenarios/``)
- :mod:`~dpmarket.scenario.overrides`: ``--set dotted.key=value`` applied to the raw table
- :mod:`~dpmarket.scenario.schema`: every key, type, bound and default (pydantic), and what it means
- :mod:`~dpmarket.scenario.keys`: every key explained (``dpmarket explain``, validate's comments,
  "did you mean …")
- :mod:`~dpmarket.scenario.checks`: rules that tie several keys together
- :mod:`~dpmarket.scenario.sizes`: sizes whose arrays cannot fit in memory, refused with the size
  they would need
- :mod:`~dpmarket.scenario.messages`: a validation error as one line naming key and value
- :mod:`~dpmarket.scenario.loading`: file → overrides → files resolved → validated :class:`Scenario`
"""

from dpmarket.scenario.loading import load, override, validate
from dpmarket.scenario.schema import Scenario

__all__ = ["Scenario", "load", "override", "validate"]
