"""Data files as Arrow record batches, streamed, and as validated device data.

Formats (by suffix): ``.parquet``/``.pq`` (the primary one, streamed row group by
row group with ``ParquetFile(pre_buffer=False).iter_batches``), a directory or a glob
of Parquet files (read as one table, file after file in path order: see
:func:`parquet_parts`), ``.csv``
(streamed with ``pyarrow.csv.open_csv``), MineBench ``.bin`` (memory-mapped,
columns named ``x0``, ``x1``, ...) and ``.arff`` (numeric attributes as float64,
nominal ones as strings; read whole, these files are small).

* :func:`read_columns` fills one column-major buffer on the backend batch by
  batch, so a file is never held twice (Arrow table and matrix) in memory.
* :func:`iter_device_batches` yields validated batches on the backend with a
  bounded number of batches read ahead in a background thread: labelling a
  file larger than memory keeps at most ``max_in_flight + 1`` batches alive.

Examples
--------
>>> import os, tempfile
>>> import pyarrow as pa, pyarrow.parquet as pq
>>> from gpumine.adapters import read_columns
>>> from gpumine.backend import get_backend
>>> path = os.path.join(tempfile.mkdtemp(), "x.parquet")
>>> pq.write_table(pa.table({"a": [1.0, 2.0], "b": [3, 4], "name": ["p", "q"]}), path)
>>> cols = read_columns(path, backend=get_backend("cpu"))
>>> cols.feature_names, cols.X.tolist()
(['a', 'b'], [[1.0, 3.0], [2.0, 4.0]])
"""

from __future__ import annotations

import functools
import glob
import os
import queue
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np

from gpumine.adapters.columns import Columns, as_columns
from gpumine.exceptions import (
    DataFormatError,
    DataNotFoundError,
    InvalidInputError,
    InvalidParameterError,
)

__all__ = [
    "BATCH_ROWS",
    "FORMATS",
    "check_numeric",
    "file_format",
    "is_glob",
    "is_numeric_field",
    "iter_batches",
    "iter_device_batches",
    "parquet_parts",
    "read_columns",
    "read_schema",
    "read_table",
    "row_count",
    "select_columns",
    "source_format",
]

#: Suffixes gpumine reads and writes.
FORMATS = (".parquet", ".pq", ".csv", ".bin", ".arff")
#: Rows per streamed batch (64 MiB of float64 at 128 features).
BATCH_ROWS = 1 << 16


def file_format(path) -> str:
    """The format of ``path`` by suffix: ``"parquet"``, ``"csv"``, ``"bin"`` or ``"arff"``."""
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise DataFormatError(f"{path}: unsupported file type {suffix!r} (expected "
                              f"{', '.join(FORMATS)})")
    return {".pq": "parquet"}.get(suffix, suffix[1:])


def is_glob(path) -> bool:
    """Whether ``path`` is a glob pattern (it holds ``*``, ``?`` or ``[``)."""
    return any(char in str(path) for char in "*?[")


def source_format(path) -> str:
    """The format of an input: ``"dataset"`` for a directory or glob, else :func:`file_format`."""
    if is_glob(path) or Path(path).is_dir():
        return "dataset"
    return file_format(path)


_PARQUET_SUFFIXES = (".parquet", ".pq")


def _hidden(name: str) -> bool:
    # pyarrow.dataset's ignore_prefixes: '_SUCCESS', '_metadata', '.crc' files and the like
    return name.startswith((".", "_"))


def parquet_parts(path) -> list[Path]:
    """The Parquet files of a directory or glob, in the order they are read.

    A directory: every ``.parquet``/``.pq`` file under it, recursively (Hive-style
    ``key=value`` subdirectories included; the keys are not added as columns),
    sorted by path. A glob (``data/2026-*.parquet``, ``data/**/*.parquet``): the
    files it matches, sorted. Names starting with ``.`` or ``_`` are skipped, as
    pyarrow.dataset skips them (``_SUCCESS``, ``_metadata``, temporary files).

    Raises
    ------
    FileNotFoundError
        No Parquet file there.
    DataFormatError
        A glob matches a file that is not Parquet.
    """
    if is_glob(path):
        matches = sorted(Path(m) for m in glob.glob(str(path), recursive=True))
        parts = [m for m in matches if m.is_file() and not _hidden(m.name)]
        other = [m for m in parts if m.suffix.lower() not in _PARQUET_SUFFIXES]
        if other:
            raise DataFormatError(f"{path}: matches {other[0]}, which is not a Parquet file "
                                  f"({', '.join(_PARQUET_SUFFIXES)})")
        if not parts:
            raise DataNotFoundError(f"{path}: no file matches")
        return parts
    root = Path(path)
    parts = []
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = sorted(d for d in subfolders if not _hidden(d))
        parts.extend(Path(folder) / name for name in sorted(files)
                     if not _hidden(name) and Path(name).suffix.lower() in _PARQUET_SUFFIXES)
    if not parts:
        raise DataNotFoundError(f"{path}: no Parquet files ({', '.join(_PARQUET_SUFFIXES)}) "
                                "in the directory")
    return sorted(parts)


