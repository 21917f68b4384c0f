"""Compiled CPU strategies (Numba): ``assign="numba"`` and ``update="numba"``.

The NumPy reference (:mod:`gpumine.kmeans.reference`) spends most of a small
iteration outside arithmetic: a float64 copy of every chunk, a ``(rows, k)``
distance block, NumPy's ``argmin`` along a short axis, ``d + 1`` bincount passes.
These strategies work on blocks of rows in parallel on every core:

* ``assign="numba"``: exact labels -- the argmin of the direct ``sum (x - c)^2`` in
  float64, ties to the lowest index (the project's standard; the reference's expanded
  ``||c||^2 - 2 x.c`` can differ on near-ties) -- at the speed of a BLAS GEMM. Per
  block of 256 rows, on data shifted to the centres' mean ``o`` (``x' = x - o``,
  ``c' = c - o``): a GEMM in X's dtype gives ``x'.c'``, a branch-free pass vectorized
  over rows keeps the best and second-best ``v_j = ||c'_j||^2 - 2 x'.c'_j`` (the row's
  ``||x'||^2`` is common to all j), and a row whose margin ``v_(2) - v_(1)`` is at most

      bound = a ||x'|| + b (||x'|| + C)^2,   C = max_j ||c'_j||,
      a = 4.04 (2u + gamma_d (1 + u)^2) C,   b = 8 (d + 4) 2^-53,

  is decided again by the direct formula (u: the unit roundoff of X's dtype,
  ``gamma_d = d u / (1 - d u)``). Why this is enough: rounding ``x'`` and ``c'`` to X's
  dtype moves ``x'.c'_j`` by at most ``2u ||x'|| ||c'_j||`` (to first order) and the
  GEMM's dot product, in any summation order, by at most ``gamma_d ||x'|| ||c'_j||
  (1 + u)^2``; so each ``v_j`` is within ``E = 2 (2u + gamma_d (1 + u)^2) ||x'|| C`` of
  its exact value (the float64 terms are in ``b``), and a margin above ``2E`` ranks the
  best centre first in exact arithmetic. The direct FP64 formula errs by at most
  ``(d + 2) 2^-53`` of a distance, each at most ``(||x'|| + C)^2``: the ``b`` term, with
  room to spare, makes its argmin the exact one too. Exact ties have margin 0 and are
  always re-checked. The 1 % in ``a`` covers ``||x'||`` being computed from the
  rounded values. Rows are re-checked rarely away from near-ties; the shift keeps
  the bound on the data's scale when the data are far from the origin.
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
_BLOCK = 256  # rows per GEMM block of the assignment (measured: 64 to 2048 alike on 100k x 8)
_CONTROLLER: list = []  # threadpoolctl's controller, made once (a limit then costs ~10 us)


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
    def assign(X, centers, shifted, shifted_norms, origin, slack, tasks, labels):
        # IN X (n, d); IN centers (k, d) f8: the direct re-check's centres
        # IN shifted (k, d) X's dtype: centers - origin, rounded to X's dtype
        # IN shifted_norms (k) f8: ||centers - origin||^2; IN origin (d) f8
        # IN slack (3) f8: a, b, max ||centers - origin|| of the margin bound; IN tasks
        # OUT labels (n) int32
        n, d = X.shape
        k = centers.shape[0]
        blocks = (n + _BLOCK - 1) // _BLOCK
        per_task = (blocks + tasks - 1) // tasks
        for task in numba.prange(tasks):
            # per task, once: the shifted block transposed (features x rows), its
            # products with the centres (centres x rows), and per row the best and
            # second-best value, the best index and the margin bound
            block_t = np.empty(d * _BLOCK, dtype=X.dtype)
            products = np.empty(k * _BLOCK, dtype=X.dtype)
            best = np.empty(_BLOCK)
            second = np.empty(_BLOCK)
            best_index = np.empty(_BLOCK, dtype=np.int32)
            bound = np.empty(_BLOCK)
            for block in range(task * per_task, min(blocks, (task + 1) * per_task)):
                start = block * _BLOCK
                rows = min(_BLOCK, n - start)
                xt = block_t[:d * rows].reshape((d, rows))
                for r in range(rows):
                    for feature in range(d):
                        xt[feature, r] = np.float64(X[start + r, feature]) - origin[feature]
                # vectorized over rows: ||x'||, the margin bound, the running best
                for r in range(rows):
                    bound[r] = 0.0
                    best[r] = np.inf
                    second[r] = np.inf
                    best_index[r] = 0
                for feature in range(d):
                    for r in range(rows):
                        value = np.float64(xt[feature, r])
                        bound[r] += value * value
                for r in range(rows):
                    norm = np.sqrt(bound[r])
                    far = norm + slack[2]
                    bound[r] = slack[0] * norm + slack[1] * far * far
                dots = products[:k * rows].reshape((k, rows))
                np.dot(shifted, xt, dots)  # BLAS gemm: x'.c' for every row and centre
                # ||c'||^2 - 2 x'.c' (the row's ||x'||^2 left out): branch-free and
                # vectorized over rows; a tie keeps the lower index and a zero margin
                for j in range(k):
                    norm_j = shifted_norms[j]
                    for r in range(rows):
                        value = norm_j - 2.0 * np.float64(dots[j, r])
                        old = best[r]
                        second[r] = min(second[r], max(value, old))
                        best_index[r] = j if value < old else best_index[r]
                        best[r] = min(value, old)
                for r in range(rows):
                    label = best_index[r]
                    if second[r] - best[r] <= bound[r]:
                        # the margin is within the GEMM's rounding bound: decide the
                        # row directly, sum (x - c)^2 in float64 in feature order
                        i = start + r
                        closest = np.inf
                        label = 0
                        for j in range(k):
                            acc = 0.0
                            for feature in range(d):
                                diff = np.float64(X[i, feature]) - centers[j, feature]
                                acc += diff * diff
                            if acc < closest:
                                closest = acc
                                label = j
                    labels[start + r] = label

    @numba.njit(parallel=True, cache=True, nogil=True)
    def update(X, labels, labels_old, sample_weight, partial, changed):
        # IN X (n, d); IN labels, labels_old (n) int32; IN sample_weight (n)
        # OUT partial (threads, k, d + 1) f8; OUT changed (threads) int64
        n, d = X.shape
        threads = partial.shape[0]
        step = (n + threads - 1) // threads
        for t in numba.prange(threads):
            part = partial[t]
            part[:] = 0.0
            moved = 0
            for i in range(t * step, min(n, (t + 1) * step)):
                cluster = labels[i]
                moved += cluster != labels_old[i]
                w = np.float64(sample_weight[i])
                for feature in range(d):
                    part[cluster, feature] += w * np.float64(X[i, feature])
                part[cluster, d] += w
            changed[t] = moved

    _KERNELS.update(assign=assign, update=update, threads=numba.get_num_threads)
    return _KERNELS


def blas_single_thread():
    """A context in which BLAS runs on the calling thread only (threadpoolctl).

    The assignment calls BLAS from each of Numba's threads; BLAS's own threads would
    contend with them. Entered once around a whole Lloyd loop too (``loop_context``):
    entered per call, OpenBLAS's threads wake on every restore and, on a machine of
    few cores, preempt Numba's (iterations of 4-8 ms where 0.7 ms is the norm, measured
    on 2 cores).
    """
    if not _CONTROLLER:
        from threadpoolctl import ThreadpoolController

        _CONTROLLER.append(ThreadpoolController())
    return _CONTROLLER[0].limit(limits=1, user_api="blas")


def margin_slack(n_features: int, gemm_dtype, shifted_max_norm: float) -> np.ndarray:
    """The constants ``(a, b, C)`` of the assignment's margin bound (module docstring).

    A row whose computed margin exceeds ``a * ||x'|| + b * (||x'|| + C)^2`` has the
    same closest centre in exact arithmetic and in the direct FP64 formula.
    """
    unit = float(np.finfo(gemm_dtype).eps) / 2  # sync: none -- the GEMM format's roundoff
    gamma = n_features * unit / (1 - n_features * unit)
    a = 4 * (2 * unit + gamma * (1 + unit) ** 2) * shifted_max_norm * 1.01
    b = 8 * (n_features + 4) * 2.0**-53
    return np.array([a, b, shifted_max_norm])


def assign_numba(X, centers, labels):
    """Exact labels: the argmin of the direct ``sum (x - c)^2`` in float64, lowest index on ties.

    A BLAS GEMM in X's dtype ranks the centres by ``||c'||^2 - 2 x'.c'`` on data
    shifted to the centres' mean (``x' = x - o``); a row whose top-two margin is
    within the bound of :func:`margin_slack` is decided again by the direct formula.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features), float32 or float64   -- IN
    centers : ndarray of shape (n_clusters, n_features)   -- IN
    labels : ndarray of shape (n_samples,), int32   -- OUT
    """
    kernels = _kernels()
    centers = np.ascontiguousarray(centers, dtype=np.float64)
    origin = centers.mean(axis=0)
    shifted64 = centers - origin
    shifted_norms = np.einsum("ij,ij->i", shifted64, shifted64)
    shifted = np.ascontiguousarray(shifted64, dtype=X.dtype)
    largest = float(np.sqrt(shifted_norms.max(initial=0.0)))  # sync: none -- CPU strategy
    slack = margin_slack(X.shape[1], X.dtype, largest)
    blocks = -(-X.shape[0] // _BLOCK)
    tasks = max(1, min(kernels["threads"](), blocks))
    # one thread per task: BLAS's own threads would contend with Numba's
    with blas_single_thread():
        kernels["assign"](X, centers, shifted, shifted_norms, origin, slack, tasks, labels)


def update_numba(X, labels, sample_weight, sums, weights, labels_old=None):
    """Weighted per-cluster sums and weights, per-thread partials in float64.

    Same contract as :func:`gpumine.kmeans.reference.update_numpy`, and it counts the
    labels that differ from ``labels_old`` in the same pass (the loop then skips its
    own comparison).

    Returns
    -------
    n_changed : int or None
        None when ``labels_old`` is None.
    """
    kernels = _kernels()
    n_clusters, n_features = sums.shape
    threads = max(1, min(kernels["threads"](), X.shape[0]))
    partial = np.empty((threads, n_clusters, n_features + 1))
    changed = np.zeros(threads, dtype=np.int64)  # sync: none -- a CPU strategy
    kernels["update"](X, labels, labels if labels_old is None else labels_old,
                      sample_weight, partial, changed)
    total = partial.sum(axis=0)  # thread order: reproducible for a given thread count
    sums[:] = total[:, :n_features]
    weights[:] = total[:, n_features]
    return None if labels_old is None else int(changed.sum())  # sync: none -- host


assign_numba.loop_context = blas_single_thread
