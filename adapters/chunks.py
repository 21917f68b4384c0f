"""Chunk sources: data read one chunk of rows at a time, for fits that stream.

A chunk source (:data:`gpumine.kmeans.chunked.ChunkSource`) is a callable that
returns an iterator of ``(X_chunk, weight_chunk)`` pairs, the same chunks in the same
order at every call, each chunk validated and on the backend. Two kinds:

* :func:`dataset_chunks` -- a ``pyarrow.dataset.Dataset`` (a Parquet file, folder or
  list of files, with the columns and filter pyarrow expresses), read record batch by
  record batch at every pass, the next batch converted on a background thread while the
  current one is used (:mod:`gpumine.adapters.read_ahead`), so no more than two batches
  are ever in memory;
* :func:`array_chunks` -- slices of an array already validated (what
  ``GPUKMeans(batch_rows=...)`` streams, so that small data exercises the same path).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from gpumine.adapters.columns import as_columns
from gpumine.adapters.read_ahead import ReadAheadStream, read_ahead
from gpumine.adapters.sources import check_numeric
from gpumine.exceptions import InvalidInputError, InvalidParameterError

__all__ = ["CACHE_ENV_VAR", "DEFAULT_BATCH_ROWS", "PinnedCache", "StreamedInput",
           "array_chunks", "dataset_chunks", "default_cache_bytes", "is_dataset"]

#: Rows per chunk of a streamed dataset when ``batch_rows`` is not given.
DEFAULT_BATCH_ROWS = 1 << 20


@dataclass
class StreamedInput:
    """A chunk source and what is known of it before any row is read."""

    chunks: Callable
    n_features: int
    feature_names: list[str]
    dtype: np.dtype
    cache: PinnedCache | None = None


def is_dataset(data) -> bool:
    """Whether ``data`` is a ``pyarrow.dataset.Dataset`` (without importing pyarrow)."""
    module = type(data).__module__ or ""
    if not module.startswith("pyarrow"):
        return False
    import pyarrow.dataset as ds

    return isinstance(data, ds.Dataset)


def _available_host_bytes() -> int:
    """The host memory the OS calls available now (0 where it does not say)."""
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return 0


#: Environment variable: the pinned cache's budget in bytes (0 turns the cache off),
#: in place of half the host memory available.
CACHE_ENV_VAR = "GPUMINE_STREAM_CACHE_BYTES"


def default_cache_bytes() -> int:
    """The pinned cache's default budget: ``$GPUMINE_STREAM_CACHE_BYTES`` when set (bytes;
    0: no cache), else half the host memory the OS calls available now.

    Examples
    --------
    >>> default_cache_bytes() >= 0
    True
    """
    value = os.environ.get(CACHE_ENV_VAR)
    if value is None:
        return _available_host_bytes() // 2
    try:
        budget = int(value)  # sync: none -- a host string
    except ValueError:
        budget = -1
    if budget < 0:
        raise InvalidParameterError(f"{CACHE_ENV_VAR} must be a number of bytes >= 0, got "
                                    f"{value!r}")
    return budget


class PinnedCache:
    """The converted batches of a GPU stream, kept in page-locked host memory.

    Every pass of a streamed fit reads the data again: pyarrow reads (or decodes) each
    batch, the host threads copy it into pinned memory and check it on the device. That
    costs more than the copy to the device alone -- the host's memory bandwidth is shared
    by the staging copy and the device's reads (measured on the H100 machine, 10M x 32
    float32 from an in-memory table: 20.3 GB/s against 52.9 GB/s for a pinned copy; 44.1
    GB/s from this cache; record stream-timing-2026-11-24-3d8c3a2). When the
    data fits ``budget`` bytes, the batches are kept pinned after their conversion and
    later passes copy them straight up.

    The first complete pass counts the bytes; if they fit, the next complete pass keeps
    each converted batch (a device-to-host copy on the read-ahead thread, in its own
    page-locked buffer, freed with this cache); every pass after that reads the cache.
    A pass abandoned half-way keeps nothing. On the CPU, or with ``budget`` 0, nothing is
    kept.
    """

    def __init__(self, backend, budget: int | None):
        self.backend = backend
        self.budget = default_cache_bytes() if budget is None else int(budget)  # sync: none
        self.parts: list = []
        self.complete = False
        self._enabled = False
        self._keeping = False
        self._counted = 0

    def pass_over(self, batches):
        """``batches`` unchanged; a pass that ends decides (or completes) the cache."""
        self.parts, self._counted = [], 0
        self._keeping = self._enabled
        yield from batches
        if self._keeping:
            self.complete = True
        else:
            self._enabled = 0 < self._counted <= self.budget

    def keep(self, out) -> None:
        """Count, and in the keeping pass keep, one converted (d, rows) device batch (on
        the read-ahead thread, after the batch is complete)."""
        self._counted += out.nbytes
        if self._keeping:
            part = self.backend.pinned_array(out.shape, out.dtype)
            out.get(out=part)  # sync: the read-ahead thread's own stream
            self.parts.append(part)


def warn_mixed_types(dataset, names) -> None:
    """Warn when a file of ``dataset`` stores a column ``names`` lists in another type than
    the dataset's schema (which pyarrow takes from one file, and casts every batch to).

    Only the files' footers are read (:attr:`pyarrow.dataset.Fragment.physical_schema`);
    an in-memory dataset has one schema and is not looked at. The warning names the
    column, both types and the first such file, and how to choose the type instead.
    """
    from sklearn.exceptions import DataConversionWarning

    if not hasattr(dataset, "files"):  # an in-memory dataset: one schema for every batch
        return
    for path in dataset.files:  # (a filtered dataset lists no fragments, but its files)
        physical = dataset.format.make_fragment(path, dataset.filesystem).physical_schema
        for name in names:
            index = physical.get_field_index(name)
            if index < 0:
                continue  # a file without the column: its rows read as nulls, refused later
            stored, read = physical.field(index).type, dataset.schema.field(name).type
            if stored != read:
                warnings.warn(
                    f"column {name!r} is {stored} in {path} but {read} in the "
                    f"dataset's schema: its values are cast to {read} as they are read "
                    "(open the dataset with schema=... to choose the type)",
                    DataConversionWarning, stacklevel=4)
                return


def dataset_chunks(dataset, *, backend, batch_rows: int = DEFAULT_BATCH_ROWS,
                   dtype=None, cache_bytes: int | None = None) -> StreamedInput:
    """Stream a ``pyarrow.dataset.Dataset`` (every column) as validated chunks.

    The columns are checked from the schema before any row is read; the chunks are
    float32 when every column is float32, else float64 (the estimators' rule). A bad
    value names its column, its batch and the batch's rows.

    Parameters
    ----------
    dataset : pyarrow.dataset.Dataset
        Select columns or rows with ``dataset.filter(...)`` or by opening it with
        ``columns``; every column of its schema is a feature.
    backend : gpumine.backend.Backend
    batch_rows : int
        The most rows of a chunk (row groups may give fewer).
    dtype : dtype, optional
        The chunks' dtype; default float32 when every column is float32, else float64.
    cache_bytes : int, optional
        On the GPU, the most bytes of converted batches kept in page-locked host memory
        for the passes after the second (:class:`PinnedCache`); default
        :func:`default_cache_bytes` (``$GPUMINE_STREAM_CACHE_BYTES``, else half the host
        memory available when the source is made); 0 keeps nothing (``predict``'s one
        pass).

    Raises
    ------
    InvalidInputError
        A column that is not a number, or no columns.

    Examples
    --------
    >>> import numpy as np, pyarrow as pa, pyarrow.dataset as ds
    >>> from gpumine.backend import get_backend
    >>> data = ds.dataset(pa.table({"a": [1.0, 2.0, 3.0], "b": [4.0, 5.0, 6.0]}))
    >>> stream = dataset_chunks(data, backend=get_backend("cpu"), batch_rows=2)
    >>> [X.tolist() for X, _ in stream.chunks()]
    [[[1.0, 4.0], [2.0, 5.0]], [[3.0, 6.0]]]
    """
    import pyarrow as pa

    schema = dataset.schema
    names = list(schema.names)
    if not names:
        raise InvalidInputError("the dataset has no columns")
    check_numeric(schema, names)
    warn_mixed_types(dataset, names)
    if dtype is None:
        float32 = all(pa.types.is_float32(schema.field(name).type) for name in names)
        dtype = np.float32 if float32 else np.float64
    dtype = np.dtype(dtype)

    cache = PinnedCache(backend, cache_bytes if backend.is_gpu else 0)

    def convert(index, first, batch, out):
        try:
            X = as_columns(batch, backend=backend, dtype=dtype, out=out).X
        except InvalidInputError as exc:
            raise InvalidInputError(f"batch {index} (rows {first} to "
                                    f"{first + batch.num_rows - 1}): {exc}") from None
        cache.keep(out)
        return X, None

    def upload(index, first, part, out):  # a cached batch: checked already
        out.set(part, stream=backend.xp.cuda.get_current_stream())
        backend.synchronize()  # sync: the read-ahead thread's own stream, not the caller's
        return out.T, None

    stream = ReadAheadStream(backend)

    def chunks():  # the next batch is read, checked and copied while this one is used
        if cache.complete:
            return read_ahead(cache.parts, upload, backend=backend, width=len(names),
                              dtype=dtype, stream=stream, rows=lambda part: part.shape[1])
        batches = cache.pass_over(dataset.to_batches(columns=names, batch_size=batch_rows))
        return read_ahead(batches, convert, backend=backend, width=len(names), dtype=dtype,
                          stream=stream)

    return StreamedInput(chunks, len(names), names, dtype, cache)


def array_chunks(X, sample_weight, rows: int):
    """Slices of ``rows`` rows of a validated array and its weights (None: all 1).

    Examples
    --------
    >>> import numpy as np
    >>> [len(X) for X, _ in array_chunks(np.zeros((5, 2)), None, 2)()]
    [2, 2, 1]
    """
    def chunks():
        for start in range(0, X.shape[0], rows):
            yield (X[start:start + rows],
                   None if sample_weight is None else sample_weight[start:start + rows])

    return chunks