def _dataset_schema(parts):
    """The one schema of every part (footers only), or an error naming the first misfit."""
    return _dataset_schema_cached(tuple((str(p), *_stamp(p)) for p in parts))


def _stamp(path) -> tuple[int, int]:
    stat = _existing(path).stat()
    return stat.st_size, stat.st_mtime_ns


@functools.lru_cache(maxsize=32)
def _dataset_schema_cached(stamped):
    first = Path(stamped[0][0])
    schema = _parquet_footer(first).schema.to_arrow_schema()
    for name, *_ in stamped[1:]:
        other = _parquet_footer(name).schema.to_arrow_schema()
        if not other.equals(schema):
            raise DataFormatError(f"{name}: its columns ({_describe(other)}) differ from "
                                  f"those of {first} ({_describe(schema)}); every file of a "
                                  "data set needs the same columns and types")
    return schema


def _describe(schema) -> str:
    return ", ".join(f"{f.name} {f.type}" for f in schema)


def _existing(path) -> Path:
    path = Path(path)
    if not path.exists():
        raise DataNotFoundError(f"{path}: no such file")
    if not path.is_file():
        raise DataFormatError(f"{path}: not a file")
    if path.stat().st_size == 0:
        raise DataFormatError(f"{path}: the file is empty")
    return path


