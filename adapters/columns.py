"""The one conversion entry point: any supported input to a validated column-major array.

:func:`as_columns` takes NumPy or CuPy arrays, pandas DataFrames and Series,
and pyarrow Tables, RecordBatches, Arrays and ChunkedArrays, and returns a
:class:`Columns`: the data as an ``(n_samples, n_features)`` array on the chosen
backend plus the feature names. :func:`validate_input` is what the estimators
call: the same conversion plus scikit-learn's feature-name and ``n_features_in_``
bookkeeping.

Data path
---------
pandas and Arrow data are already columnar, so no row-major matrix is ever
built on the host. One ``(n_features, n_samples)`` C-contiguous buffer is
allocated on the backend (its transpose is the returned ``X``, column-major),
and each column is copied into its row of that buffer once:

* a numeric column without nulls is read in place (a NumPy view of the pandas
  column or of each Arrow chunk's data buffer, no host copy) and copied once,
  casting on the way: on the CPU into the host buffer, on the GPU straight to
  the device (one host-to-device copy per chunk; a column of another dtype is
  cast on the device);
* a column that needs a host conversion first -- nullable columns with nulls
  dropped, booleans, decimals, pandas masked (``Int64``, ``Float64``) columns --
  is converted on the host (one extra host copy of that column) and then copied
  as above.

:attr:`Columns.host_bytes_copied` and :attr:`Columns.device_bytes` report what
moved, so the path can be checked (the tests do).

NumPy input on the CPU is validated by :func:`sklearn.utils.check_array` and kept
row-major, exactly as scikit-learn's reference sees it; on the GPU it is copied
once and transposed on the device (:meth:`gpumine.backend.Backend.to_device_columns`).

Validation
----------
Every column is checked and an error names it: non-numeric columns (strings,
dates), dictionary/categorical columns (encode them first), infinite values,
and nulls or NaN: ``nulls="error"`` (the default) raises, ``nulls="drop"`` drops
the rows that have one and reports them in :attr:`Columns.kept_rows`. Boolean
columns are cast to 0/1 and decimal columns to float, each with a
:class:`~sklearn.exceptions.DataConversionWarning`. The output dtype is float32
when every column is float32 (and float32 is allowed), else float64 -- the rule
of :func:`sklearn.utils.check_array`.

Examples
--------
>>> import pandas as pd
>>> from gpumine.adapters import as_columns
>>> from gpumine.backend import get_backend
>>> frame = pd.DataFrame({"a": [1.0, 2.0, None], "b": [4, 5, 6]})
>>> cols = as_columns(frame, backend=get_backend("cpu"), nulls="drop")
>>> cols.X.tolist(), cols.feature_names, cols.kept_rows.tolist()
([[1.0, 4.0], [2.0, 5.0]], ['a', 'b'], [True, True, False])
>>> cols.X.flags.f_contiguous  # column-major
True
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from sklearn.exceptions import DataConversionWarning
from sklearn.utils import check_array
from sklearn.utils.validation import validate_data

# column_stats also gives Backend.to_device_columns its transpose by tiles (on import)
from gpumine.adapters.column_stats import column_means
from gpumine.exceptions import InvalidInputError, InvalidParameterError
from gpumine.validation import is_device_array

__all__ = ["NULLS", "Columns", "as_columns", "validate_input"]

#: Accepted values of the ``nulls`` argument.
NULLS = ("error", "drop")

_FLOATS = (np.dtype(np.float64), np.dtype(np.float32))
#: The fewest elements of a piece of a column staged by one host thread (1 MB of float32).
_MIN_PIECE = 1 << 18


@dataclass
class Columns:
    """Validated input data.

    Attributes
    ----------
    X : array of shape (n_samples, n_features)
        On the requested backend, float32 or float64, finite. Column-major (the
        transpose of a C-contiguous ``(n_features, n_samples)`` buffer) except
        NumPy input on the CPU, which stays as ``check_array`` returns it.
    feature_names : list of str or None
        Column names when the input had string column names.
    kept_rows : ndarray of bool, shape (n_input_rows,), or None
        With ``nulls="drop"``: which input rows are in ``X``; None when no row
        was dropped.
    host_bytes_copied : int
        Bytes copied on the host before the final copy into ``X``'s buffer.
    device_bytes : int
        Bytes copied from the host to the GPU.
    means : cupy.ndarray of shape (n_features,), float64, or None
        Device data checked for NaN/inf by its column means
        (:mod:`gpumine.adapters.column_stats`): those means, which a fit can centre by
        without a pass of its own; None elsewhere.
    """

    X: object
    feature_names: list[str] | None
    kept_rows: np.ndarray | None = None
    host_bytes_copied: int = 0
    device_bytes: int = 0
    means: object = None

    @property
    def n_samples(self) -> int:
        """Rows of ``X``."""
        return int(self.X.shape[0])


def _as_table(data):
    """pandas DataFrame (as is) or a pyarrow Table for columnar input; None otherwise."""
    module = type(data).__module__
    if module.startswith("pandas"):
        import pandas as pd

        if isinstance(data, pd.Series):
            return data.to_frame()
        if isinstance(data, pd.DataFrame):
            return data
        return None
    if module.startswith("pyarrow"):
        import pyarrow as pa

        if isinstance(data, pa.Table):
            return data
        if isinstance(data, pa.RecordBatch):
            return pa.Table.from_batches([data])
        if isinstance(data, (pa.Array, pa.ChunkedArray)):
            return pa.table({"x0": data})
    return None


class _Column:
    """One input column, checked: its numeric chunks and its missing-value mask."""

    def __init__(self, name: str, chunks: list, missing, float32: bool, host_bytes: int):
        self.name = name
        self.chunks = chunks          # NumPy arrays (views where possible), in row order
        self.missing = missing        # bool mask of nulls/NaN, or None when there are none
        self.float32 = float32
        self.host_bytes = host_bytes  # bytes copied on the host to get ``chunks``


def _describe(name) -> str:
    return f"column {name!r}"


def _check_finite(name, chunks, nulls):
    """Mask of NaN rows (None if none); raises on infinity, and on NaN with nulls='error'."""
    masks = []
    for values in chunks:
        if values.dtype.kind != "f":
            masks.append(None)
            continue
        finite = np.isfinite(values)
        if finite.all():
            masks.append(None)
            continue
        if np.isinf(values).any():
            raise InvalidInputError(f"{_describe(name)} has infinite values")
        if nulls == "error":
            raise InvalidInputError(
                f"{_describe(name)} has {int((~finite).sum())} NaN values (nulls='error'); "
                "drop or impute them, or pass nulls='drop' to drop those rows")
        masks.append(~finite)
    if all(m is None for m in masks):
        return None
    return np.concatenate([np.zeros(len(v), bool) if m is None else m
                           for v, m in zip(chunks, masks, strict=True)])


def _arrow_column(name, column, nulls, scan=True) -> _Column:
    """Check an Arrow (chunked) column and expose its values as NumPy chunks; ``scan=False``
    leaves the NaN/inf scan to the caller (the device's, after the copy)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = column.type
    if pa.types.is_dictionary(kind):
        raise InvalidInputError(f"{_describe(name)} is categorical ({kind}); encode it first, "
                                "e.g. with sklearn's OneHotEncoder, or leave it out")
    host_bytes = 0
    if pa.types.is_boolean(kind) or pa.types.is_decimal(kind):
        what = "boolean" if pa.types.is_boolean(kind) else f"decimal ({kind})"
        warnings.warn(f"{_describe(name)} is {what}: cast to float64", DataConversionWarning,
                      stacklevel=4)
        column = pc.cast(column, pa.float64())
        host_bytes += column.nbytes
    elif pa.types.is_null(kind):
        column = pa.chunked_array([pa.nulls(len(column), pa.float64())])
    elif not (pa.types.is_integer(kind) or pa.types.is_floating(kind)):
        raise InvalidInputError(f"{_describe(name)} has type {kind}, not a number; select "
                                "numeric columns only")
    if column.null_count and nulls == "error":
        raise InvalidInputError(
            f"{_describe(name)} has {column.null_count} nulls (nulls='error'); drop or impute "
            "them, or pass nulls='drop' to drop those rows")
    chunks, masks = [], []
    for chunk in column.chunks:
        if chunk.null_count:
            masks.append(chunk.is_null().to_numpy(zero_copy_only=False))
            # fill_null keeps every row so that row positions line up across columns
            chunk = pc.fill_null(chunk, pa.scalar(0, chunk.type))
            host_bytes += chunk.nbytes
        else:
            masks.append(None)
        chunks.append(chunk.to_numpy(zero_copy_only=False))
    missing = _merge_masks(chunks, masks, _check_finite(name, chunks, nulls) if scan else None)
    return _Column(name, chunks, missing, pa.types.is_float32(kind), host_bytes)


def _merge_masks(chunks, null_masks, nan_mask):
    if all(m is None for m in null_masks):
        return nan_mask
    nulls = np.concatenate([np.zeros(len(v), bool) if m is None else m
                            for v, m in zip(chunks, null_masks, strict=True)])
    return nulls if nan_mask is None else nulls | nan_mask


def _pandas_column(name, series, nulls, scan=True) -> _Column:
    """Check a pandas column: NumPy-backed numbers are read in place, the rest through Arrow."""
    import pandas as pd
    import pyarrow as pa

    dtype = series.dtype
    if isinstance(dtype, pd.CategoricalDtype):
        raise InvalidInputError(f"{_describe(name)} is categorical; encode it first, e.g. "
                                "with sklearn's OneHotEncoder, or leave it out")
    if isinstance(dtype, np.dtype) and dtype.kind in "iuf":
        values = series.to_numpy(copy=False)
        missing = _check_finite(name, [values], nulls) if scan else None
        return _Column(name, [values], missing, dtype == np.float32, 0)
    if isinstance(dtype, np.dtype) and dtype.kind == "b":
        warnings.warn(f"{_describe(name)} is boolean: cast to float64", DataConversionWarning,
                      stacklevel=4)
        values = series.to_numpy(dtype=np.float64)
        return _Column(name, [values], None, False, values.nbytes)
    if isinstance(dtype, np.dtype) and dtype.kind != "O":
        raise InvalidInputError(f"{_describe(name)} has dtype {dtype}, not a number; select "
                                "numeric columns only")
    # Extension dtypes (Int64, Float64, boolean, ArrowDtype) and object columns
    # (e.g. decimal.Decimal values): let Arrow say what they hold.
    try:
        column = pa.chunked_array([pa.array(series, from_pandas=True)])
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError):
        raise InvalidInputError(f"{_describe(name)} has dtype {dtype} with non-numeric values; "
                                "select numeric columns only") from None
    checked = _arrow_column(name, column, nulls, scan)
    checked.host_bytes += column.nbytes
    return checked


