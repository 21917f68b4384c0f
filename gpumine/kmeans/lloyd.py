"""The Lloyd engine: scikit-learn's k-means iteration, over any backend and strategies.

The engine owns the loop and its semantics; the heavy steps are strategies from
the registry (:mod:`gpumine.registry`), called through three contracts:

* **init** ``init(X, n_clusters, *, sample_weight, x_squared_norms, random_state, xp)``
  returns the (k, d) initial centres;
* **assign** ``assign(X, centers, labels)`` writes the closest centre of every
  row into ``labels`` (int32; ties to the lowest index);
* **update** ``update(X, labels, sample_weight, sums, weights, labels_old=None)``
  writes the weighted per-cluster sums (k, d) and weights (k) into caller-allocated
  float64 buffers; it returns None, or the number of labels that differ from
  ``labels_old`` when it counts them (seed 000's kernels do). An update object
  with a ``bind(X, sample_weight)`` method is bound once per fit and the
  callable it returns is used (per-fit state, e.g. the hybrid scheme's host copy).
  An assign object with ``bind(X)`` is bound once per device run (e.g. Hamerly's
  bounds, :mod:`gpumine.kmeans.bounds`); a bound one with ``reset()`` is told when
  labels were moved outside the assignment (an empty cluster relocated).
  A strategy with a ``loop_context`` attribute (a callable returning a context
  manager) has the host loop run inside it, once per run, e.g. BLAS held to one
  thread while a compiled strategy's own threads call it
  (:mod:`gpumine.kmeans.cpu_fast`).

``X`` is a validated, finite (n_samples, n_features) array of float32 or float64
on the backend of ``xp``; it may be row-major or a transposed view of a
column-major (n_features, n_samples) buffer -- strategies must honour strides.

Semantics are scikit-learn's ``KMeans(algorithm="lloyd")``:

* X is centred on its mean during the fit (better conditioning of
  ``||c||^2 - 2 x.c``) and the centres shifted back at the end;
* ``tol`` is scaled by the mean feature variance;
* an iteration is E-step (assign) then M-step (update, relocate empty clusters,
  average); the loop stops when the labels did not change (strict convergence)
  or the total squared centre shift is ``<= tol``; without strict convergence a
  final E-step makes ``labels`` match ``centers``;
* an empty cluster takes the point farthest from its centre (unweighted), that
  point's weight moving from its old cluster;
* of ``n_init`` runs the lowest inertia wins (a different clustering only);
* inertia is ``sum_i w_i ||x_i - c_{l_i}||^2`` computed directly, in float64.

The centres are iterated in ``center_dtype``: float64 on NumPy whatever X's
dtype, so that the CPU path is exact Lloyd arithmetic on the given values --
float32 data then follows the same trajectory as float64 data with the same
values (scikit-learn's float32 path accumulates in float32 and, on long runs,
drifts with its thread count). The returned centres are cast to X's dtype.

On a GPU backend the loop is :func:`_lloyd_device`: the E-step counts the labels
that changed (strategies with ``counts_changes``; otherwise the engine compares
with the previous labels on the device), one kernel averages the centres and
computes the shift and the number of empty clusters, and the host reads back
those three numbers, 24 bytes, once per iteration (seed 000's rule). Empty
clusters are relocated (on the device, without a sync) only in an iteration that
has one.
With graph-safe strategies (the defaults) the iteration's launches are one CUDA
graph, replayed. On small problems with the default strategies the whole loop is one
cooperative kernel instead (:func:`_lloyd_fused`): one launch and one readback per fit.
Nothing of size n crosses to the host during a fit.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from gpumine.kmeans.reference import chunk_rows

__all__ = [
    "LloydResult",
    "assign_labels",
    "average_centers",
    "better_run",
    "bind_update",
    "divide_sums",
    "euclidean_distances",
    "fit_lloyd",
    "inertia",
    "initial_centers",
    "is_same_clustering",
    "lloyd_single",
    "lloyd_step",
    "minus_row",
    "relocate_empty_clusters",
    "shift_rows",
    "squared_row_norms",
    "stopping_rule",
    "tolerance",
]


@dataclass
class LloydResult:
    """Outcome of a k-means fit.

    Attributes
    ----------
    labels : array of shape (n_samples,), int32
    inertia : float
    centers : array of shape (n_clusters, n_features), X's dtype
    n_iter : int
        Lloyd iterations of the winning run.
    n_distinct : int or None
        Clusters holding at least one point, when the loop counted them (the fused
        device loop does); None: the estimator counts them from ``labels``.
    iteration_seconds : list of float or None
        Each iteration's wall time, where the loop measured it (the several-GPU loop).
    """

    labels: object
    inertia: float
    centers: object
    n_iter: int
    n_distinct: int | None = None
    iteration_seconds: list | None = None


#: The fewest calls a stretch of an assignment's plain calls (``graph_calls``, the measured
#: race's winner between two races) must have left for the loop to capture one into a CUDA
#: graph and replay it: a capture costs about an eager iteration's launches.
MIN_GRAPH_CALLS = 3


def tolerance(X, tol: float, xp=np, mean=None) -> float:
    """``tol`` times the mean per-feature variance of X (0 stays 0).

    On a GPU backend the variance is accumulated in double about ``mean`` (X's float64
    mean, computed here if not given) by :func:`gpumine.kmeans.gpu.feature_variance`, as
    the chunked fit accumulates it.
    """
    if tol == 0:
        return 0.0
    if xp is not np:
        from gpumine.kmeans.gpu import feature_variance

        if mean is None:
            from gpumine.adapters.column_stats import column_means

            mean = column_means(X)
        # NumPy's mean of the d variances, as the CPU path's
        variances = feature_variance(X, mean).get()  # sync: 8 bytes a feature, once per fit
        return float(np.mean(variances)) * tol  # sync: none, host values
    if X.flags.f_contiguous and not X.flags.c_contiguous:
        # column-major: one feature at a time, so the temporary is one column, not all of X
        return float(np.mean([float(xp.var(X[:, j])) for j in range(X.shape[1])])) * tol
    return float(xp.mean(xp.var(X, axis=0))) * tol


def squared_row_norms(X, xp=np):
    """``||x_i||^2`` of every row, accumulated in float64; computed once per fit."""
    out = xp.empty(X.shape[0], dtype=xp.float64)
    starts, step = chunk_rows(X.shape[0], X.shape[1])
    for start in starts:
        block = X[start:start + step].astype(xp.float64)
        out[start:start + step] = xp.einsum("ij,ij->i", block, block)
    return out


def inertia(X, sample_weight, centers, labels, xp=np) -> float:
    """``sum_i w_i ||x_i - c_{labels_i}||^2``, directly (no expanded formula), in float64."""
    if xp is not np:
        from gpumine.kmeans import gpu

        return gpu.inertia(X, sample_weight, centers, labels)
    total = 0.0
    starts, step = chunk_rows(X.shape[0], X.shape[1])
    for start in starts:
        stop = start + step
        diff = X[start:stop].astype(xp.float64) - centers[labels[start:stop]].astype(xp.float64)
        total += float(xp.einsum("ij,ij->i", diff, diff) @ sample_weight[start:stop].astype(
            xp.float64))
    return total


def relocate_empty_clusters(X, sample_weight, centers_old, sums, weights, labels, xp=np) -> None:
    """Give each empty cluster one of the points farthest from their centres.

    ``sums`` and ``weights`` are the M-step's buffers before averaging (INOUT).
    The farthest points are taken by unweighted squared distance to their
    current centre, as scikit-learn does; if all distances are 0 (fewer
    distinct points than clusters) nothing moves.
    """
    empty = xp.flatnonzero(weights == 0)
    n_empty = int(empty.shape[0])
    if n_empty == 0:
        return
    distances = xp.empty(X.shape[0], dtype=X.dtype)
    starts, step = chunk_rows(X.shape[0], X.shape[1])
    for start in starts:
        stop = start + step
        distances[start:stop] = ((X[start:stop] - centers_old[labels[start:stop]]) ** 2).sum(axis=1)
    if float(distances.max()) == 0:
        return
    far_from_centers = xp.argpartition(distances, -n_empty)[:-n_empty - 1:-1]
    # Sequential on purpose: two relocated points may come from the same old cluster.
    for new_cluster, far_idx in zip(empty.tolist(), far_from_centers.tolist(), strict=True):
        weight = sample_weight[far_idx]
        old_cluster = int(labels[far_idx])
        sums[old_cluster] -= X[far_idx] * weight
        sums[new_cluster] = X[far_idx] * weight
        weights[new_cluster] = weight
        weights[old_cluster] -= weight


def bind_update(update, X, sample_weight):
    """``update`` bound to this fit's X and weights when it binds (module docstring)."""
    return update.bind(X, sample_weight) if hasattr(update, "bind") else update