def _parquet_file(path):
    """An open ``ParquetFile`` (streamed reads), its footer read once per file version."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    metadata = _parquet_footer(path)
    try:
        return pq.ParquetFile(path, metadata=metadata, pre_buffer=False, buffer_size=1 << 20)
    except (pa.ArrowInvalid, OSError) as exc:
        raise DataFormatError(f"{path}: not a readable Parquet file (truncated or corrupt?): "
                              f"{exc}") from exc


def _parquet_footer(path):
    """The file's ``FileMetaData``; read from disk once per (path, size, modification time).

    A job reads the schema, the row count and then the rows (twice when it writes the
    rows back): the footer of each file is parsed once for all of them.
    """
    stat = Path(path).stat()
    return _parquet_footer_cached(str(path), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=256)
def _parquet_footer_cached(path, size, mtime_ns):
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.read_metadata(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise DataFormatError(f"{path}: not a readable Parquet file (truncated or corrupt?): "
                              f"{exc}") from exc


def _bin_shape(path) -> tuple[int, int]:
    from gpumine.adapters.minebench import read_minebench_bin

    with open(path, "rb") as handle:
        header = np.frombuffer(handle.read(8), dtype="<i4")
    if header.size < 2:
        read_minebench_bin(path)  # raises the format's own error
    n, d = (int(v) for v in header)
    if n < 0 or d < 1 or path.stat().st_size != 8 + 4 * n * d:
        read_minebench_bin(path)
    return n, d


def _arff_table(path):
    import pyarrow as pa
    from scipy.io import arff

    try:
        data, meta = arff.loadarff(path)
    except (ValueError, arff.ArffError, UnicodeDecodeError) as exc:
        raise DataFormatError(f"{path}: not a readable ARFF file: {exc}") from exc
    columns = {}
    for name in meta.names():
        values = data[name]
        if meta[name][0] == "numeric":
            columns[name] = pa.array(np.asarray(values, dtype=np.float64), from_pandas=True)
        else:
            columns[name] = pa.array([v.decode() if isinstance(v, bytes) else str(v)
                                      for v in values])
    return pa.table(columns)


def read_schema(path):
    """The Arrow schema of a data file or data set, reading as little of it as possible.

    Of a directory or glob of Parquet files, the schema they all share (an error
    names the first file whose columns differ).
    """
    import pyarrow as pa

    kind = source_format(path)
    if kind == "dataset":
        return _dataset_schema(parquet_parts(path))
    path = _existing(path)
    if kind == "parquet":
        return _parquet_footer(path).schema.to_arrow_schema()
    if kind == "bin":
        _, d = _bin_shape(path)
        return pa.schema([(f"x{j}", pa.float32()) for j in range(d)])
    if kind == "csv":
        return _csv_schema(path)
    return _arff_table(path).schema


_CSV_CONVERSION = re.compile(r"In CSV column #(\d+): CSV conversion error to (\w+)")


def _csv_schema(path):
    """The column types of a CSV file, inferred from the whole file.

    pyarrow infers the types from the first block (about 1 MiB) only, so a column of
    integers there and ``1.5`` (or text) later fails the read half-way. The file is
    read once with the types found so far; a conversion error widens that column
    (integer -> float64 -> string) and the pass starts again, so the result holds
    for every row. Cached per file (path, size, modification time).
    """
    stat = path.stat()
    return _csv_schema_cached(str(path), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=32)
def _csv_schema_cached(path, size, mtime_ns):
    import pyarrow as pa
    import pyarrow.csv as pa_csv

    column_types = {}
    while True:
        options = pa_csv.ConvertOptions(column_types=column_types)
        try:
            with pa_csv.open_csv(path, convert_options=options) as reader:
                schema = reader.schema
                repeated = sorted({n for n in schema.names if schema.names.count(n) > 1})
                if repeated:
                    raise DataFormatError(f"{path}: the header names column {repeated[0]!r} "
                                          "more than once; rename the copies")
                for _ in reader:
                    pass
            return schema
        except pa.ArrowInvalid as exc:
            match = _CSV_CONVERSION.search(str(exc))
            if match is None:
                raise DataFormatError(f"{path}: not a readable CSV file: {exc}") from exc
            name = schema.names[int(match.group(1))]
            wider = pa.float64() if match.group(2).startswith(("int", "uint")) else pa.string()
            if column_types.get(name) == wider:
                raise DataFormatError(f"{path}: column {name!r}: {exc}") from exc
            column_types[name] = wider
        except OSError as exc:
            raise DataFormatError(f"{path}: not a readable CSV file: {exc}") from exc


def is_numeric_field(field) -> bool:
    """Whether an Arrow field is clustered as a number (integers, floats, decimals, booleans)."""
    import pyarrow as pa

    kind = field.type
    return (pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_decimal(kind)
            or pa.types.is_boolean(kind))  # booleans and decimals are cast, with a warning


def check_numeric(schema, names: Sequence[str]) -> None:
    """Fail now, from the schema alone, on a named column that is not a number.

    The same rule and message as the conversion (:func:`~gpumine.adapters.as_columns`),
    before anything is read.

    Raises
    ------
    InvalidInputError
        Naming the first such column and its type.
    """
    import pyarrow as pa

    for name in names:
        field = schema.field(name)
        if not (is_numeric_field(field) or pa.types.is_null(field.type)):
            raise InvalidInputError(f"column {name!r} has type {field.type}, not a number; "
                                    "select numeric columns only")


def select_columns(schema, columns: Sequence[str] | None = None,
                   exclude: Sequence[str] | None = None) -> list[str]:
    """Names of the feature columns: ``columns`` as given, else every numeric column.

    Parameters
    ----------
    schema : pyarrow.Schema
    columns : sequence of str, optional
        Explicit selection, in this order; each must exist (any type: a
        non-numeric one is reported when the data is converted).
    exclude : sequence of str, optional
        Names to leave out of the selection; each must exist.

    Raises
    ------
    InvalidInputError
        An unknown name, a name given twice, or nothing left to cluster.
    """
    names = list(schema.names)

    def check_known(given, what):
        unknown = [c for c in given if c not in names]
        if unknown:
            raise InvalidInputError(f"no column {unknown[0]!r} ({what}); the columns are: "
                                    f"{', '.join(names)}")
        repeated = sorted({c for c in given if list(given).count(c) > 1})
        if repeated:
            raise InvalidInputError(f"column {repeated[0]!r} is given twice ({what})")

    exclude = list(exclude or [])
    check_known(exclude, "--exclude")
    if columns:
        check_known(list(columns), "--columns")
        chosen = [c for c in columns if c not in exclude]
    else:
        chosen = [f.name for f in schema if is_numeric_field(f) and f.name not in exclude]
    if not chosen:
        raise InvalidInputError("no numeric columns to cluster; the columns are: "
                                + ", ".join(f"{f.name} ({f.type})" for f in schema))
    return chosen


def iter_batches(path, columns: Sequence[str] | None = None, *,
                 batch_rows: int = BATCH_ROWS) -> Iterator:
    """Yield the file's rows as ``pyarrow.RecordBatch`` es of at most ``batch_rows`` rows.

    Parameters
    ----------
    path : str or path-like
        A data file, or a directory or glob of Parquet files (read file after file,
        in the order of :func:`parquet_parts`).
    columns : sequence of str, optional
        Only these columns (all when None).
    batch_rows : int
        Rows per batch (Parquet row groups larger than this are split).
    """
    import pyarrow as pa
    import pyarrow.csv as pa_csv

    kind = source_format(path)
    columns = None if columns is None else list(columns)
    if kind == "dataset":
        parts = parquet_parts(path)
        _dataset_schema(parts)  # every part has the same columns, or fail before the first row
        for part in parts:
            yield from iter_batches(part, columns, batch_rows=batch_rows)
        return
    path = _existing(path)
    if kind == "parquet":
        reader = _parquet_file(path)
        try:
            yield from reader.iter_batches(batch_size=batch_rows, columns=columns)
        except (pa.ArrowInvalid, OSError) as exc:
            raise DataFormatError(f"{path}: corrupt Parquet data: {exc}") from exc
        finally:
            reader.close()
    elif kind == "csv":
        types = {f.name: f.type for f in _csv_schema(path)}  # the whole file's types
        options = pa_csv.ConvertOptions(include_columns=columns, column_types=types)
        try:
            with pa_csv.open_csv(path, convert_options=options) as reader:
                for batch in reader:
                    for start in range(0, batch.num_rows, batch_rows):
                        yield batch.slice(start, batch_rows)
        except pa.ArrowInvalid as exc:
            raise DataFormatError(f"{path}: cannot parse CSV: {exc}") from exc
    elif kind == "bin":
        n, d = _bin_shape(path)
        names = [f"x{j}" for j in range(d)]
        wanted = names if columns is None else columns
        if n == 0:
            return
        values = np.memmap(path, dtype="<f4", mode="r", offset=8, shape=(n, d))
        for start in range(0, n, batch_rows):
            block = values[start:start + batch_rows]
            yield pa.record_batch([pa.array(np.ascontiguousarray(block[:, names.index(c)]))
                                   for c in wanted], names=wanted)
        del values
    else:
        table = _arff_table(path)
        if columns is not None:
            table = table.select(columns)
        yield from table.to_batches(max_chunksize=batch_rows)


def read_table(path, columns: Sequence[str] | None = None):
    """The whole file (or ``columns`` of it) as a ``pyarrow.Table``."""
    import pyarrow as pa

    schema = read_schema(path)
    if columns is not None:
        schema = pa.schema([schema.field(c) for c in columns])
    return pa.Table.from_batches(list(iter_batches(path, columns)), schema=schema)


def row_count(path) -> int | None:
    """Rows of a Parquet file, data set or .bin file from their metadata; None for CSV/ARFF."""
    kind = source_format(path)
    if kind == "dataset":
        parts = parquet_parts(path)
        _dataset_schema(parts)
        return sum(_parquet_footer(part).num_rows for part in parts)
    if kind == "parquet":
        return _parquet_footer(_existing(path)).num_rows
    if kind == "bin":
        return _bin_shape(Path(path))[0]
    return None


def _out_dtype(schema, names, dtype) -> np.dtype:
    import pyarrow as pa

    allowed = [np.dtype(d) for d in (dtype if isinstance(dtype, (list, tuple)) else [dtype])]
    if np.dtype(np.float32) in allowed and all(pa.types.is_float32(schema.field(c).type)
                                               for c in names):
        return np.dtype(np.float32)
    return allowed[0]


def read_columns(path, columns: Sequence[str] | None = None,
                 exclude: Sequence[str] | None = None, *, backend,
                 dtype=(np.float64, np.float32), nulls: str = "error",
                 progress: Callable[[int], None] | None = None,
                 batch_rows: int = BATCH_ROWS) -> Columns:
    """Read the feature columns of a data file into one column-major array on ``backend``.

    Parquet files, Parquet data sets (directories, globs) and .bin files (whose row
    count is known up front) are streamed batch by batch into a buffer allocated
    once, so peak memory is the result plus one batch; CSV and ARFF are read whole
    first.

    Parameters
    ----------
    path : str or path-like
        A data file, or a directory or glob of Parquet files.
    columns, exclude : sequence of str, optional
        See :func:`select_columns`.
    backend : gpumine.backend.Backend
    dtype, nulls :
        As for :func:`gpumine.adapters.as_columns`.
    progress : callable, optional
        Called with the number of rows read after each batch.
    batch_rows : int
        Rows per streamed batch.

    Returns
    -------
    Columns
        With ``kept_rows`` indexing the file's rows when ``nulls="drop"`` dropped some.

    Raises
    ------
    FileNotFoundError, DataFormatError, InvalidInputError
    """
    schema = read_schema(path)
    names = select_columns(schema, columns, exclude)
    n_rows = row_count(path)
    if n_rows is None:
        table = read_table(path, names)
        if progress:
            progress(table.num_rows)
        return as_columns(table, backend=backend, dtype=dtype, nulls=nulls)
    if n_rows == 0:
        raise InvalidInputError(f"Found array with 0 sample(s) (shape=(0, {len(names)})) while "
                                "a minimum of 1 is required (the file has no rows)")
    out_dtype = _out_dtype(schema, names, dtype)
    buffer = backend.xp.empty((len(names), n_rows), dtype=out_dtype)
    kept_parts, filled, seen, host_bytes, device_bytes = [], 0, 0, 0, 0
    for batch in iter_batches(path, names, batch_rows=batch_rows):
        if batch.num_rows == 0:
            continue
        part = as_columns(batch, backend=backend, dtype=out_dtype, nulls=nulls,
                          out=buffer[:, filled:filled + batch.num_rows], allow_empty=True)
        kept_parts.append(np.ones(batch.num_rows, bool) if part.kept_rows is None
                          else part.kept_rows)
        filled += part.n_samples
        host_bytes += part.host_bytes_copied
        device_bytes += part.device_bytes
        seen += batch.num_rows
        if progress:
            progress(seen)
    if filled == 0:
        raise InvalidInputError(f"Found array with 0 sample(s) (shape=(0, {len(names)})) while "
                                "a minimum of 1 is required (every row has a null)")
    kept = np.concatenate(kept_parts)
    _release_arrow_memory()
    if filled < n_rows:
        buffer = backend.xp.ascontiguousarray(buffer[:, :filled])  # rows were dropped: compact
    return Columns(buffer.T, names, None if kept.all() else kept, host_bytes, device_bytes)


def _release_arrow_memory() -> None:
    """Hand Arrow's freed decode buffers back to the system (the allocator keeps them)."""
    import pyarrow as pa

    pa.default_memory_pool().release_unused()