def _names(frame) -> list:
    return list(frame.column_names) if hasattr(frame, "column_names") else list(frame.columns)


def _check_nulls(nulls):
    if nulls not in NULLS:
        raise InvalidParameterError(f"nulls must be one of {NULLS}, got {nulls!r}")


def _columnar(frame, backend, dtype, nulls, out=None, allow_empty=False) -> Columns:
    """Validate a DataFrame or Arrow Table column by column and copy it once, column-major."""
    names = _names(frame)
    if not names:
        raise InvalidInputError(f"0 feature(s) (shape=({len(frame)}, 0)) while a minimum of 1 is "
                                "required.")
    is_arrow = hasattr(frame, "column_names")
    # Bound for the GPU with nulls="error", the NaN/inf scan is the device's, after the copy
    # (_check_finite_device); the host scans the columns only when that fails, to name one.
    deferred = backend.is_gpu and nulls == "error"
    checked = []
    for position, name in enumerate(names):
        if is_arrow:
            checked.append(_arrow_column(name, frame.column(position), nulls, not deferred))
        else:
            checked.append(_pandas_column(name, frame.iloc[:, position], nulls, not deferred))
    n_rows = len(frame)
    missing = None
    for column in checked:
        if column.missing is not None:
            missing = column.missing if missing is None else missing | column.missing
    kept = None if missing is None else ~missing
    n_samples = n_rows if kept is None else int(kept.sum())
    if n_samples < 1 and not allow_empty:
        raise InvalidInputError(
            f"Found array with 0 sample(s) (shape=({n_samples}, {len(names)})) while a minimum "
            "of 1 is required" + (" (every row has a null)" if n_rows else "."))
    xp = backend.xp
    if out is None:
        out_dtype = _output_dtype(all(c.float32 for c in checked), dtype)
        buffer = xp.empty((len(names), n_samples), dtype=out_dtype)
    else:  # a slice of a caller's (n_features, n_rows) buffer, at least n_samples wide
        out_dtype = out.dtype
        buffer = out[:, :n_samples]
    host_bytes = sum(c.host_bytes for c in checked)
    device_bytes = 0
    staged = (backend.is_gpu and kept is None and n_samples > 0
              and all(v.dtype == out_dtype for c in checked for v in c.chunks))
    if staged:
        device_bytes = _staged_columns(checked, buffer, backend)
    for row, column in enumerate(checked if not staged else ()):
        start = out = 0
        for values in column.chunks:
            length = len(values)
            if kept is not None:
                values = values[kept[start:start + length]]
                host_bytes += values.nbytes
            start += length
            target = buffer[row, out:out + len(values)]
            out += len(values)
            if not backend.is_gpu:
                target[...] = values  # the one host copy, cast on the way
                continue
            device_bytes += values.nbytes
            if values.dtype == out_dtype:
                target.set(np.ascontiguousarray(values))  # straight into the device buffer
            else:
                target[...] = xp.asarray(values)  # one host-to-device copy, cast on the device
    means = None
    if deferred and n_samples > 0:
        try:
            means = _check_finite_device(buffer.T, backend)
        except InvalidInputError:
            for column in checked:  # the host's scan, to say which column (only on failure)
                _check_finite(column.name, column.chunks, nulls)
            raise
    feature_names = [str(n) for n in names] if all(isinstance(n, str) for n in names) else None
    return Columns(buffer.T, feature_names, kept, host_bytes, device_bytes, means=means)