def average_centers(sums, weights, center_dtype, xp=np):
    """New centres: ``sums / weights`` (a multiply by the reciprocal) where the weight is positive.

    A cluster still empty after relocation (only when all points coincide with
    their centres) is placed on the heaviest cluster's centre, as scikit-learn does.

    Examples
    --------
    >>> import numpy as np
    >>> average_centers(np.array([[2.0, 4.0], [0.0, 0.0]]), np.array([2.0, 0.0]), np.float64)
    array([[1., 2.],
           [1., 2.]])
    """
    quotients, positive = divide_sums(sums, weights, xp)
    centers = quotients.astype(center_dtype)
    if xp is np:
        if not positive.all():  # sync: none, host arrays
            centers[~positive] = centers[int(np.argmax(weights))]  # sync: none, host arrays
        return centers
    # on a device, without a host read (the test and the index would each wait for the
    # GPU, and the next iteration's launches behind them): the heaviest centre selected
    # on the device, written where the weight is not positive
    heaviest = xp.take(centers, xp.argmax(weights).reshape(1), axis=0)  # (1, d)
    return xp.where(positive[:, None], centers, heaviest)


def divide_sums(sums, weights, xp=np):
    """``(sums * (1 / weights), weights > 0)``, the sums left as they are where the weight
    is not positive: :func:`average_centers` without its empty-cluster rule, so with no
    host read (the NCCL loop of :mod:`gpumine.dask.collective` averages on the GPU with it).

    Examples
    --------
    >>> import numpy as np
    >>> divide_sums(np.array([[2.0, 4.0], [0.0, 0.0]]), np.array([2.0, 0.0]))
    (array([[1., 2.],
           [0., 0.]]), array([ True, False]))
    """
    positive = weights > 0
    reciprocal = xp.where(positive, 1 / xp.where(positive, weights, 1), 1)
    return sums * reciprocal[:, None], positive


