"""Lloyd's algorithm over chunks of rows: the in-memory loop, with X read one chunk at a time.

What a fit of data larger than the host's or the GPU's memory runs (a ``pyarrow``
dataset, or any input with ``GPUKMeans(batch_rows=...)``). Every pass reads the
chunks again, in the same order, from a *chunk source*: a callable that returns an
iterator of ``(X_chunk, weight_chunk)`` pairs, each chunk a validated, finite
(rows, d) array on the backend of ``xp`` (every chunk of one dtype), the weights of
X's dtype or None (every row weighs 1).

The arithmetic is the in-memory loop's (:mod:`gpumine.kmeans.lloyd`): the same
strategies assign each chunk and give its weighted sums, which are added into
float64 accumulators (:func:`chunk_step`); relocation, averaging, the centre shift
and the stopping rule are the same functions. From the same initial centres a
chunked fit therefore gives the in-memory fit's labels, ``n_iter`` and centres, up
to float64 rounding of the summation order -- with two exceptions, both documented
where they happen. The data's mean and variance are accumulated over the chunks
(Chan's pairwise update, in float64) rather than by NumPy's pairwise summation of
the whole array. Where the in-memory loop breaks ties between equally far points
for empty clusters by ``argpartition``'s order, this loop takes the lowest row
index.

A string or callable ``init`` runs on a uniform sample of ``init_sample_size`` rows
drawn in one streaming pass (reservoir sampling with ``random_state``): k-means++
needs all rows in memory, and a sample of many more rows than clusters gives
centres of the same quality.

Memory: the labels (4 bytes per row, twice) on the backend, plus one chunk.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator

import numpy as np

from gpumine.exceptions import InvalidInputError
from gpumine.kmeans.lloyd import (
    LloydResult,
    average_centers,
    better_run,
    inertia,
    initial_centers,
    loop_context,
    minus_row,
    stopping_rule,
)

__all__ = [
    "DEFAULT_INIT_SAMPLE",
    "ChunkSource",
    "chunk_statistics",
    "chunk_step",
    "fit_lloyd_chunked",
    "merge_moments",
    "relocate_found",
]

#: ``(X_chunk, weight_chunk)`` pairs, the same chunks in the same order at every call.
ChunkSource = Callable[[], Iterator[tuple[object, object]]]
#: Rows the init strategy sees when the data is streamed.
DEFAULT_INIT_SAMPLE = 100_000


def chunk_step(X, sample_weight, centers, labels, sums, weights, *, assign, update,
               chunk_sums, chunk_weights, labels_old=None):
    """Assign one chunk and add its weighted sums and weights into the accumulators.

    Parameters
    ----------
    X : array of shape (rows, n_features)   -- IN
    sample_weight : array of shape (rows,)   -- IN
    centers : array of shape (n_clusters, n_features)   -- IN
    labels : int32 array of shape (rows,)   -- OUT
        This chunk's labels (the previous ones on entry).
    sums, weights : float64 arrays of shape (n_clusters, n_features), (n_clusters,)   -- INOUT
        The accumulators of the pass; this chunk's sums and weights are added.
    assign, update : callable
        Strategies (:mod:`gpumine.kmeans.lloyd`); ``update`` writes into the
        scratch buffers ``chunk_sums`` and ``chunk_weights`` (OUT).
    labels_old : int32 array of shape (rows,) or None   -- IN

    Returns
    -------
    int or None
        Labels changed in this chunk, when ``update`` counts them.
    """
    assign(X, centers, labels)
    n_changed = update(X, labels, sample_weight, chunk_sums, chunk_weights,
                       labels_old=labels_old)
    sums += chunk_sums
    weights += chunk_weights
    return n_changed


def merge_moments(count, mean, m2, rows, chunk_mean, chunk_m2):
    """Chan et al.'s pairwise update: (count, mean, sum of squared deviations) of a part
    so far merged with a chunk's; ``mean`` None starts from the chunk."""
    if mean is None:
        return rows, chunk_mean, chunk_m2
    total = count + rows
    delta = chunk_mean - mean
    return (total, mean + delta * (rows / total),
            m2 + chunk_m2 + delta ** 2 * (count * rows / total))


