"""The replay: the tapes of R runs applied at once by a batched learning kernel.

Modules:

- :mod:`~dpmarket.replay.kernel`: the numpy kernel: θ_L as (R, p), the owners' copies as (R, N, p),
  the noise streams read in blocks
- :mod:`~dpmarket.replay.compiled`: the optional numba kernel (extra ``fast``), bit for bit the numpy one's
"""
