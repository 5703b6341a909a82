"""The network a simulation runs on, built once from a scenario: everything the engine reads.

Ciw hands a built ``Network`` to its ``Simulation``; dpmarket's engine is handed a
:class:`Network` in the same way, so the SimPy layer never sees the scenario: what it does depends
on these values alone, and a test can build one by hand. Per-owner settings (clock rate, channel,
dropout periods, outages) are resolved here, each owner's ``[[owners]]`` override or else the
scenario-wide default, for the run's owners 0…N−1 (a market's participants, renumbered).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dpmarket.scenario.schema import Scenario

Window = tuple[float, float]  # an outage: offline from start to end


@dataclass(frozen=True)
class Network:
    """A network specification: the access mode, the channels, the messages' fate, the owners' clocks
    and availability, the run's length and seed."""

    mode: str  # "request" or "broadcast" (the ideal network needs no engine)
    channels: int
    collisions: bool
    carrier_sense: bool
    backoff: float
    max_attempts: int
    transmission_time: float
    latency: float
    loss_probability: float
    broadcast_interval: float
    horizon: float | None
    availability: str | None  # an availability trace's path (absolute), or None
    iterations: int  # T: the engine stops after T updates
    seed: int  # the run's seed: its clocks, channel and availability streams
    rates: tuple[float, ...]  # each owner's Poisson clock rate
    channel_of: tuple[int, ...]  # each owner's channel
    periods: tuple[tuple[float | None, float | None], ...]  # each owner's mean online, offline periods
    outages: tuple[tuple[Window, ...], ...]  # each owner's scheduled outages

    @property
    def owners(self) -> int:
        return len(self.rates)


def build_network(scenario: Scenario, owners: int) -> Network:
    """The network of ``scenario`` for its first ``owners`` owners (a run's participants)."""
    net, value = scenario.network, scenario.owner_value
    return Network(
        mode=net.mode, channels=net.channels, collisions=net.collisions, carrier_sense=net.carrier_sense,
        backoff=net.backoff, max_attempts=net.max_attempts, transmission_time=net.transmission_time,
        latency=net.latency, loss_probability=net.loss_probability,
        broadcast_interval=net.broadcast_interval, horizon=net.horizon, availability=net.availability,
        iterations=scenario.learner.iterations, seed=scenario.seed,
        rates=tuple(value(i, "clock_rate") for i in range(owners)),
        channel_of=tuple(value(i, "channel") for i in range(owners)),
        periods=tuple((value(i, "mean_online"), value(i, "mean_offline")) for i in range(owners)),
        outages=tuple(tuple((w.start, w.end) for w in value(i, "outages")) for i in range(owners)),
    )