def chunk_statistics(chunks: ChunkSource, xp=np):
    """One pass: rows per chunk, dtype, float64 mean per feature, mean per-feature variance.

    Chan et al.'s pairwise update merges each chunk's mean and sum of squared
    deviations (both in float64), so the result does not depend on the chunking
    beyond rounding.

    Raises
    ------
    InvalidInputError
        No rows, or chunks of different widths or dtypes.
    """
    count, mean, m2, dtype, width, sizes = 0, None, None, None, None, []
    for X, _ in chunks():
        rows = int(X.shape[0])
        if rows == 0:
            continue
        sizes.append(rows)
        if dtype is None:
            dtype, width = X.dtype, int(X.shape[1])
        elif X.dtype != dtype or X.shape[1] != width:
            raise InvalidInputError(f"chunks differ: ({rows}, {X.shape[1]}) {X.dtype} after "
                                    f"(_, {width}) {dtype}")
        chunk_mean = xp.mean(X, axis=0, dtype=xp.float64)
        chunk_m2 = ((X.astype(xp.float64) - chunk_mean) ** 2).sum(axis=0)
        count, mean, m2 = merge_moments(count, mean, m2, rows, chunk_mean, chunk_m2)
    if not count:
        raise InvalidInputError("no rows to cluster")
    return sizes, dtype, mean, float((m2 / count).mean())  # sync: 8 bytes, once per fit


def _reservoir(chunks: ChunkSource, size: int, random_state, xp):
    """A uniform sample of ``size`` rows (all of them when fewer) and their weights.

    Algorithm R over the chunks, its random numbers drawn from ``random_state`` in row
    order: the same chunks and seed give the same sample however they are cut.
    """
    sample_X, sample_w, seen = None, None, 0
    for X, w in chunks():
        rows = X.shape[0]
        if w is None:
            w = xp.ones(rows, dtype=X.dtype)
        if sample_X is None:
            sample_X = xp.empty((size, X.shape[1]), dtype=X.dtype)
            sample_w = xp.empty(size, dtype=X.dtype)
        fill = max(0, min(size - seen, rows))
        if fill:
            sample_X[seen:seen + fill] = X[:fill]
            sample_w[seen:seen + fill] = w[:fill]
        rest = rows - fill
        if rest:
            # row r (0-based, global) replaces slot j = randint(0, r] when j < size
            positions = np.arange(seen + fill, seen + rows)
            slots = (random_state.random_sample(rest) * (positions + 1)).astype(np.int64)
            keep = np.flatnonzero(slots < size)
            if keep.size:
                rows_kept = fill + keep
                # later rows win a slot taken twice, as the sequential algorithm does
                slot_of = {int(s): int(r) for s, r in zip(slots[keep], rows_kept, strict=True)}
                slot_list = np.fromiter(slot_of, dtype=np.int64)
                row_list = xp.asarray(np.fromiter(slot_of.values(), dtype=np.int64))
                sample_X[xp.asarray(slot_list)] = X[row_list]
                sample_w[xp.asarray(slot_list)] = w[row_list]
        seen += rows
    taken = min(size, seen)
    return sample_X[:taken], sample_w[:taken]


def _centred(chunks: ChunkSource, x_mean, xp) -> ChunkSource:
    def source():
        for X, w in chunks():
            # a new array: a chunk may be a cached or reused buffer, read again next pass
            yield minus_row(X, x_mean), (xp.ones(X.shape[0], dtype=X.dtype) if w is None else w)
    return source


