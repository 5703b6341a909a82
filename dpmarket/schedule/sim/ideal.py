"""The ideal network as a SimPy process, for runs whose market lives in simulated time.

Without a market in time the ideal network needs no SimPy (:func:`dpmarket.schedule.protocol.run_uniform`
draws the superposed clocks in a plain loop). A market in time (dpmarket/markets/dynamic.py) has
processes of its own — repricing every period, arrivals — that must interleave with the exchanges
on one clock, so the same loop runs here as a process: the same draws from the same streams, in
the same order, so that a market that never changes anything reproduces the static run exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Generator

import numpy as np
import simpy

from dpmarket.schedule.protocol import Superposition, Training


def ideal_clocks(env: simpy.Environment, training: Training, iterations: int,
                 selection: np.random.Generator, clocks: np.random.Generator, *, rates: np.ndarray | None,
                 takes_part: Callable[[int], bool], done: simpy.Event) -> Generator:
    """Every tick of the superposed clocks is an instantaneous exchange with its owner, if it takes
    part in the market now (else the tick does nothing); an owner whose budget is spent leaves
    at its tick as in :func:`~dpmarket.schedule.protocol.run_uniform`. ``done`` succeeds with the stop
    reason."""
    clock, owners = Superposition(len(training.owners), rates), training.owners
    while training.k < iterations:
        if training.all_exhausted:
            break
        yield env.timeout(clocks.exponential(clock.mean_wait))
        if done.triggered:  # the market closed it meanwhile
            return
        owner = clock.pick(selection)
        if not takes_part(owner):
            continue
        if owners[owner].exhausted:
            training.leave(owner, env.now)
            clock.remove(owner)
        else:
            training.exchange(owner, env.now)
    if not done.triggered:
        done.succeed("iterations" if training.k >= iterations else "budgets exhausted")
