"""Per-feature statistics of device data in one pass over its column buffer.

:func:`column_means` is each feature's mean accumulated in double. It serves twice: read
back (8 bytes a feature), it is the validation's NaN/inf check -- a NaN or an infinity
makes its column's sum NaN or infinite, so finite means prove finite data (a sum of finite
values can overflow only near float64's largest values, and the caller then checks every
element) -- and, kept on the device, it is the mean a k-means fit centres its data by.
Two launches and no CuPy reduction: at Corel size (17,695 x 18) on the H100 the check
costs 88 us where CuPy's ``isfinite(X).all()`` and ``X.mean(axis=0, dtype=float64)`` cost
72 and 46 (record ``session-scratch-2026-11-24-a1ef4bd.json``).

``column_means(X)`` of a CuPy (n, d) array returns the d means on the device; reading them
back is the caller's one sync (``_check_finite_device`` in ``adapters/columns.py``).
"""

from __future__ import annotations

import numpy as np

from gpumine.backend import cupy_module, set_column_major
from gpumine.kernels import BLOCK, declares, device_attribute, get_kernel, launch

__all__ = ["column_major", "column_means", "divided_row_sums", "shift_columns"]

_SOURCE = "columns.cu"
_MAX_GRID_Y = 65535  # features per launch (grid.y)
_ROW_BLOCK = 128
#: From this many features on, :func:`column_major` transposes by tiles; below, CuPy's
#: copy, whose reads of a row's few features already share cache lines. On the H100 (2^26
#: values) the tiles took 0.54 ms against 0.79 at 8 float32 features, 0.70 against 0.61 at
#: 6; 0.59 against 1.56 at 8 float64 features, 1.08 against 0.87 at 4 (record
#: ``column-major-tiles-h100-2026-11-27-c27526c.txt``).
TILED_FROM_FEATURES = 8


@declares(_SOURCE, "column_sums", ("float", "double"), (BLOCK,))
def column_means(X):
    """Mean of every feature of X, accumulated in double; nothing is read back.

    Parameters
    ----------
    X : cupy.ndarray of shape (n_samples, n_features), float32 or float64   -- IN
        Column-major (a view of a (n_features, n_samples) buffer) or any layout (then
        copied into one).

    Returns
    -------
    cupy.ndarray of shape (n_features,), float64
        NaN or infinite for a feature holding a NaN or an infinity.
    """
    cp = cupy_module()
    n, d = X.shape
    XT = column_major(X).T
    blocks = max(1, min(-(-n // BLOCK), -(-device_attribute("MultiProcessorCount") * 8 // d)))
    partial = cp.empty((d, blocks), dtype=cp.float64)
    kernel = get_kernel(_SOURCE, "column_sums", X.dtype, BLOCK)
    for j0 in range(0, d, _MAX_GRID_Y):  # features in grid.y, at most 65535 per launch
        j1 = min(d, j0 + _MAX_GRID_Y)
        launch(kernel, (blocks, j1 - j0), BLOCK, (XT[j0:j1], np.int64(n), partial[j0:j1]))
    return divided_row_sums(partial, n)


@declares(_SOURCE, "divided_row_sums")
def divided_row_sums(partial, divisor: float):
    """``partial.sum(axis=1) / divisor`` of a (rows, columns) float64 array, each row added
    left to right (the same value run to run); nothing is read back."""
    cp = cupy_module()
    rows, columns = partial.shape
    partial = cp.ascontiguousarray(partial)
    out = cp.empty(rows, dtype=cp.float64)
    launch(get_kernel(_SOURCE, "divided_row_sums"), -(-rows // _ROW_BLOCK), _ROW_BLOCK,
           (partial, np.int32(rows), np.int32(columns), np.float64(divisor), out))
    return out


@declares(_SOURCE, "transpose_tiles", ("float", "double"))
def column_major(X):
    """X (n, d) on the device as the (n, d) view of a (d, n) C-contiguous buffer: X itself
    where it is one, else a copy.

    A row-major float X of :data:`TILED_FROM_FEATURES` (8) features or more is transposed
    through 32 x 32 tiles in shared memory (``transpose_tiles``: reads and writes a row
    at a time), where CuPy's copy into the transposed layout reads each warp's 32 values
    from 32 rows; on the H100 at 1M x 128 float32 it took 4.1 ms against 0.61 for a
    plain copy of X (record ``prep-probe-h100-2026-11-27-dec09df.txt``). The same values
    either way.

    Parameters
    ----------
    X : cupy.ndarray of shape (n_samples, n_features)   -- IN

    Returns
    -------
    cupy.ndarray of shape (n_samples, n_features)
        ``result.T`` is C-contiguous.
    """
    cp = cupy_module()
    if X.T.flags.c_contiguous:
        return X
    n, d = X.shape
    if (X.flags.c_contiguous and TILED_FROM_FEATURES <= d <= 32 * _MAX_GRID_Y
            and X.dtype in (np.float32, np.float64) and n > 0):
        out = cp.empty((d, n), dtype=X.dtype)
        launch(get_kernel(_SOURCE, "transpose_tiles", X.dtype), (-(-n // 32), -(-d // 32)),
               (32, 8), (X, np.int64(n), np.int64(d), out))
        return out.T
    return cp.ascontiguousarray(X.T).T


@declares(_SOURCE, "shift_columns", ("float", "double"))
def shift_columns(XT, by, sign: int) -> None:
    """``XT += sign * by[:, None]`` in place on a (d, n) C-contiguous device buffer, ``by``
    of XT's dtype: the broadcast's arithmetic and bits (one rounded add or subtract a
    value), in a kernel that streams each feature's row, where CuPy's broadcast over the
    buffer computes each element's index by divisions.

    Parameters
    ----------
    XT : cupy.ndarray of shape (n_features, n_samples), C-contiguous   -- INOUT
    by : cupy.ndarray of shape (n_features,), XT's dtype   -- IN
    sign : {-1, +1}
    """
    d, n = XT.shape
    if n == 0 or d == 0:
        return
    cp = cupy_module()
    by = cp.ascontiguousarray(by, dtype=XT.dtype)
    rows = min(d, _MAX_GRID_Y)
    blocks = max(1, min(-(-n // 1024), -(-device_attribute("MultiProcessorCount") * 32 // rows)))
    launch(get_kernel(_SOURCE, "shift_columns", XT.dtype), (blocks, rows), 256,
           (XT, by, np.int64(n), np.int32(d), np.int32(sign < 0)))


set_column_major(column_major)  # Backend.to_device_columns transposes by tiles from here on