def _relocate(chunks: ChunkSource, centers_old, sums, weights, label_chunks, xp) -> None:
    """:func:`gpumine.kmeans.lloyd.relocate_empty_clusters` over the chunks.

    Each chunk offers its farthest ``n_empty`` points (unweighted squared distance to
    their centre); the farthest of all are taken in decreasing distance, ties to the
    lowest row, and moved as the in-memory loop moves them.
    """
    # sync (GPU): k booleans, every iteration (the device loop's status readback has them)
    empty = np.flatnonzero(xp.asnumpy(weights == 0) if xp is not np else weights == 0)
    n_empty = int(empty.size)
    if n_empty == 0:
        return
    found = []  # (distance, row, point, weight, label)
    offset = 0
    for (X, w), labels in zip(chunks(), label_chunks, strict=True):
        distances = ((X - centers_old[labels]) ** 2).sum(axis=1)
        take = min(n_empty, X.shape[0])
        top = xp.argpartition(distances, -take)[-take:] if take < X.shape[0] else \
            xp.arange(X.shape[0])
        # sync (GPU): a few rows per chunk, only in an iteration with an empty cluster
        for i in (top.get() if xp is not np else top).tolist():
            found.append((float(distances[i]), offset + i, X[i], w[i], int(labels[i])))
        offset += X.shape[0]
    relocate_found(empty, found, sums, weights)


def relocate_found(empty, found, sums, weights) -> None:
    """Move the farthest of ``found`` into the ``empty`` clusters (the in-memory rule).

    ``found``: ``(distance, row, point, weight, label)`` candidates from every chunk or
    partition, each chunk's farthest; taken in decreasing distance, ties to the lowest
    row, each point's weight leaving its old cluster; nothing when all distances are 0.
    ``sums`` and ``weights`` INOUT.
    """
    if not found or max(item[0] for item in found) == 0:
        return
    found = sorted(found, key=lambda item: (-item[0], item[1]))
    # Sequential on purpose: two relocated points may come from the same old cluster.
    for new_cluster, (_, _, point, weight, old_cluster) in zip(empty.tolist(), found,
                                                               strict=False):
        sums[old_cluster] -= point * weight
        sums[new_cluster] = point * weight
        weights[new_cluster] = weight
        weights[old_cluster] -= weight


def _single(chunks: ChunkSource, sizes, centers_init, *, assign, update, max_iter, tol, verbose,
            xp) -> LloydResult:
    """One Lloyd run over centred chunks (:func:`gpumine.kmeans.lloyd.lloyd_single`'s loop)."""
    n_clusters, n_features = centers_init.shape
    n_samples = int(sum(sizes))
    centers = centers_init.copy()
    labels = xp.full(n_samples, -1, dtype=xp.int32)
    labels_old = labels.copy()
    bounds = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    label_chunks = [labels[a:b] for a, b in itertools.pairwise(bounds)]
    old_chunks = [labels_old[a:b] for a, b in itertools.pairwise(bounds)]
    sums = xp.zeros((n_clusters, n_features), dtype=xp.float64)
    weights = xp.zeros(n_clusters, dtype=xp.float64)
    chunk_sums, chunk_weights = xp.empty_like(sums), xp.empty_like(weights)
    strict_convergence = False
    for iteration in range(max_iter):
        sums[...] = 0
        weights[...] = 0
        changed, counted = 0, True
        for (X, w), chunk_labels, chunk_old in zip(chunks(), label_chunks, old_chunks,
                                                   strict=True):
            n_changed = chunk_step(X, w, centers, chunk_labels, sums, weights, assign=assign,
                                   update=update, chunk_sums=chunk_sums,
                                   chunk_weights=chunk_weights, labels_old=chunk_old)
            counted = counted and n_changed is not None
            changed += n_changed or 0
        _relocate(chunks, centers, sums, weights, label_chunks, xp)
        centers_new = average_centers(sums, weights, centers.dtype, xp)
        if verbose:
            total = sum(inertia(X, w, centers, lab, xp)
                        for (X, w), lab in zip(chunks(), label_chunks, strict=True))
            print(f"Iteration {iteration}, inertia {total}.")
        center_shift_total = float(((centers_new - centers) ** 2).sum())  # sync: 8 bytes
        centers = centers_new
        unchanged = changed == 0 if counted else bool(xp.array_equal(labels, labels_old))
        stop, strict_convergence = stopping_rule(iteration, unchanged, center_shift_total, tol,
                                              verbose)
        if stop:
            break
        labels_old[...] = labels
    total = 0.0
    for (X, w), chunk_labels in zip(chunks(), label_chunks, strict=True):
        if not strict_convergence:
            assign(X, centers, chunk_labels)
        total += inertia(X, w, centers, chunk_labels, xp)
    return LloydResult(labels=labels, inertia=total, centers=centers, n_iter=iteration + 1)