def lloyd_step(X, sample_weight, centers, labels, sums, weights, *, assign: Callable,
               update: Callable, labels_old=None, relocate: bool = True, xp=np):
    """One Lloyd iteration on any backend: the E-step, then the M-step.

    The loop of :func:`lloyd_single` on the host, the benchmarks' timed step, and
    what a chunked or distributed fit repeats are this function; the device loop
    (:func:`_lloyd_device`) fuses its averaging, shift and status into one kernel
    instead (the same arithmetic, one readback).

    Parameters
    ----------
    X : array of shape (n_samples, n_features)   -- IN
    sample_weight : array of shape (n_samples,), X's dtype   -- IN
    centers : array of shape (n_clusters, n_features)   -- IN
    labels : int32 array of shape (n_samples,)   -- OUT
        The closest centre of every row (the previous labels on entry, for
        strategies that count changes against them).
    sums : float64 array of shape (n_clusters, n_features)   -- OUT
    weights : float64 array of shape (n_clusters,)   -- OUT
        The M-step's weighted sums and weights (after relocation).
    assign, update : callable
        Strategies (module docstring); ``update`` already bound to X if it binds.
    labels_old : int32 array or None   -- IN
        Passed to ``update``, which may count the labels that changed against it.
    relocate : bool, default=True
        Move a point into each empty cluster first (scikit-learn's rule); the seed
        papers' timed step leaves it out.
    xp : module

    Returns
    -------
    centers_new : array of shape (n_clusters, n_features), ``centers``' dtype
    n_changed : int or None
        What ``update`` returned: the labels changed, when it counts them.

    Examples
    --------
    >>> import numpy as np
    >>> from gpumine import registry
    >>> X = np.array([[0.0], [1.0], [10.0], [11.0]])
    >>> labels = np.full(4, -1, dtype=np.int32)
    >>> sums, weights = np.zeros((2, 1)), np.zeros(2)
    >>> centers, _ = lloyd_step(
    ...     X, np.ones(4), np.array([[0.0], [10.0]]), labels, sums, weights,
    ...     assign=registry.load_strategy("kmeans.assign", "numpy"),
    ...     update=registry.load_strategy("kmeans.update", "numpy"))
    >>> labels.tolist(), centers.ravel().tolist()
    ([0, 0, 1, 1], [0.5, 10.5])
    """
    assign(X, centers, labels)
    n_changed = update(X, labels, sample_weight, sums, weights, labels_old=labels_old)
    if relocate:
        relocate_empty_clusters(X, sample_weight, centers, sums, weights, labels, xp)
    return average_centers(sums, weights, centers.dtype, xp), n_changed


