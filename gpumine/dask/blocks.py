"""Dask collections as persisted row blocks, shared by the Dask estimators."""

from __future__ import annotations

import numpy as np

from gpumine.exceptions import InvalidInputError, MissingDependency

__all__ = ["block_weights", "check_finite_block", "check_weight_block", "dask_modules",
           "partition_offsets", "persisted_blocks", "persisted_weights", "tree_sum",
           "weight_blocks"]


def dask_modules():
    """``(dask, dask.array)``, or a clear error naming the extra to install."""
    try:
        import dask
        import dask.array as da
    except ImportError as exc:
        raise MissingDependency('gpumine.dask needs Dask: pip install "gpumine[dask]"') from exc
    return dask, da


def as_dask_array(X):
    """A ``dask.array`` of X's rows (a dask DataFrame's chunk sizes found if unknown)."""
    _, da = dask_modules()
    if hasattr(X, "to_dask_array"):  # a dask DataFrame
        X = X.to_dask_array(lengths=True)
    if not isinstance(X, da.Array):
        raise InvalidInputError(f"expected a dask array or dataframe, got {type(X).__name__}")
    if X.ndim != 2:
        raise InvalidInputError(f"X must be 2-D, got {X.ndim} dimensions")
    if any(np.isnan(c) for c in X.chunks[0]):
        X = X.compute_chunk_sizes()
    return X


def persisted_blocks(X, dtype=None):
    """The collection as a persisted dask array of row blocks, each across all columns.

    ``dtype`` None keeps float32 and float64 and makes anything else float64.
    """
    X = as_dask_array(X)
    if dtype is None:
        dtype = X.dtype if X.dtype in (np.float32, np.float64) else np.float64
    return X.astype(dtype).rechunk({1: -1}).persist()


def _add(a, b):
    return a + b


def tree_sum(dask, parts):
    """The sum of delayed arrays, added pairwise on the workers (a tree of depth log2 of the
    parts; the pairs in partition order, so the order of the additions is fixed)."""
    level = list(parts)
    if not level:
        raise InvalidInputError("no partitions to add")
    while len(level) > 1:
        level = [dask.delayed(_add)(level[i], level[i + 1]) if i + 1 < len(level) else level[i]
                 for i in range(0, len(level), 2)]
    return level[0]


def partition_offsets(X) -> list[int]:
    """The first row of each row block of X, in X's rows."""
    return np.cumsum([0, *[int(rows) for rows in X.chunks[0][:-1]]]).tolist()  # sync: none


def check_finite_block(block, index: int, offset: int) -> np.ndarray:
    """A partition as float64 host rows; a NaN or infinity raises, naming the partition
    (``index``) and the row, in the partition and in X (``offset``: its first row)."""
    X = np.asarray(block, dtype=np.float64)
    finite = np.isfinite(X).all(axis=1)
    if not finite.all():
        row = int(np.flatnonzero(~finite)[0])  # sync: none -- host NumPy
        raise InvalidInputError(f"partition {index} has NaN or infinite values (its row {row}, "
                                f"row {offset + row} of X)")
    return X


def persisted_weights(sample_weight, X):
    """``sample_weight`` as a persisted dask array in X's row blocks and dtype, or None.

    Parameters
    ----------
    sample_weight : None, array-like, dask array or dask Series of shape (n_samples,)
        What the in-memory estimators take, as a collection or in memory.
    X : dask.array.Array
        The persisted blocks (:func:`persisted_blocks`).

    Returns
    -------
    dask.array.Array or None
        Checked for shape and type here; for NaN, infinity and negative values in the
        fit's first pass, block by block (:func:`check_weight_block`).
    """
    if sample_weight is None:
        return None
    _, da = dask_modules()
    if hasattr(sample_weight, "to_dask_array"):  # a dask Series
        sample_weight = sample_weight.to_dask_array(lengths=True)
    if not isinstance(sample_weight, da.Array):
        sample_weight = np.asarray(sample_weight)
        if sample_weight.dtype.kind not in "biuf":
            raise InvalidInputError("sample_weight must be numeric, got dtype "
                                    f"{sample_weight.dtype}")
        if sample_weight.ndim == 1 and sample_weight.shape[0] == X.shape[0]:
            sample_weight = da.from_array(sample_weight, chunks=(X.chunks[0],))
        else:
            sample_weight = da.from_array(sample_weight)
    if sample_weight.dtype.kind not in "biuf":
        raise InvalidInputError(f"sample_weight must be numeric, got dtype {sample_weight.dtype}")
    if sample_weight.ndim != 1:
        raise InvalidInputError(f"sample_weight must be 1-D, got {sample_weight.ndim} dimensions")
    if any(np.isnan(c) for c in sample_weight.chunks[0]):
        sample_weight = sample_weight.compute_chunk_sizes()
    if sample_weight.shape[0] != X.shape[0]:
        raise InvalidInputError(f"sample_weight has {sample_weight.shape[0]} values for "
                                f"{X.shape[0]} rows of X")
    # X's dtype, as the in-memory fits cast it
    return sample_weight.astype(X.dtype).rechunk((X.chunks[0],)).persist()


def weight_blocks(weights, count: int) -> list:
    """The delayed blocks of persisted ``weights``, or ``count`` Nones when unweighted."""
    return [None] * count if weights is None else weights.to_delayed().ravel().tolist()


def check_weight_block(wblock, index: int, offset: int) -> float:
    """A partition's weights' sum; a NaN, infinite or negative weight raises, naming the
    partition and the row (as :func:`check_finite_block`). None (unweighted): 0."""
    if wblock is None:
        return 0.0
    w = np.asarray(wblock, dtype=np.float64)
    bad = ~np.isfinite(w) | (w < 0)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])  # sync: none -- host NumPy
        raise InvalidInputError(f"partition {index} has a NaN, infinite or negative "
                                f"sample_weight (its row {row}, row {offset + row} of X)")
    return float(w.sum())  # sync: none -- host NumPy


def block_weights(wblock, rows: int, xp=np, dtype=np.float64):
    """A partition's weights on ``xp`` in ``dtype``: ones when unweighted (None)."""
    if wblock is None:
        return xp.ones(rows, dtype=dtype)
    return xp.asarray(np.asarray(wblock), dtype=dtype)
