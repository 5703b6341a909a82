"""dpmarket: a simulator of private, asynchronous data collaborations.

Stages, each usable alone: :mod:`dpmarket.scenario` (TOML → validated scenario),
:mod:`dpmarket.data` (owners' records), :mod:`dpmarket.models` (losses, f, θ*, ψ),
:mod:`dpmarket.privacy` (sensitivity, Laplace noise, accountant), :mod:`dpmarket.learner`
(Algorithm 1 and the synchronous baselines), :mod:`dpmarket.training` (the exchange protocol),
:mod:`dpmarket.run` and :mod:`dpmarket.results` (run directories).
"""

__version__ = "0.1.0"