def lloyd_single(X, sample_weight, centers_init, *, assign: Callable, update: Callable,
                 max_iter: int = 300, tol: float = 0.0, verbose: int = 0, xp=np) -> LloydResult:
    """One run of Lloyd's algorithm from ``centers_init`` (see the module docstring).

    Parameters
    ----------
    X : array of shape (n_samples, n_features)   -- IN
    sample_weight : array of shape (n_samples,), X's dtype   -- IN
    centers_init : array of shape (n_clusters, n_features)   -- IN
        Its dtype is the one the centres are iterated in.
    assign, update : callable
        Strategies (module docstring); ``update`` already bound to X if it binds.
    max_iter : int
    tol : float
        Already scaled (:func:`tolerance`).
    verbose : int
    xp : module

    Returns
    -------
    LloydResult
    """
    if xp is not np:
        return _lloyd_device(X, sample_weight, centers_init, assign=assign, update=update,
                             max_iter=max_iter, tol=tol, verbose=verbose, xp=xp)
    with loop_context(assign, update):
        return _lloyd_host(X, sample_weight, centers_init, assign=assign, update=update,
                           max_iter=max_iter, tol=tol, verbose=verbose)


def loop_context(*strategies):
    """The context the first of ``strategies`` with a ``loop_context`` asks for, else none."""
    for strategy in strategies:
        make = getattr(strategy, "loop_context", None)
        if make is not None:
            return make()
    return contextlib.nullcontext()


def _lloyd_host(X, sample_weight, centers_init, *, assign, update, max_iter, tol, verbose,
                xp=np) -> LloydResult:
    """:func:`lloyd_single` on NumPy."""
    n_clusters, n_features = centers_init.shape
    centers = centers_init.copy()
    labels = xp.full(X.shape[0], -1, dtype=xp.int32)
    labels_old = labels.copy()
    # Sums and weights accumulate in float64 whatever X's dtype.
    sums = xp.zeros((n_clusters, n_features), dtype=xp.float64)
    weights = xp.zeros(n_clusters, dtype=xp.float64)
    strict_convergence = False
    for iteration in range(max_iter):
        centers_new, n_changed = lloyd_step(X, sample_weight, centers, labels, sums, weights,
                                            assign=assign, update=update,
                                            labels_old=labels_old, xp=xp)
        if verbose:
            print(f"Iteration {iteration}, inertia "
                  f"{inertia(X, sample_weight, centers, labels, xp)}.")
        # The convergence test's readback: a few bytes (seed 000's rule).
        center_shift_total = float(((centers_new - centers) ** 2).sum())
        centers = centers_new
        unchanged = (n_changed == 0 if n_changed is not None
                     else bool(xp.array_equal(labels, labels_old)))
        stop, strict_convergence = stopping_rule(iteration, unchanged, center_shift_total, tol,
                                              verbose)
        if stop:
            break
        labels_old[:] = labels
    if not strict_convergence:
        assign(X, centers, labels)
    return LloydResult(labels=labels, inertia=inertia(X, sample_weight, centers, labels, xp),
                       centers=centers, n_iter=iteration + 1)


