"""The market layer (design §6): owners' privacy costs and the forecast they negotiate with.

Groundwork for compensation policies: cost functions with closed-form best responses to a
posted price, and the forecast ψ̂ of design §4 with its least-squares calibration.

Called, the package is the notebook API's ``dpmarket.market(scenario, policies, ...)``
(:func:`dpmarket.api.market`, a policy comparison; see dpmarket/entry.py).
"""

from dpmarket import entry

entry.make_callable(__name__, "market")
