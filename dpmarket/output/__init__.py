"""What a run, an experiment or a market study leaves for people: tables, summaries, figures, reports.

The computation packages never import this one; results flow one way into it. Modules:

- :mod:`~dpmarket.output.summary`: owners.csv's rows and summary.json's fields
- :mod:`~dpmarket.output.console`: the text printed after a run or an experiment
- :mod:`~dpmarket.output.report`: ``report.html``, one self-contained page
- :mod:`~dpmarket.output.directories`: run and market directories, written whole or not at all
- :mod:`~dpmarket.output.results`: a run directory's files (and an audit's)
- :mod:`~dpmarket.output.views`: what the timeline's picture and interactive view show, from spans
- :mod:`~dpmarket.output.spans`: ``spans.csv``, the run's intervals paired from ``events.csv``
- :mod:`~dpmarket.output.timeline`: the ``timeline`` command's tables from a run directory
- :mod:`~dpmarket.output.trace`: a run as a Chrome trace (Perfetto, chrome://tracing)
- :mod:`~dpmarket.output.timeseries`: a market in time's series from a run directory
- :mod:`~dpmarket.output.figures`: every figure (matplotlib), drawn in a helper process
"""