def stopping_rule(iteration, unchanged, center_shift_total, tol, verbose) -> tuple[bool, bool]:
    """The stopping rule, scikit-learn's: (stop, strict) after ``iteration``.

    Strict convergence when no label changed; else stop when the total squared centre
    shift is within ``tol``. ``verbose`` prints scikit-learn's messages. Every Lloyd loop
    (in memory, chunked, Dask) stops by it.

    Examples
    --------
    >>> stopping_rule(3, False, 1e-9, 1e-4, 0)
    (True, False)
    >>> stopping_rule(3, True, 5.0, 1e-4, 0)
    (True, True)
    """
    if unchanged:
        if verbose:
            print(f"Converged at iteration {iteration}: strict convergence.")
        return True, True
    if center_shift_total <= tol:
        if verbose:
            print(f"Converged at iteration {iteration}: center shift "
                  f"{center_shift_total} within tolerance {tol}.")
        return True, False
    return False, False


def _lloyd_device(X, sample_weight, centers_init, *, assign, update, max_iter, tol, verbose,
                  xp) -> LloydResult:
    """:func:`lloyd_single` on a GPU backend: one 24-byte readback per iteration.

    The same iteration, tests and results as the host loop (module docstring); the
    averaging, centre shift, empty count and changed count are one kernel
    (:func:`gpumine.kmeans.gpu.finish_centers`) whose status is the only readback.
    When both strategies are ``graph_safe`` (launches only: no host syncs, allocations
    or library calls), the iteration's launches are captured once into a CUDA graph
    and each later iteration is one graph launch: the small problems, where launches
    cost more than the work, then pay one launch and one readback per iteration.
    """
    from gpumine.kmeans import gpu

    if not verbose and gpu.FusedLoop.takes(X, centers_init.shape[0], assign, update):
        return _lloyd_fused(X, sample_weight, centers_init, assign=assign, max_iter=max_iter,
                            tol=tol, xp=xp)
    n_clusters, n_features = centers_init.shape
    assign = assign.bind(X) if hasattr(assign, "bind") else assign  # per-run state (bounds)
    # per-run state of the update: atomic-fixed's sums follow the assignment's moved rows
    update = update.follow(assign) if hasattr(update, "follow") else update
    centers = xp.empty_like(centers_init)
    centers_new = centers_init.copy()  # each iteration starts by taking the previous result
    labels = xp.full(X.shape[0], -1, dtype=xp.int32)
    counts = getattr(assign, "counts_changes", False)
    # Strategies that do not count changed labels are compared with a copy of the old ones.
    labels_old = None if counts else labels.copy()
    sums = xp.zeros((n_clusters, n_features), dtype=xp.float64)
    weights = xp.zeros(n_clusters, dtype=xp.float64)
    buffers = gpu.LoopBuffers()

    def step():
        centers[...] = centers_new
        if counts:
            assign(X, centers, labels, changed=buffers.changed)
        else:
            assign(X, centers, labels)
        update(X, labels, sample_weight, sums, weights)
        if not counts:
            buffers.changed[0] = xp.count_nonzero(labels != labels_old)
            labels_old[...] = labels
        gpu.finish_centers(sums, weights, centers, centers_new, buffers)

    # Graphs where both strategies are graph_safe; an assignment that becomes so later (the
    # measured race, once settled: graph_safe_later) is captured from then on. Before that
    # it may say how many of its next calls are one plain call over and over
    # (graph_calls: the race's winner between two races): the loop captures one and
    # replays it for them, telling it each replay (replayed), then runs eagerly again.
    can_graph = counts and getattr(update, "graph_safe", False) and gpu.graphs_enabled()
    use_graph = can_graph and (getattr(assign, "graph_safe", False)
                               or getattr(assign, "graph_safe_later", False))
    stretches = use_graph and hasattr(assign, "graph_calls")

    def graph_calls() -> int:
        """Calls the captured graph may still stand for (a large number: all)."""
        if getattr(assign, "graph_safe", False):
            return 1 << 30
        return assign.graph_calls() if stretches else 0
    caller = xp.cuda.get_current_stream()
    stream = gpu.capture_stream() if use_graph else caller
    if stream is not caller:  # capture needs a stream of its own; it starts after X is ready
        stream.wait_event(caller.record())
    graph = None
    strict_convergence = False
    with stream:
        for iteration in range(max_iter):
            if graph is not None and graph_calls() < 1:
                graph = None  # the stretch is over: the assignment's next call differs
            if graph is not None:
                graph.launch(stream)
                if stretches and not getattr(assign, "graph_safe", False):
                    assign.replayed()
            else:
                step()  # the first iteration also compiles and warms what the graph captures
                if (use_graph and iteration + 1 < max_iter
                        and graph_calls() >= MIN_GRAPH_CALLS):
                    stream.begin_capture()
                    step()
                    graph = stream.end_capture()
            # The iteration's one readback: shift, empty clusters, labels changed (24 bytes).
            center_shift_total, n_empty, n_changed = buffers.read_status()
            if n_empty:
                # Rare: relocation on the device (no sync), then averaging again.
                gpu.relocate_empty_clusters(X, sample_weight, centers, sums, weights, labels,
                                            n_empty)
                for strategy in (assign, update):  # labels moved outside the assignment
                    if hasattr(strategy, "reset"):
                        strategy.reset()
                gpu.finish_centers(sums, weights, centers, centers_new, buffers, count=False)
                center_shift_total = float(buffers.status[0])  # sync: 8 bytes, rare
            if verbose:
                print(f"Iteration {iteration}, inertia "
                      f"{inertia(X, sample_weight, centers, labels, xp)}.")
            stop, strict_convergence = stopping_rule(iteration, n_changed == 0,
                                                  center_shift_total, tol, verbose)
            if stop:
                break
        if not strict_convergence:
            assign(X, centers_new, labels)
        total, n_distinct = gpu.inertia_and_distinct(X, sample_weight, centers_new, labels,
                                                     n_clusters)
        result = LloydResult(labels=labels, inertia=total, centers=centers_new,
                             n_iter=iteration + 1, n_distinct=n_distinct)
    return result


