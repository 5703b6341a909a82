"""The market for privacy budgets: who sells which ε, for what payment.

No training and no command code here: a market takes the forecast ψ̂ as an input (how it is
calibrated, by pilot runs, lives in :mod:`dpmarket.runs.pilots`). Modules, in the order data flows
through them:

- :mod:`~dpmarket.markets.costs`: owners' privacy costs C_i(ε) and their best responses to a price
- :mod:`~dpmarket.markets.sellers`: the owners as sellers: costs, sizes, bounds, own-data baselines
- :mod:`~dpmarket.markets.members`: sets of coalitions as a forecast evaluates them
- :mod:`~dpmarket.markets.forecast`: Theorem 2's forecast and its fit
- :mod:`~dpmarket.markets.law`: the forecast law of any coalition from public inputs
- :mod:`~dpmarket.markets.policies`: the compensation policies (posted price … marginal contribution)
- :mod:`~dpmarket.markets.outcome`: what a policy decides: ε, payments, costs, utilities
- :mod:`~dpmarket.markets.stage`: a run's market stage: the scenario's policy applied
- :mod:`~dpmarket.markets.dynamic`: the market in time: prices, payments, joins and leaves as events

The package is named ``markets`` so that ``dpmarket.market(...)``, the notebook API's policy
comparison, stays a function.
"""
