"""What a run, an experiment or a market study leaves for people: tables, summaries, figures, reports.

The computation packages never import this one; results flow one way into it. Modules:

- :mod:`~dpmarket.output.summary`: owners.csv's rows and summary.json's fields
- :mod:`~dpmarket.output.console`: the text printed after a run or an experiment
- :mod:`~dpmarket.output.report`: ``report.html``, one self-contained page
- :mod:`~dpmarket.output.directories`: run and market directories, written whole or not at all
- :mod:`~dpmarket.output.results`: a run directory's files
- :mod:`~dpmarket.output.timeline`: the ``timeline`` command's tables from a run directory
- :mod:`~dpmarket.output.timeseries`: a market in time's series from a run directory
- :mod:`~dpmarket.output.audit`: an audit's directory (table, scores, ROC figure) and its verdict
- :mod:`~dpmarket.output.figures`: every figure (matplotlib), drawn in a helper process
"""