def iter_device_batches(path, columns: Sequence[str], *, backend, dtype,
                        nulls: str = "error", batch_rows: int = BATCH_ROWS,
                        max_in_flight: int = 2) -> Iterator[tuple[int, Columns]]:
    """Yield ``(first_row, Columns)`` for each batch of the file, validated, on ``backend``.

    A background thread reads and decodes up to ``max_in_flight`` batches ahead
    of the consumer (I/O and decompression overlap the consumer's work); memory
    stays bounded by those batches whatever the file size.

    Parameters
    ----------
    path : str or path-like
    columns : sequence of str
        The feature columns, in order.
    backend : gpumine.backend.Backend
    dtype : dtype
        The one output dtype of every batch.
    nulls : {"error", "drop"}
    batch_rows : int
    max_in_flight : int
        Batches read ahead (at least 1).
    """
    if max_in_flight < 1:
        raise InvalidParameterError(f"max_in_flight must be >= 1, got {max_in_flight}")
    ahead: queue.Queue = queue.Queue(maxsize=max_in_flight)
    stop = threading.Event()
    done = object()

    def read():
        try:
            for batch in iter_batches(path, columns, batch_rows=batch_rows):
                while not stop.is_set():
                    try:
                        ahead.put(batch, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            ahead.put(done)
        except BaseException as exc:  # handed to the consumer, raised there
            ahead.put(exc)

    reader = threading.Thread(target=read, name="gpumine-batch-reader", daemon=True)
    reader.start()
    first_row = 0
    try:
        while True:
            item = ahead.get()
            if item is done:
                return
            if isinstance(item, BaseException):
                raise item
            if item.num_rows:
                yield first_row, as_columns(item, backend=backend, dtype=dtype, nulls=nulls,
                                            allow_empty=True)
            first_row += item.num_rows
    finally:
        stop.set()
        while reader.is_alive():
            try:
                ahead.get_nowait()
            except queue.Empty:
                reader.join(0.05)
