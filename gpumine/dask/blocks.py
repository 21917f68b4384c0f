"""Dask collections as persisted row blocks, shared by the Dask estimators."""

from __future__ import annotations

import numpy as np

from gpumine.exceptions import InvalidInputError, InvalidParameterError, MissingDependency

__all__ = ["check_finite_block", "dask_modules", "partition_offsets", "persisted_blocks",
           "refuse_sample_weight", "tree_sum"]


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


def refuse_sample_weight(sample_weight) -> None:
    """The Dask estimators' fits take no ``sample_weight`` yet: a clear error for one."""
    if sample_weight is not None:
        raise InvalidParameterError("sample_weight is not supported on Dask collections yet")
