"""The discrete-event layer (SimPy): clocks, availability, channels and the learner agent.

This layer only schedules: it is handed a :class:`~dpmarket.schedule.sim.network.Network` built once
from the scenario, and drives a :class:`~dpmarket.schedule.protocol.Training` (owners answer through
:mod:`dpmarket.privacy.owners`, the learner updates through :mod:`dpmarket.learning.learner`).
Modules:

- :mod:`~dpmarket.schedule.sim.network`: the network's specification, built once from the scenario
- :mod:`~dpmarket.schedule.sim.queue`: what the engine puts on SimPy's event queue
- :mod:`~dpmarket.schedule.sim.availability`: owners going offline and coming back
- :mod:`~dpmarket.schedule.sim.channel`: a shared channel (pure ALOHA)
- :mod:`~dpmarket.schedule.sim.exchange`: request-mode exchanges and broadcast slots as chains of events
- :mod:`~dpmarket.schedule.sim.engine`: the engine: clocks, channels and the learner agent together
- :mod:`~dpmarket.schedule.sim.ideal`: the ideal network as a SimPy process (for the market in time)
"""

from dpmarket.schedule.sim.engine import NetworkRun, run_network

__all__ = ["NetworkRun", "run_network"]
