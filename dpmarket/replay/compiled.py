"""The compiled kernel: the asynchronous replay's blocks of updates as one numba loop (extra ``fast``).

Optional. ``pip install 'dpmarket[fast]'`` adds numba; the environment variable ``DPMARKET_KERNEL``
(read by :mod:`dpmarket.learning.kernels`, which also chooses the kernel of the answers that read
records) chooses, for every command and the Python API alike:

- ``auto`` (the default): numba where it is installed and pays — a replay of at least
  :data:`AUTO_UPDATES` replication-updates (numba's import and loading the cached kernel cost about
  0.7 s per process, which the compiled loop wins back in 1.4 million updates, measured); the choice
  depends on the replay alone, never on what ran before in the process;
- ``numpy``: never numba;
- ``numba``: numba for every replay it handles; an error (exit 2) if numba is not installed.

It handles the hot case only: the asynchronous learner, squared loss answered from sufficient
statistics, and blocks of updates in which no query is older than the update before (the ideal
network, or any tape without staleness); every other block runs the numpy replay. It is fed the
noise the numpy replay draws (the same streams, the same draws) and performs each update's
operations in the numpy replay's order; the matrix-vector product is ``np.dot``, the same BLAS
routine (gemv) as ``np.matmul``, so the models agree bit for bit wherever numpy's and numba's BLAS
compute gemv alike (the OpenBLAS of the numpy and scipy wheels do; tests require 10⁻¹² relative).

numba compiles the kernel at its first call and keeps it in its cache (``cache=True``: beside this
file, else the user's cache directory; ``NUMBA_CACHE_DIR`` overrides), so later processes load it.
Nothing is imported or compiled at import time.

A numba that is installed but broken (its import fails, or compiling fails: an llvmlite that does
not match, a numpy too new for it) is found out before the loop runs — it is compiled for the
block's argument types first, and a failure there has changed nothing. Under ``numba`` that is an
error (one line, as a missing numba); under ``auto`` one warning, and the numpy replay runs instead,
with the same numbers.
"""

from __future__ import annotations

import numpy as np

from dpmarket.errors import KernelError
from dpmarket.learning import kernels
from dpmarket.learning.kernels import CHOICES, VARIABLE, available, choice

__all__ = ["AUTO_UPDATES", "CHOICES", "VARIABLE", "KernelError", "async_block", "available", "choice",
           "wanted"]

AUTO_UPDATES = 2_000_000  # replication-updates from which auto imports numba (break-even ~1.4 M)

_kernel = None  # the jitted loop, made at the first call


def wanted(updates: int) -> bool:
    """Whether a replay the kernel handles, of about ``updates`` replication-updates, runs compiled."""
    value = choice()
    if value != "auto":
        return value == "numba"
    return updates >= AUTO_UPDATES and available() and not kernels.broken()


def _import():
    """The jitted loop (numba imported on first use), or None when numba is broken in this process."""
    global _kernel
    if _kernel is None and kernels.usable():
        import numba  # the optional extra, imported at the first compiled block only

        _kernel = numba.njit(cache=True)(_async_loop)
    return _kernel


def _compiled(args: tuple):
    """The jitted loop compiled for ``args``' types (or loaded from numba's cache) without running
    it; None when numba cannot (``auto``: one warning, the caller replays with numpy)."""
    kernel = _import()
    if kernel is not None:
        try:
            kernel.compile(tuple(kernel.typeof_pyval(a) for a in args))
            return kernel
        except Exception as exc:  # a compile failure: nothing has run yet
            kernels.mark_broken(exc)
    if choice() == "numba":
        raise kernels.unusable_error()
    kernels.fall_back()
    return None


def async_block(theta_L: np.ndarray, copies: np.ndarray, counts: np.ndarray, k: int, stats: tuple,
                *, learner: tuple, block: tuple, models: np.ndarray) -> bool:
    """Updates k+1… of R asynchronous replications, in place: ``theta_L`` (R, p), ``copies``
    (R·N, p, row r·N + i), ``counts`` (R, N). ``stats``: the owners' A (N, p, p), b (N, p), 2/n_i
    (N,), shares n_i/n (N,). ``learner``: λ, the owners' and θ_L's steps, θmax, inverse-frequency
    weighting (bool). ``block``: slots (B, R), each tape's length in the block (R,), the noise pool
    (M, p), each answer's row in it and its scale (B, R), and per step the row of ``models`` that
    keeps θ_L after it (−1: none). Returns False, having changed nothing, when numba cannot compile
    it under ``auto`` (the caller then replays the block with numpy)."""
    lam, step_owner, step_central, theta_max, inverse = learner
    args = (theta_L, copies, counts, np.int64(k), *stats, float(lam), float(step_owner), float(step_central),
            float(theta_max), bool(inverse), *block, models)
    kernel = _compiled(args)
    if kernel is None:
        return False
    kernel(*args)
    return True


def _async_loop(theta_L, copies, counts, k, A, b, two_n, share, lam, step_owner, step_central,
                theta_max, inverse, slots, lengths, pool, rows, scales, record, models):
    """The loop numba compiles: each replication's updates in turn (replications are independent),
    each update with :meth:`dpmarket.replay.kernel.AsyncBatch.step`'s operations in its order."""
    R, p = theta_L.shape
    N = counts.shape[1]
    bar, query, product = np.empty(p), np.empty(p), np.empty(p)
    for r in range(R):
        length = lengths[r]
        for s in range(slots.shape[0]):
            if s < length:
                i = slots[s, r]
                flat = r * N + i
                for j in range(p):
                    bar[j] = 0.5 * (theta_L[r, j] + copies[flat, j])
                    query[j] = min(max(bar[j], -theta_max), theta_max)  # the owner projects onto Θ
                np.dot(A[i], query, product)  # gemv, as np.matmul in the numpy replay (into ``product``)
                weight = share[i]
                if inverse:
                    counts[r, i] += 1
                    weight = weight * (1.0 / (N * ((counts[r, i] + 1.0) / (k + s + 1 + N))))
                for j in range(p):
                    answer = two_n[i] * (product[j] - b[i, j]) + pool[rows[s, r], j] * scales[s, r]
                    grad = (2.0 * lam) * bar[j]
                    step = bar[j] - step_owner * (grad / (2 * N) + weight * answer)
                    copies[flat, j] = min(max(step, -theta_max), theta_max)
                    theta_L[r, j] = min(max(bar[j] - step_central * grad, -theta_max), theta_max)
            if record[s] >= 0:
                for j in range(p):
                    models[record[s], r, j] = theta_L[r, j]