def fit_lloyd_chunked(chunks: ChunkSource, *, n_clusters: int, init, n_init: int,
                      assign: Callable, update: Callable, max_iter: int, tol: float,
                      random_state, init_sample_size: int = DEFAULT_INIT_SAMPLE,
                      verbose: int = 0, xp=np, center_dtype=None) -> LloydResult:
    """:func:`gpumine.kmeans.lloyd.fit_lloyd` over a chunk source (module docstring).

    Parameters
    ----------
    chunks : ChunkSource
        ``chunks()`` yields ``(X_chunk, weight_chunk)`` in the same order at every call.
    n_clusters, n_init, assign, update, max_iter, tol, random_state, verbose, xp :
        As for :func:`~gpumine.kmeans.lloyd.fit_lloyd` (``update`` already bound, if
        it binds, is not supported: binding strategies need all of X).
    init : callable or array of shape (n_clusters, n_features)
        A callable runs on a uniform sample of ``init_sample_size`` rows.
    init_sample_size : int

    Returns
    -------
    LloydResult
        ``labels`` of every row in chunk order, ``centers`` in X's coordinates and
        dtype.

    Examples
    --------
    >>> import numpy as np
    >>> from gpumine import registry
    >>> X = np.array([[0.0], [1.0], [10.0], [11.0], [20.0]])
    >>> chunks = lambda: ((X[i:i + 2], None) for i in range(0, len(X), 2))
    >>> result = fit_lloyd_chunked(
    ...     chunks, n_clusters=2, init=np.array([[0.0], [20.0]]), n_init=1,
    ...     assign=registry.load_strategy("kmeans.assign", "numpy"),
    ...     update=registry.load_strategy("kmeans.update", "numpy"),
    ...     max_iter=10, tol=0.0, random_state=np.random.RandomState(0))
    >>> result.labels.tolist(), result.centers.ravel().round(3).tolist()
    ([0, 0, 1, 1, 1], [0.5, 13.667])
    """
    if hasattr(update, "bind"):
        raise InvalidInputError("this update strategy keeps a copy of all of X per fit; it "
                                "cannot stream (choose another update)")
    sizes, dtype, mean, variance = chunk_statistics(chunks, xp)
    if sum(sizes) < n_clusters:
        raise InvalidInputError(f"n_samples={sum(sizes)} should be >= n_clusters={n_clusters}.")
    if center_dtype is None:
        center_dtype = np.float64 if xp is np else dtype
    x_mean = mean.astype(dtype)
    centred = _centred(chunks, x_mean, xp)

    def source():  # empty chunks (a filtered-out file) take no part
        return ((X, w) for X, w in centred() if X.shape[0])

    best = None
    for _ in range(n_init):
        sample, sample_weight = (_reservoir(source, init_sample_size, random_state, xp)
                                 if callable(init) else (None, None))
        centers_init = initial_centers(init, sample, sample_weight, n_clusters, x_mean=x_mean,
                                       center_dtype=center_dtype, random_state=random_state,
                                       verbose=verbose, xp=xp)
        with loop_context(assign, update):
            result = _single(source, sizes, centers_init, assign=assign, update=update,
                             max_iter=max_iter, tol=variance * tol, verbose=verbose, xp=xp)
        best = better_run(best, result, n_clusters, xp)
    best.centers = (best.centers + x_mean).astype(dtype)
    return best