def _lloyd_fused(X, sample_weight, centers_init, *, assign, max_iter, tol, xp) -> LloydResult:
    """:func:`_lloyd_device` as one cooperative kernel (:class:`gpumine.kmeans.gpu.FusedLoop`):
    the same iterations, relocation and stopping rule, the final E-step, the inertia and
    the count of clusters used, in one launch and one readback per fit. Only when more
    than ``gpu.FUSED_MAX_RELOCATIONS`` clusters are empty at once does the kernel stop for
    the host to relocate them as the launch loop does, and launch again."""
    from gpumine.kmeans import gpu

    loop = gpu.FusedLoop(X, sample_weight, centers_init)
    buffers = None  # the relocation's buffers, made only when the host relocates (rare)
    done, strict_convergence = 0, False
    while done < max_iter:
        status = loop.run(done, max_iter, tol)
        done = status.done
        if status.finished:  # the kernel took the stopping rule and made the final pass
            return LloydResult(labels=loop.labels, inertia=status.inertia,
                               centers=loop.centers[done & 1], n_iter=done,
                               n_distinct=status.n_distinct)
        parity = (done - 1) & 1
        centers_new = loop.centers[parity ^ 1]
        sums, weights = loop.sums[parity], loop.weights[parity]
        gpu.relocate_empty_clusters(X, sample_weight, loop.centers[parity], sums, weights,
                                    loop.labels, status.n_empty)
        buffers = buffers or gpu.LoopBuffers()
        gpu.finish_centers(sums, weights, loop.centers[parity], centers_new, buffers,
                           count=False)
        center_shift_total = float(buffers.status[0])  # sync: 8 bytes, rare
        loop.restart()
        stop, strict_convergence = stopping_rule(done - 1, status.n_changed == 0,
                                              center_shift_total, tol, 0)
        if stop:
            break
    # stopped by the host right after its relocation: the launch loop's ending
    centers = loop.centers[done & 1].copy()
    labels = loop.labels
    if not strict_convergence:
        assign(X, centers, labels)
    return LloydResult(labels=labels, inertia=inertia(X, sample_weight, centers, labels, xp),
                       centers=centers, n_iter=done)


