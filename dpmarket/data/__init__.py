"""The owners' records, the public information about them, and the learning problem they pose.

Modules, in the order data flows through them:

- :mod:`~dpmarket.data.synthetic`: generators shaped like the papers' hospitals, banks and card issuers
- :mod:`~dpmarket.data.table`: owners from a table of real records (CSV, Parquet), with a public hold-out
- :mod:`~dpmarket.data.preprocess`: the public transform (codes, scaling, PCA) fitted on the hold-out
- :mod:`~dpmarket.data.magnitudes`: the bounds that keep every derived number finite
- :mod:`~dpmarket.data.consortium`: every owner's private records and the declared bounds
- :mod:`~dpmarket.data.proxy`: the public proxy (hold-out or synthetic twin) the learner sets its
  parameters from, and the step ρ it derives
- :mod:`~dpmarket.data.problem`: the learning problem of a scenario: data, objective, θ*, own-data models
"""

from dpmarket.data.consortium import Consortium, build_consortium

__all__ = ["Consortium", "build_consortium"]
