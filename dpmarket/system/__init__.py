"""What every stage leans on, and none of the mathematics: the environment, files, signals, progress,
the standard streams, memory and reproducibility.

Modules:

- :mod:`~dpmarket.system.environment`: the ``DPMARKET_*`` environment variables, each parsed in one
  place; a value that cannot be read is one line naming it
- :mod:`~dpmarket.system.files`: results written whole or not at all, honouring the umask, one
  writer at a time, a failing file system reported in one line
- :mod:`~dpmarket.system.processes`: Ctrl-C and SIGTERM end a command the same way; helper
  processes never outlive their parent
- :mod:`~dpmarket.system.progress`: long phases shown on a terminal, kept out of the maths
- :mod:`~dpmarket.system.streams`: what a command prints, readable on an ASCII terminal, and a
  failing standard output reported in one line
- :mod:`~dpmarket.system.memory`: sizes that cannot fit, refused before any work with the size
  they would need
- :mod:`~dpmarket.system.counts`: the counts a user gives (runs, replications, iterations), bounded
  before any work by what numpy holds exactly and by the memory they need
- :mod:`~dpmarket.system.reproducibility`: what a seed gives back on this machine and on another,
  the machine a result was made on, and the one comparison that applies the contract
"""
