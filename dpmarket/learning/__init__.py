"""The learning problem as pure mathematics: losses, f, θ*, ψ, Algorithm 1 and its step.

No SimPy, no privacy, no files: arrays in, arrays out. Modules, in the order a run uses them:

- :mod:`~dpmarket.learning.objective`: the losses (squared, logistic, hinge), an owner's data view
  (records or sufficient statistics), the fitness f, its optimum θ* over Θ and ψ(θ) = f(θ)/f(θ*) − 1
- :mod:`~dpmarket.learning.stepsize`: the step constant ρ, its stability number and the noise-free
  floor law
- :mod:`~dpmarket.learning.learner`: Algorithm 1 (the central model and one copy per owner, the
  two-copy inertia update) and the synchronous baselines
- :mod:`~dpmarket.learning.measure`: ψ of many models at once, as the replay needs it
"""
