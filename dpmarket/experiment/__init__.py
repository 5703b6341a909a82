"""Experiments at scale: replicated runs, sweeps over scenario keys and policy comparisons, on any executor.

Modules, in the order data flows through them:

- :mod:`~dpmarket.experiment.grid`: ``--grid key=v1,v2`` → cells (validated scenarios)
- :mod:`~dpmarket.experiment.task`: the pure unit of work (replications of one cell → records)
- :mod:`~dpmarket.experiment.executors`: serial, process pool, Dask
- :mod:`~dpmarket.experiment.store`: the resumable output directory, atomic files
- :mod:`~dpmarket.experiment.tables`: sweep.csv, sweep_owners.csv, replications.csv, metrics.csv
- :mod:`~dpmarket.experiment.study`: the whole experiment, chained
- :mod:`~dpmarket.experiment.publish`: tables, figures and report.html published together
- :mod:`~dpmarket.experiment.command`: the commands' options → a plan (the summary they print is
  :mod:`dpmarket.output.console`'s)
- :mod:`~dpmarket.experiment.policy_runs`: the training runs of a policy comparison, in this process
  or on forked workers
- :mod:`~dpmarket.experiment.compare`: compensation policies compared on common random numbers (the
  ``market`` command)
"""
