"""Compiled CPU strategies (Numba): ``assign="numba"`` and ``update="numba"``.

The NumPy reference (:mod:`gpumine.kmeans.reference`) spends most of a small
iteration outside arithmetic: a float64 copy of every chunk, a ``(rows, k)``
distance block, NumPy's ``argmin`` along a short axis, ``d + 1`` bincount passes.
These strategies read X once per step, in parallel over rows on every core:

* ``assign="numba"``: the direct ``sum (x - c)^2`` in float64 for every centre, ties
  to the lowest index -- the exact labels of the project's standard (the reference's
  expanded ``||c||^2 - 2 x.c`` can differ from them on near-ties);
* ``update="numba"``: per-thread partial sums of ``w x`` and ``w`` in float64, added
  in thread order (bit-reproducible for a given thread count; within float64 rounding
  of the reference's).

Numba is optional (``pip install gpumine[fast]``, part of ``dev``); without it,
``"auto"`` on the CPU stays on the NumPy reference. The first call of a dtype and
layout compiles (about a second), cached on disk afterwards.

Examples
--------
>>> import numpy as np
>>> from gpumine.kmeans.cpu_fast import assign_numba  # doctest: +SKIP
>>> labels = np.empty(3, dtype=np.int32)                   # doctest: +SKIP
>>> assign_numba(np.array([[0.0], [4.0], [9.0]]), np.array([[1.0], [8.0]]), labels)
... # doctest: +SKIP
>>> labels.tolist()                                        # doctest: +SKIP
[0, 0, 1]
"""

from __future__ import annotations

import importlib.util

import numpy as np

__all__ = ["assign_numba", "available", "update_numba"]


def available() -> bool:
    """Whether Numba can be imported (the strategies need it)."""
    return importlib.util.find_spec("numba") is not None


_KERNELS: dict = {}
_ROWS = 8  # rows per block of the assignment (measured best of 4 to 32 on 100k x 8, k = 8)


def _kernels():
    """Compile-on-first-use: importing this module never imports Numba."""
    if _KERNELS:
        return _KERNELS
    from gpumine.exceptions import MissingDependency

    try:
        import numba
    except ImportError as exc:
        raise MissingDependency("assign/update='numba' need Numba: pip install "
                                "'gpumine[fast]'") from exc

    @numba.njit(parallel=True, cache=True, nogil=True)
    def assign(X, centers_t, labels):  # IN X (n, d), IN centers_t (d, k) f8, OUT labels (n)
        n, d = X.shape
        k = centers_t.shape[1]
        for block in numba.prange((n + _ROWS - 1) // _ROWS):
            # distances of _ROWS rows at once: the innermost loop runs over centres, so
            # it vectorizes, and each centre's sum still adds its features in order
            acc = np.zeros((_ROWS, k))
            start = block * _ROWS
            rows = min(_ROWS, n - start)
            for feature in range(d):
                for r in range(rows):
                    x = np.float64(X[start + r, feature])
                    for j in range(k):
                        diff = x - centers_t[feature, j]
                        acc[r, j] += diff * diff
            for r in range(rows):
                best = acc[r, 0]
                best_index = 0
                for j in range(1, k):
                    if acc[r, j] < best:
                        best = acc[r, j]
                        best_index = j
                labels[start + r] = best_index

    @numba.njit(parallel=True, cache=True, nogil=True)
    def update(X, labels, sample_weight, partial):  # OUT partial (threads, k, d + 1) f8
        n, d = X.shape
        threads = partial.shape[0]
        step = (n + threads - 1) // threads
        for t in numba.prange(threads):
            part = partial[t]
            part[:] = 0.0
            for i in range(t * step, min(n, (t + 1) * step)):
                cluster = labels[i]
                w = np.float64(sample_weight[i])
                for feature in range(d):
                    part[cluster, feature] += w * np.float64(X[i, feature])
                part[cluster, d] += w

    _KERNELS.update(assign=assign, update=update, threads=numba.get_num_threads)
    return _KERNELS


def assign_numba(X, centers, labels):
    """Exact labels: the direct ``sum (x - c)^2`` in float64, ties to the lowest index.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)   -- IN
    centers : ndarray of shape (n_clusters, n_features)   -- IN
    labels : ndarray of shape (n_samples,), int32   -- OUT
    """
    _kernels()["assign"](X, np.ascontiguousarray(np.asarray(centers, dtype=np.float64).T),
                         labels)


def update_numba(X, labels, sample_weight, sums, weights, labels_old=None):
    """Weighted per-cluster sums and weights, per-thread partials in float64.

    Same contract as :func:`gpumine.kmeans.reference.update_numpy`.
    """
    kernels = _kernels()
    n_clusters, n_features = sums.shape
    partial = np.empty((max(1, min(kernels["threads"](), X.shape[0])), n_clusters,
                        n_features + 1))
    kernels["update"](X, labels, sample_weight, partial)
    total = partial.sum(axis=0)  # thread order: reproducible for a given thread count
    sums[:] = total[:, :n_features]
    weights[:] = total[:, n_features]