def initial_centers(init, X, sample_weight, n_clusters, *, x_mean, center_dtype, random_state,
                    verbose, xp=np):
    """One run's initial centres, centred: an init strategy run on X (centred rows: all of
    them, or a sample), or the given centres minus ``x_mean``; in ``center_dtype``."""
    if callable(init):
        # the row norms live only during the init (n float64 less during the loop);
        # the GPU computes distances directly and needs none
        norms = squared_row_norms(X, xp) if xp is np else None
        centers = init(X, n_clusters, sample_weight=sample_weight, x_squared_norms=norms,
                       random_state=random_state, xp=xp)
    else:
        centers = init - x_mean
    if verbose:
        print("Initialization complete")
    return centers.astype(center_dtype, copy=False)


def better_run(best, result, n_clusters, xp=np):
    """Of two runs, the one to keep: lower inertia, and a different clustering
    (scikit-learn's rule); ``best`` may be None."""
    if best is None or (result.inertia < best.inertia and not is_same_clustering(
            result.labels, best.labels, n_clusters, xp)):
        return result
    return best


def is_same_clustering(labels1, labels2, n_clusters: int, xp=np) -> bool:
    """True if ``labels1`` determines ``labels2`` (one id of 2 per id of 1), scikit-learn's test.

    When both labelings use all ``n_clusters`` ids this means the same partition
    up to a permutation of ids.
    """
    mapping = xp.full(n_clusters, -1, dtype=xp.int64)
    mapping[labels1] = labels2
    return bool(xp.array_equal(mapping[labels1], labels2))


def fit_lloyd(X, sample_weight, *, n_clusters: int, init, n_init: int, assign: Callable,
              update: Callable, max_iter: int, tol: float, random_state,
              verbose: int = 0, xp=np, center_dtype=None, mean=None,
              restore_x: bool = True, single: Callable | None = None) -> LloydResult:
    """Fit k-means: centre X, run ``n_init`` Lloyd runs, keep the best, shift back.

    Parameters
    ----------
    X : array of shape (n_samples, n_features)   -- INOUT
        Validated and owned by the fit: it is centred in place and restored
        (up to rounding) before returning.
    sample_weight : array of shape (n_samples,), X's dtype   -- IN
    n_clusters : int
    init : callable or array of shape (n_clusters, n_features)
        An init strategy (module docstring), or explicit initial centres in
        X's original (uncentred) coordinates.
    n_init : int
    assign, update : callable
    max_iter : int
    tol : float
        Relative tolerance; scaled here by the mean feature variance.
    random_state : numpy.random.RandomState
    verbose : int
    xp : module
    center_dtype : dtype, optional
        What the centres are iterated in; default float64 on NumPy (the exact
        reference, see the module docstring), X's dtype on other backends.
    mean : array of shape (n_features,), float64, optional
        Other backends: X's column means when the caller has them (the validation's
        NaN/inf check computes them, :mod:`gpumine.adapters.column_stats`); computed
        here otherwise. Ignored on NumPy.
    restore_x : bool, default=True
        Shift X back after the fit; False when X is the fit's own copy (``copy_x``),
        which nobody reads afterwards: one pass over X less.
    single : callable, optional
        One Lloyd run, called as :func:`lloyd_single` is (the default);
        :class:`gpumine.kmeans.multi_gpu.MultiGPULloyd` runs it on several GPUs and binds
        ``update`` to each GPU's rows itself.

    Returns
    -------
    LloydResult
        ``centers`` in X's original coordinates and X's dtype.
    """
    if center_dtype is None:
        center_dtype = np.float64 if xp is np else X.dtype
    # NumPy: scikit-learn's mean. Other backends: accumulated in float64 and rounded once to
    # X's dtype, as the chunked fit's (its float64 chunk means merged), so that a streamed fit
    # centres its data as the in-memory fit does (CuPy's float32 mean accumulates in float32).
    if xp is np:
        scaled_tol = tolerance(X, tol, xp)
        x_mean = X.mean(axis=0)
    else:
        from gpumine.adapters.column_stats import column_means

        mean64 = mean if mean is not None else column_means(X)
        scaled_tol = tolerance(X, tol, xp, mean=mean64)
        x_mean = mean64.astype(X.dtype)
    shift_rows(X, x_mean, -1)
    try:
        if single is None:
            single = lloyd_single
            update = bind_update(update, X, sample_weight)  # per-fit state, e.g. hybrid's copy
        best = None
        for _ in range(n_init):
            centers_init = initial_centers(init, X, sample_weight, n_clusters, x_mean=x_mean,
                                           center_dtype=center_dtype, random_state=random_state,
                                           verbose=verbose, xp=xp)
            result = single(X, sample_weight, centers_init, assign=assign, update=update,
                            max_iter=max_iter, tol=scaled_tol, verbose=verbose, xp=xp)
            best = better_run(best, result, n_clusters, xp)
    finally:
        if restore_x:
            shift_rows(X, x_mean, +1)
    best.centers += x_mean
    best.centers = best.centers.astype(X.dtype, copy=False)
    return best


