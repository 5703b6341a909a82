"""Experiments at scale: replicated runs and sweeps over scenario keys, on any executor.

Modules, in the order data flows through them:

- :mod:`~dpmarket.experiment.grid`: ``--grid key=v1,v2`` → cells (validated scenarios)
- :mod:`~dpmarket.experiment.task`: the pure unit of work (replications of one cell → records)
- :mod:`~dpmarket.experiment.executors`: serial, process pool, Dask
- :mod:`~dpmarket.experiment.store`: the resumable output directory, atomic files
- :mod:`~dpmarket.experiment.tables`: sweep.csv, sweep_owners.csv, replications.csv, metrics.csv
- :mod:`~dpmarket.experiment.study`: the whole experiment, chained
- :mod:`~dpmarket.experiment.publish`: tables, figures and report.html published together
- :mod:`~dpmarket.experiment.command` and :mod:`~dpmarket.experiment.console`: the commands'
  options → a plan, and the summary they print
"""