def _staged_columns(checked, buffer, backend) -> int:
    """The checked columns (each of ``buffer``'s dtype) into the (d, n) device ``buffer``
    through one pinned buffer: host threads fill it piece by piece, and each piece goes up
    on a side stream as soon as it is filled, while the next ones are being filled.

    In place of one pageable ``set`` per column, which made the driver stage every column
    through its own small pinned buffer, and left the copies to one thread. The pieces are
    columns cut so that every thread of the host pool has two or more (a column a piece left
    threads idle where d is smaller than the pool: WaveCluster's d = 2). Returns the bytes
    copied.
    """
    import cupyx

    from gpumine.backend import host_pool, host_pool_threads

    cp = backend.xp
    d, n = buffer.shape
    pinned = cupyx.empty_pinned((d, n), dtype=buffer.dtype)
    stream = cp.cuda.Stream(non_blocking=True)
    stream.wait_event(cp.cuda.get_current_stream().record())  # after buffer's allocation
    piece = max(_MIN_PIECE, -(-d * n // (2 * host_pool_threads())))
    pieces = []  # (row, source values, first element in the row)
    for row, column in enumerate(checked):
        start = 0
        for values in column.chunks:
            for offset in range(0, len(values), piece):
                pieces.append((row, values[offset:offset + piece], start + offset))
            start += len(values)

    def fill(item):
        row, values, start = item
        np.copyto(pinned[row, start:start + len(values)], values)
        return item

    for row, values, start in host_pool().map(fill, pieces):  # in order, as they finish
        stop = start + len(values)
        buffer[row, start:stop].data.copy_from_host_async(
            pinned[row, start:stop].ctypes.data, pinned[row, start:stop].nbytes, stream)
    stream.synchronize()  # sync: the pinned buffer goes back to the pool; the caller reads X
    return int(pinned.nbytes)  # sync: none, a host attribute


def _output_dtype(all_float32: bool, dtype) -> np.dtype:
    allowed = [np.dtype(d) for d in (dtype if isinstance(dtype, Sequence) else [dtype])]
    if all_float32 and np.dtype(np.float32) in allowed:
        return np.dtype(np.float32)
    return allowed[0]


def _cupy_input(X, backend, dtype, copy=False) -> Columns:
    """A CuPy array: checked on the device (no host round trip on the GPU backend)."""
    if X.ndim != 2:
        raise InvalidInputError(f"Expected 2D array, got {X.ndim}D array instead")
    if X.shape[0] < 1 or X.shape[1] < 1:
        raise InvalidInputError(f"Found array with shape {X.shape}; at least one sample and one "
                                "feature are required")
    if not backend.is_gpu:
        return _numpy_input(X.get(), backend, dtype, copy=False)
    _check_same_device(X, backend)
    allowed = [np.dtype(d) for d in (dtype if isinstance(dtype, Sequence) else [dtype])]
    converted = X.dtype not in allowed
    if converted:
        X = X.astype(allowed[0])
    columns = backend.to_device_columns(X)
    means = _check_finite_device(columns, backend)
    if copy and not converted and columns.data.ptr == X.data.ptr:
        columns = columns.copy(order="F")  # the caller will write to it (copy_x)
    return Columns(columns, None, means=means)


def _check_same_device(X, backend):
    """A CuPy array must live on the device gpumine runs on (no silent peer copies)."""
    current = backend.xp.cuda.Device().id
    if X.device.id != current:
        raise InvalidInputError(
            f"X is on GPU {X.device.id} but gpumine runs on GPU {current} (the current CuPy "
            f"device); move it with cupy.asarray under `with cupy.cuda.Device({current})`, or "
            f"make GPU {X.device.id} current")


def _check_finite_device(X, backend):
    """Reject NaN/inf in device data; return its float64 column means (None if they overflow).

    The means' pass is the check (:mod:`gpumine.adapters.column_stats`): finite means prove
    finite data. Non-finite means come from a NaN/inf, or from finite float64 data whose sum
    overflowed; an elementwise test tells the two apart.
    """
    means = column_means(X)
    host_means = backend.to_host(means)  # sync: 8 bytes a feature, to reject NaN/inf up front
    if np.isfinite(host_means).all():
        return means
    if not bool(backend.xp.isfinite(X).all()):  # sync: one boolean, only when a sum is not finite
        raise InvalidInputError("Input X contains NaN or infinity.")
    return None


def _check_numpy(X, dtype, copy, finite=True) -> np.ndarray:
    """scikit-learn's check of NumPy/array-like input (row-major, on the host).

    ``finite=False`` leaves the NaN/inf scan to the device, after the copy there.
    """
    try:
        return check_array(X, dtype=list(dtype) if isinstance(dtype, Sequence) else dtype,
                           order="C", copy=copy, accept_sparse=False, ensure_all_finite=finite)
    except ValueError as exc:
        raise InvalidInputError(str(exc)) from exc


def _numpy_input(X, backend, dtype, copy) -> Columns:
    X = _check_numpy(X, dtype, copy)
    device_bytes = X.nbytes if backend.is_gpu else 0
    return Columns(backend.to_device_columns(X), None, device_bytes=device_bytes)


def as_columns(data, *, backend, dtype=_FLOATS, nulls: str = "error", copy: bool = False,
               out=None, allow_empty: bool = False) -> Columns:
    """Validate ``data`` and place it on ``backend`` as an (n_samples, n_features) array.

    Parameters
    ----------
    data : ndarray, cupy.ndarray, pandas DataFrame or Series, pyarrow Table, \
            RecordBatch, Array or ChunkedArray, or array-like
        A Series or a single Arrow array is one feature.
    backend : gpumine.backend.Backend
        Where the result lives.
    dtype : dtype or sequence of dtypes, default=(float64, float32)
        Allowed output dtypes; the first is used unless every column is already
        one of them (see the module docstring).
    nulls : {"error", "drop"}, default="error"
        What to do with nulls and NaN (infinity is always an error).
    copy : bool, default=False
        Force a copy of NumPy input even when it is already valid (columnar input
        is always copied once).
    out : array of shape (n_features, m), optional
        Columnar input only: fill the first columns of this backend buffer (of
        the output dtype, ``m`` at least the rows kept) instead of a new one;
        how batches are streamed into one array.
    allow_empty : bool, default=False
        Columnar input only: return zero rows instead of raising when every
        row was dropped (a batch in a stream).

    Returns
    -------
    Columns

    Raises
    ------
    InvalidInputError
        A bad column (named in the message), no rows or no columns.
    """
    _check_nulls(nulls)
    if is_device_array(data):
        return _cupy_input(data, backend, dtype, copy)
    frame = _as_table(data)
    if frame is not None:
        return _columnar(frame, backend, dtype, nulls, out, allow_empty)
    if out is not None or allow_empty:
        raise InvalidParameterError(
            "out and allow_empty apply to columnar (pandas or Arrow) input only")
    if nulls == "drop":
        raise InvalidParameterError("nulls='drop' needs columnar input (pandas or Arrow)")
    return _numpy_input(data, backend, dtype, copy)


def validate_input(estimator, X, *, reset: bool, backend, dtype=_FLOATS, copy: bool = False,
                   before_copy: Callable[[int, int], None] | None = None) -> Columns:
    """:func:`as_columns` plus scikit-learn's bookkeeping, for the estimators.

    Sets (``reset=True``) or checks ``n_features_in_`` and ``feature_names_in_``
    through :func:`sklearn.utils.validation.validate_data`, then converts X with
    ``nulls="error"`` (an estimator keeps one label per input row).

    Parameters
    ----------
    estimator : BaseEstimator
    X : any input :func:`as_columns` takes, or a :class:`Columns`
        A :class:`Columns` (from :func:`as_columns` or a file reader) is used as
        it is, after its feature names and count are checked.
    reset : bool
        True in ``fit`` (record the features), False after (check them).
    backend, dtype, copy :
        As for :func:`as_columns`.
    before_copy : callable, optional
        ``before_copy(n_samples, n_features)``, called once the shape is known and
        before anything is copied to the backend: the estimator's parameter
        checks that need the shape, so that bad parameters fail before any transfer.

    Raises
    ------
    InvalidInputError
        Bad data, or a number of features different from the fit's.
    """
    if isinstance(X, Columns):  # already validated (a streamed batch): check the names only
        return _validated(estimator, X, reset=reset, backend=backend, dtype=dtype,
                          before_copy=before_copy)
    frame = _as_table(X)
    data = frame
    if frame is None and not is_device_array(X):
        # Bound for the GPU: the copy there is the copy (no host copy for copy_x), and
        # the NaN/inf scan runs on the device after it.
        on_host = not backend.is_gpu
        data = _check_numpy(X, dtype, copy and on_host, finite=on_host)
    elif frame is None:
        data = X
    try:
        validate_data(estimator, data, skip_check_array=True, reset=reset)
    except (ValueError, TypeError) as exc:
        raise InvalidInputError(str(exc)) from exc
    if before_copy is not None:
        before_copy(len(data), int(estimator.n_features_in_))
    if frame is None and not is_device_array(X):
        device_bytes = data.nbytes if backend.is_gpu else 0
        columns = backend.to_device_columns(data)
        means = _check_finite_device(columns, backend) if backend.is_gpu else None
        return Columns(columns, None, device_bytes=device_bytes, means=means)
    if frame is not None:  # the input was dispatched above: convert the table directly
        columns = _columnar(frame, backend, dtype, "error", None, False)
    else:
        columns = _cupy_input(data, backend, dtype, copy)
    names = getattr(estimator, "feature_names_in_", None)
    columns.feature_names = None if names is None else list(names)
    return columns


def _validated(estimator, columns: Columns, *, reset, backend, dtype, before_copy) -> Columns:
    import pyarrow as pa

    names = columns.feature_names or [f"x{j}" for j in range(columns.X.shape[1])]
    header = pa.table({name: pa.array([], pa.float64()) for name in names})
    if columns.feature_names is None:
        header = header.to_pandas().to_numpy()  # no names, only the count
    try:
        validate_data(estimator, header, skip_check_array=True, reset=reset)
    except (ValueError, TypeError) as exc:
        raise InvalidInputError(str(exc)) from exc
    if before_copy is not None:
        before_copy(columns.n_samples, int(estimator.n_features_in_))
    allowed = [np.dtype(d) for d in (dtype if isinstance(dtype, Sequence) else [dtype])]
    X = columns.X
    if X.dtype not in allowed:
        X = X.astype(allowed[0])
    if backend.is_gpu != is_device_array(X):
        # sync: not a GPU-path copy -- a batch validated for the other backend is moved once
        X = backend.to_device_columns(X.get() if is_device_array(X) else X)
    return Columns(X, columns.feature_names, columns.kept_rows, columns.host_bytes_copied,
                   columns.device_bytes)
