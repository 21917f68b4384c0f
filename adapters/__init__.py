"""Adapters between gpumine and NumPy / CuPy / pandas / Arrow / Parquet (``gpumine.adapters``).

* :func:`as_columns` / :func:`validate_input` -- the one conversion entry point of
  every estimator: validated, column-major data on the chosen backend plus the
  feature names (:mod:`gpumine.adapters.columns`).
* :func:`read_table`, :func:`iter_batches`, :func:`read_columns` -- data files
  (.parquet, .csv, MineBench .bin, .arff) and directories or globs of Parquet files
  as Arrow record batches, streamed row group by row group, and as device batches
  (:mod:`gpumine.adapters.sources`).
* :func:`labels_as`, :func:`table_as`, :func:`write_labeled`, :func:`write_table`,
  :func:`atomic_output`
  -- results back as NumPy, pandas or Arrow, and written to files that appear
  whole or not at all (:mod:`gpumine.adapters.sinks`).
"""

from gpumine.adapters.columns import NULLS, Columns, as_columns, validate_input
from gpumine.adapters.sinks import (
    TableWriter,
    atomic_output,
    check_columns_writable,
    check_output_path,
    labels_as,
    table_as,
    write_labeled,
    write_table,
)
from gpumine.adapters.sources import (
    FORMATS,
    check_numeric,
    iter_batches,
    iter_device_batches,
    parquet_parts,
    read_columns,
    read_schema,
    read_table,
    row_count,
    select_columns,
    source_format,
)

__all__ = [
    "FORMATS",
    "NULLS",
    "Columns",
    "TableWriter",
    "as_columns",
    "atomic_output",
    "check_columns_writable",
    "check_numeric",
    "check_output_path",
    "iter_batches",
    "iter_device_batches",
    "labels_as",
    "parquet_parts",
    "read_columns",
    "read_schema",
    "read_table",
    "row_count",
    "select_columns",
    "source_format",
    "table_as",
    "validate_input",
    "write_labeled",
    "write_table",
]
