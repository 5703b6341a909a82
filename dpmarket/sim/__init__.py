"""The discrete-event layer (SimPy): clocks, availability, channels and the learner agent.

This layer only schedules: owners answer through :mod:`dpmarket.owners`, the learner updates
through :mod:`dpmarket.learner`, and both are reached via :class:`dpmarket.training.Training`.
"""

from dpmarket.sim.engine import NetworkRun, run_network

__all__ = ["NetworkRun", "run_network"]
