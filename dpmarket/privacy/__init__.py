"""Differential privacy of the owners' answers: mechanisms, accountants, and the owners themselves.

Modules, in the order data flows through them:

- :mod:`~dpmarket.privacy.guarantee`: the :class:`~dpmarket.privacy.guarantee.Guarantee` an owner
  gives (mechanism, accountant, ε, δ) as one value
- :mod:`~dpmarket.privacy.accounting`: (ε, δ) accounting on dp-accounting (RDP, PLD): the noise that
  lets m answers compose to (ε, δ)
- :mod:`~dpmarket.privacy.mechanisms`: Laplace and Gaussian noise, answer caps m_i, ledgers
- :mod:`~dpmarket.privacy.owners`: a data owner's side of an exchange: answer privately, or refuse
- :mod:`~dpmarket.privacy.cohort`: a run's participants as protocol owners (sensitivity Ξ, caps,
  noise) built from public information
- :mod:`~dpmarket.privacy.auditing`: what an attack's error rates prove about ε (Clopper–Pearson
  bounds, the audit by one run)
"""
