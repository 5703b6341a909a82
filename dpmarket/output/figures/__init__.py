"""Every figure dpmarket draws (matplotlib, Agg), from plain picklable data.

- :mod:`~dpmarket.output.figures.axes`: shared axis conventions (log labels, integer ticks)
- :mod:`~dpmarket.output.figures.painter`: figures drawn in a helper process started before the run
- :mod:`~dpmarket.output.figures.run`: ψ against k, and the owner of each update (papers' Figs 4, 9)
- :mod:`~dpmarket.output.figures.lanes`: the communication timeline (``timeline.png``)
- :mod:`~dpmarket.output.figures.timeline`: the ``timeline`` command's picture of a selection
- :mod:`~dpmarket.output.figures.topology`: the network as a graph
- :mod:`~dpmarket.output.figures.market_timeline`: the market in time
- :mod:`~dpmarket.output.figures.market`: a policy comparison
- :mod:`~dpmarket.output.figures.mechanism`: a comparison's property table (the mechanism lab)
- :mod:`~dpmarket.output.figures.sweep`: replications and sweeps (the papers' figure types), and a
  privacy audit's ROC curves against the claimed (ε, δ)
"""
