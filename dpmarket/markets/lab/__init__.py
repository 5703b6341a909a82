"""The mechanism lab: compensation policies judged by the properties economists ask of them.

Every figure here is computed on the forecast ψ̂ the policies decide with (and, where it says so,
on the simulated ψ of the comparison's training runs, handed in as numbers): no training, no
files. Modules, in the order the table is built:

- :mod:`~dpmarket.markets.lab.welfare`: welfare, and the best any coalition and budgets reach
- :mod:`~dpmarket.markets.lab.deviations`: owners who misreport their cost or split into fake owners
- :mod:`~dpmarket.markets.lab.properties`: the property table of one policy, and its rows

Definitions (with the maths) are in docs/how-to/mechanism-lab.md.
"""