def shift_rows(X, by, sign: int) -> None:
    """``X += sign * by`` in place (``by`` a row of X's dtype), X's bits as the broadcast
    over X gives them. Where X is the column-major view of a (d, n) buffer (the GPU's
    columns), the shift runs over that buffer, ``by`` a column: a broadcast over the view
    walks it row by row, each warp reading across 32 rows (on the H100 at 1M x 128
    float32, 4.8 ms against 0.61 ms; record ``prep-probe-h100-2026-11-27-dec09df.txt``).
    On the GPU that buffer's shift is a kernel of its own
    (:func:`gpumine.adapters.column_stats.shift_columns`, the same bits), not CuPy's
    broadcast over it, which computes each element's index by divisions.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.asfortranarray([[1.0, 10.0], [3.0, 30.0]])
    >>> shift_rows(X, np.array([1.0, 10.0]), -1)
    >>> X.tolist()
    [[0.0, 0.0], [2.0, 20.0]]
    """
    columns = X.T.flags.c_contiguous and not X.flags.c_contiguous
    if (columns and not isinstance(X, np.ndarray) and X.dtype in (np.float32, np.float64)
            and by.dtype == X.dtype):
        from gpumine.adapters.column_stats import shift_columns

        shift_columns(X.T, by, sign)  # the broadcast's bits, streamed a feature at a time
        return
    target, step = (X.T, by[:, None]) if columns else (X, by)
    if sign < 0:
        target -= step
    else:
        target += step


def minus_row(X, row):
    """``X - row`` as a new array, the broadcast's bits, in X's layout: over the (d, n)
    buffer where X is its column-major view (:func:`shift_rows` says why).

    Examples
    --------
    >>> import numpy as np
    >>> out = minus_row(np.asfortranarray([[1.0, 10.0], [3.0, 30.0]]), np.array([1.0, 10.0]))
    >>> out.tolist(), out.flags.f_contiguous
    ([[0.0, 0.0], [2.0, 20.0]], True)
    """
    if X.T.flags.c_contiguous and not X.flags.c_contiguous:
        return (X.T - row[:, None]).T
    return X - row


def assign_labels(X, centers, *, assign: Callable, xp=np):
    """E-step only: the label (int32) of every row of X for fixed ``centers``; no readback."""
    labels = xp.empty(X.shape[0], dtype=xp.int32)
    assign(X, centers, labels)
    return labels


def euclidean_distances(X, centers, xp=np):
    """Distances of every row of X to every centre, (n_samples, n_clusters), X's dtype.

    Computed in float64 as ``sqrt(max(||x||^2 - 2 x.c + ||c||^2, 0))`` over row blocks.
    """
    centers64 = centers.astype(xp.float64)
    centers_squared_norms = xp.einsum("ij,ij->i", centers64, centers64)
    out = xp.empty((X.shape[0], centers.shape[0]), dtype=X.dtype)
    starts, step = chunk_rows(X.shape[0], max(centers.shape[0], X.shape[1]))
    for start in starts:
        block = X[start:start + step].astype(xp.float64)
        d2 = block @ centers64.T
        d2 *= -2.0
        d2 += xp.einsum("ij,ij->i", block, block)[:, None]
        d2 += centers_squared_norms[None, :]
        out[start:start + step] = xp.sqrt(xp.maximum(d2, 0.0, out=d2))
    return out
