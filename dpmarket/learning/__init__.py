"""The learning problem as pure mathematics: losses, f, θ*, ψ, Algorithm 1 and its step.

No SimPy, no privacy, no files: arrays in, arrays out. Modules, in the order a run uses them:

- :mod:`~dpmarket.learning.objective`: the losses (squared, logistic, hinge), an owner's data view
  (records or sufficient statistics), the fitness f, its optimum θ* over Θ and ψ(θ) = f(θ)/f(θ*) − 1
- :mod:`~dpmarket.learning.newton`: θ* and the own-data models of the logistic loss by projected
  Newton on the box
- :mod:`~dpmarket.learning.kernels`: ``DPMARKET_KERNEL``, which kernel computes what reads records
  (numpy, or numba where installed and worth its start-up)
- :mod:`~dpmarket.learning.records`: the answers and loss sums that read every record, at many query
  points at once (numpy)
- :mod:`~dpmarket.learning.compiled`: the same, compiled (numba, extra ``fast``): one sweep per tile
- :mod:`~dpmarket.learning.stepsize`: the step constant ρ, its stability number and the noise-free
  floor law
- :mod:`~dpmarket.learning.learner`: Algorithm 1 (the central model and one copy per owner, the
  two-copy inertia update) and the synchronous baselines
- :mod:`~dpmarket.learning.measure`: ψ of many models at once, as the replay needs it
"""
