"""Results back out: labels as NumPy / pandas / Arrow, and files written whole or not at all.

Every file is written to a temporary file in the destination directory and
renamed over the destination only when complete (:func:`atomic_output`), so a
failure (bad data found half way, a full disk, Ctrl-C) never leaves a partial
output, and an existing file is replaced only by a complete one.

Examples
--------
>>> import numpy as np
>>> from gpumine.adapters import labels_as
>>> labels_as(np.array([0, 1, 1], dtype=np.int32), "pandas").tolist()
[0, 1, 1]
>>> labels_as(np.array([0, 1, 1], dtype=np.int32), "arrow").type
DataType(int32)
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from gpumine.adapters.sources import (
    BATCH_ROWS,
    file_format,
    is_glob,
    iter_batches,
    read_schema,
    source_format,
)
from gpumine.exceptions import InvalidInputError, InvalidParameterError
from gpumine.validation import is_device_array

__all__ = [
    "LABEL_OUTPUTS",
    "TableWriter",
    "atomic_output",
    "check_columns_writable",
    "check_output_path",
    "labels_as",
    "table_as",
    "write_labeled",
    "write_table",
]

#: Accepted values of ``labels_as(..., output=)``.
LABEL_OUTPUTS = ("numpy", "pandas", "arrow")


def labels_as(labels, output: str = "numpy", *, name: str = "cluster", index=None,
              kept_rows=None):
    """Labels as a NumPy array, a pandas Series or a pyarrow Array.

    Parameters
    ----------
    labels : array-like of int (NumPy or CuPy)
    output : {"numpy", "pandas", "arrow"}
    name : str
        The Series name.
    index : pandas Index, optional
        The Series index (e.g. the input DataFrame's).
    kept_rows : ndarray of bool, optional
        Rows of the input that ``labels`` belong to (``Columns.kept_rows``); the
        others get a missing label (-1 in NumPy, ``<NA>`` in pandas, null in Arrow).
    """
    if output not in LABEL_OUTPUTS:
        raise InvalidParameterError(f"output must be one of {LABEL_OUTPUTS}, got {output!r}")
    if is_device_array(labels):
        labels = labels.get()
    labels = np.asarray(labels)
    valid = None
    if kept_rows is not None:
        full = np.full(len(kept_rows), -1, dtype=labels.dtype)
        full[kept_rows] = labels
        labels, valid = full, np.asarray(kept_rows)
    if output == "numpy":
        return labels
    if output == "arrow":
        import pyarrow as pa

        return pa.array(labels, mask=None if valid is None else ~valid)
    import pandas as pd

    if valid is None:
        return pd.Series(labels, index=index, name=name)
    series = pd.Series(pd.array(labels, dtype=f"Int{labels.dtype.itemsize * 8}"), index=index,
                       name=name)
    series[~valid] = pd.NA
    return series


def table_as(values, output: str = "numpy", *, columns=None, index=None):
    """A 2-D result (centres, distances) as a NumPy array, a pandas DataFrame or an Arrow Table.

    Parameters
    ----------
    values : array-like of shape (n_rows, n_columns) (NumPy or CuPy)
    output : {"numpy", "pandas", "arrow"}
    columns : sequence of str, optional
        Column names; default ``"0"``, ``"1"``, ...
    index : pandas Index, optional

    Examples
    --------
    >>> import numpy as np
    >>> from gpumine.adapters import table_as
    >>> table_as(np.eye(2), "arrow", columns=["a", "b"]).column_names
    ['a', 'b']
    """
    if output not in LABEL_OUTPUTS:
        raise InvalidParameterError(f"output must be one of {LABEL_OUTPUTS}, got {output!r}")
    if is_device_array(values):
        values = values.get()
    values = np.asarray(values)
    if values.ndim != 2:
        raise InvalidParameterError(f"values must be 2-D, got shape {values.shape}")
    if output == "numpy":
        return values
    names = [str(c) for c in (columns if columns is not None else range(values.shape[1]))]
    if len(names) != values.shape[1]:
        raise InvalidParameterError(f"{len(names)} column names for {values.shape[1]} columns")
    if output == "arrow":
        import pyarrow as pa

        return pa.table({name: values[:, j] for j, name in enumerate(names)})
    import pandas as pd

    return pd.DataFrame(values, columns=names, index=index)


def check_output_path(out, *inputs) -> Path:
    """Refuse an output in a missing directory, a directory, or the same file as an input."""
    out = Path(out)
    if not out.parent.is_dir():
        raise InvalidInputError(f"{out}: the directory {out.parent} does not exist")
    if out.is_dir():
        raise InvalidInputError(f"{out}: is a directory")
    file_format(out)
    for source in inputs:
        if source is None:
            continue
        if source_format(source) == "dataset":
            _check_outside_dataset(out, source)
        elif out.exists() and os.path.samefile(out, source):
            raise InvalidInputError(f"{out}: the output would overwrite the input; choose "
                                    "another path")
    # Written through a temporary file beside it: make sure one can be made, now, before
    # any work (os.access is no help to root or on read-only mounts). An unnamed file
    # (O_TMPFILE where the file system has it): a kill at this moment leaves nothing.
    try:
        with tempfile.TemporaryFile(dir=out.parent):
            pass
    except OSError as exc:
        raise InvalidInputError(f"{out}: cannot write in {out.parent} "
                                f"({exc.strerror or exc})") from None
    return out


def _check_outside_dataset(out, source) -> None:
    """An output inside an input directory, or matched by an input glob, is refused:
    the next run over the same input would read it as data."""
    target = Path(os.path.abspath(out))
    if is_glob(source):
        inside = fnmatch.fnmatch(str(target), os.path.abspath(source))
    else:
        inside = target.resolve().is_relative_to(Path(source).resolve())
    if inside:
        raise InvalidInputError(f"{out}: the output is part of the input {source}; a later run "
                                "would read it as data. Write it elsewhere")


def check_columns_writable(out, schema) -> None:
    """Refuse, before any work, input columns that ``out``'s format cannot hold.

    Parquet holds everything; CSV and ARFF hold numbers, text, booleans and dates,
    not nested (list, struct, map) or binary columns; MineBench .bin holds numbers.

    Raises
    ------
    InvalidInputError
        Naming the output file and the first column it cannot hold.
    """
    import pyarrow as pa

    kind = file_format(out)
    if kind == "parquet":
        return
    for field in schema:
        kind_type = field.type
        if kind == "bin":
            ok = pa.types.is_integer(kind_type) or pa.types.is_floating(kind_type)
        else:
            ok = not (pa.types.is_nested(kind_type) or pa.types.is_binary(kind_type)
                      or pa.types.is_large_binary(kind_type))
        if not ok:
            holds = " (numbers only)" if kind == "bin" else ""
            raise InvalidInputError(
                f"{out}: column {field.name!r} ({kind_type}) cannot be written to a .{kind} "
                f"file{holds}; leave it out (--columns/--exclude) or write .parquet")


@contextlib.contextmanager
def atomic_output(path) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; rename it to ``path`` only on success.

    On an exception the temporary file is removed and ``path`` is left as it was.
    """
    path = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:  # name the user's path, not the temporary one
        raise InvalidInputError(f"{path}: cannot write in {path.parent} "
                                f"({exc.strerror or exc})") from None
    os.close(fd)
    try:
        yield Path(tmp)
        # mkstemp makes the file private (0600); give it the mode a plain open() would
        os.chmod(tmp, path.stat().st_mode & 0o777 if path.exists() else 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


class TableWriter:
    """Write record batches to a .parquet, .csv, .bin or .arff file, one batch at a time.

    ``.bin`` (MineBench) takes numeric columns only, cast to float32; its header
    is written last, once the row count is known. ``.arff`` writes numeric
    columns as ``numeric`` and string columns as nominal attributes.

    Parameters
    ----------
    path : path-like
        The file to write (use :func:`atomic_output` for a temporary one).
    schema : pyarrow.Schema
    kind : str, optional
        The format; by default from the suffix of ``path``.
    """

    def __init__(self, path, schema, kind=None):
        import pyarrow as pa
        import pyarrow.csv as pa_csv
        import pyarrow.parquet as pq

        self.path, self.schema = Path(path), schema
        self.kind = kind or file_format(path)
        self.rows = 0
        if self.kind == "parquet":
            self._writer = pq.ParquetWriter(self.path, schema, compression="zstd")
        elif self.kind == "csv":
            self._writer = pa_csv.CSVWriter(self.path, schema)
        elif self.kind == "bin":
            bad = [f.name for f in schema if not (pa.types.is_integer(f.type)
                                                  or pa.types.is_floating(f.type))]
            if bad:
                raise InvalidInputError(f"a .bin file holds numbers only; column {bad[0]!r} is "
                                        f"{schema.field(bad[0]).type} (select numeric columns)")
            self._handle = open(self.path, "wb")
            self._handle.write(b"\0" * 8)  # header placeholder: (n, d) written on close
        else:
            self._handle = open(self.path, "w", encoding="utf-8")
            self._arff_nominal: dict[str, set] = {}
            self._arff_lines: list[str] = []

    def write(self, batch) -> None:
        """Append one ``pyarrow.RecordBatch`` (or Table) with the writer's schema."""
        import pyarrow as pa

        if isinstance(batch, pa.Table):
            for part in batch.to_batches():
                self.write(part)
            return
        self.rows += batch.num_rows
        if self.kind in ("parquet", "csv"):
            self._writer.write(batch)
        elif self.kind == "bin":
            block = np.column_stack([c.to_numpy(zero_copy_only=False).astype("<f4")
                                     for c in batch.columns]) if batch.num_rows else None
            if block is not None:
                self._handle.write(np.ascontiguousarray(block).tobytes())
        else:
            self._write_arff(batch)

    def _write_arff(self, batch):
        import pyarrow as pa

        columns = []
        for field, column in zip(self.schema, batch.columns, strict=True):
            values = column.to_pylist()
            if not (pa.types.is_integer(field.type) or pa.types.is_floating(field.type)):
                self._arff_nominal.setdefault(field.name, set()).update(
                    v for v in values if v is not None)
                values = ["?" if v is None else str(v) for v in values]
            else:
                values = ["?" if v is None else repr(float(v)) for v in values]
            columns.append(values)
        self._arff_lines.extend(",".join(row) for row in zip(*columns, strict=True))

    def close(self) -> None:
        """Finish the file (footer, header)."""
        import pyarrow as pa

        if self.kind in ("parquet", "csv"):
            self._writer.close()
            return
        if self.kind == "bin":
            self._handle.seek(0)
            self._handle.write(np.array([self.rows, len(self.schema)], "<i4").tobytes())
            self._handle.close()
            return
        self._handle.write(f"@relation {self.path.stem}\n\n")
        for field in self.schema:
            if pa.types.is_integer(field.type) or pa.types.is_floating(field.type):
                kind = "numeric"
            else:
                kind = "{" + ",".join(sorted(self._arff_nominal.get(field.name, ()))) + "}"
            self._handle.write(f"@attribute {field.name} {kind}\n")
        self._handle.write("\n@data\n")
        self._handle.write("\n".join(self._arff_lines) + ("\n" if self._arff_lines else ""))
        self._handle.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()


def write_table(path, table) -> None:
    """Write a ``pyarrow.Table`` to ``path`` (format by suffix), atomically."""
    with atomic_output(path) as tmp, TableWriter(tmp, table.schema, file_format(path)) as writer:
        writer.write(table)


def write_labeled(source, out, labels, *, label_column: str = "cluster",
                  labels_only: bool = False, kept_rows=None,
                  progress: Callable[[int], None] | None = None,
                  batch_rows: int = BATCH_ROWS) -> int:
    """Write the rows of ``source`` with a label column added, streaming, atomically.

    The input file is read again batch by batch (it is never held whole), each
    batch gets its slice of the labels and is appended to a temporary output
    that is renamed over ``out`` at the end.

    Parameters
    ----------
    source : path-like
        The input data file (any :data:`~gpumine.adapters.FORMATS`), or a directory
        or glob of Parquet files (:func:`~gpumine.adapters.parquet_parts`).
    out : path-like
        The output file; ``.parquet`` or ``.csv`` (format by suffix).
    labels : ndarray of int, or callable
        One label per row of ``source`` (per kept row with ``kept_rows``), or a
        function ``labels(first_row, batch) -> ndarray`` called for each batch.
    label_column : str
        Name of the added column; it must not be a column of the input.
    labels_only : bool
        Write only the label column.
    kept_rows : ndarray of bool, optional
        Rows of ``source`` that ``labels`` belong to; the others get a null label.
    progress : callable, optional
        Called with the number of rows written after each batch.
    batch_rows : int
        Rows per streamed batch.

    Returns
    -------
    int
        Rows written.
    """
    import pyarrow as pa

    schema = read_schema(source)
    if label_column in schema.names and not labels_only:
        raise InvalidInputError(f"the input already has a column {label_column!r}; choose "
                                "another name for the labels")
    if file_format(out) not in ("parquet", "csv"):
        raise InvalidInputError(f"{out}: labelled output is written as .parquet or .csv")
    label_type = pa.int32() if callable(labels) else pa.from_numpy_dtype(
        np.asarray(labels).dtype)
    label_field = pa.field(label_column, label_type)
    out_schema = pa.schema([label_field] if labels_only else [*schema, label_field])
    if not callable(labels):
        full = np.asarray(labels)
        if kept_rows is not None:
            full = labels_as(full, "arrow", kept_rows=kept_rows)
    first_row = 0
    with atomic_output(out) as tmp, TableWriter(tmp, out_schema, file_format(out)) as writer:
        for batch in iter_batches(source, batch_rows=batch_rows):
            stop = first_row + batch.num_rows
            if callable(labels):
                part = labels(first_row, batch)
                # an Arrow array keeps its nulls (rows dropped for nulls); NumPy has no null
                part = (part.cast(label_type) if isinstance(part, pa.Array)
                        else pa.array(np.asarray(part), type=label_type))
            else:
                part = full[first_row:stop]
                part = part if isinstance(part, pa.Array) else pa.array(part)
            if len(part) != batch.num_rows:
                raise InvalidInputError(f"{len(part)} labels for a batch of "
                                        f"{batch.num_rows} rows")
            columns = [part] if labels_only else [*batch.columns, part]
            writer.write(pa.record_batch(columns, schema=out_schema))
            first_row = stop
            if progress:
                progress(first_row)
        n_labels = None if callable(labels) else len(full)
        if n_labels is not None and n_labels != first_row:
            raise InvalidInputError(f"{n_labels} labels for {first_row} input rows")
    return first_row
