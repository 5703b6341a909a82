"""Whole runs: one run stage by stage, replications of a cell, the market in time, the pilots, audits.

Modules, in the order data flows through them:

- :mod:`~dpmarket.runs.pilots`: the forecast a market negotiates with (explicit, the law, or fitted
  to pilot runs on the public proxy), cached
- :mod:`~dpmarket.runs.preview`: what the forecast says before any training (the ``forecast`` command)
- :mod:`~dpmarket.runs.inline`: one training pass exchange by exchange, the reference semantics
- :mod:`~dpmarket.runs.replications`: replications of one cell: schedule → replay → measure
- :mod:`~dpmarket.runs.dynamic`: a run whose market lives in simulated time
- :mod:`~dpmarket.runs.run`: a whole run: scenario → data → (market) → simulation → results
- :mod:`~dpmarket.runs.diagnostics`: what makes a run's answer weak or misleading, and what to change
  (after a run, and before any: ``dpmarket validate``)
- :mod:`~dpmarket.runs.audit`: an empirical privacy audit: neighbouring worlds, many runs on the replay,
  an adversary scoring what the learner sees
"""
