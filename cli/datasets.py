"""``gpumine datasets``: generate, fetch and convert data files."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from gpumine.cli.console import Stages, fail, stdout
from gpumine.exceptions import GpumineError, translated

__all__ = ["app"]

app = typer.Typer(
    help="Generate, fetch and convert data files (.parquet, .csv, .bin, .arff).",
    no_args_is_help=True,
    rich_markup_mode=None,  # plain help: '[default: 8]' is text, not markup
)


class Dtype(str, Enum):
    float32 = "float32"
    float64 = "float64"


def _done(path: Path, rows: int, columns: int, quiet: bool) -> None:
    if not quiet:
        stdout.print(f"wrote {rows:,} rows x {columns} columns to {path}", highlight=False,
                     markup=False)


@app.command("make-uniform")
def make_uniform_file(
    n_samples: Annotated[int, typer.Argument(min=1, help="Rows.")],
    n_features: Annotated[int, typer.Argument(min=1, help="Columns (x0, x1, ...).")],
    out: Annotated[Path, typer.Argument(help="Output file: .parquet, .csv, .bin or .arff.")],
    seed: Annotated[int, typer.Option(help="MT19937 seed.")] = 5489,
    dtype: Annotated[Dtype, typer.Option(help="Value type (.bin is always float32).")] =
        Dtype.float32,
    quiet: Annotated[bool, typer.Option("--quiet", "-q")] = False,
):
    """Uniform [0, 1) points from MT19937, as the seed papers used; reproducible bit for bit.

    Row i, column j is the (i * n_features + j)-th double of RandomState(seed),
    cast to --dtype: the file holds exactly gpumine.datasets.make_uniform(
    n_samples, n_features, seed). Written in blocks, so any size fits in memory.
    """
    import numpy as np
    import pyarrow as pa

    from gpumine.adapters import TableWriter, atomic_output, check_output_path
    from gpumine.datasets import iter_uniform

    try:
        with translated():
            check_output_path(out)
            value = pa.from_numpy_dtype(np.dtype(dtype.value))
            schema = pa.schema([(f"x{j}", value) for j in range(n_features)])
            with Stages(quiet=quiet) as stages, \
                    stages.stage("generate", total=n_samples) as advance, \
                    atomic_output(out) as tmp, TableWriter(tmp, schema, _kind(out)) as writer:
                for start, block in iter_uniform(n_samples, n_features, seed, dtype.value,
                                                 block_rows=1 << 20):
                    writer.write(pa.record_batch([pa.array(block[:, j]) for j in range(n_features)],
                                                 schema=schema))
                    advance(start + len(block))
    except GpumineError as exc:
        fail(exc)
    _done(out, n_samples, n_features, quiet)


def _kind(path):
    from gpumine.adapters.sources import file_format

    return file_format(path)


@app.command("corel")
def corel_file(
    subset: Annotated[str, typer.Argument(help="color, edge or texture.")],
    out: Annotated[Path, typer.Argument(help="Output file: .parquet, .csv, .bin or .arff.")],
    data_home: Annotated[Path | None, typer.Option(
        help="Where the Corel files are cached [default: $GPUMINE_DATA or ~/.cache/gpumine].",
        show_default=False)] = None,
    url: Annotated[str | None, typer.Option(
        help="Download from this base URL (a mirror, or file://) when not cached.")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q")] = False,
):
    """The Corel image features (color 9-d, edge 18-d, texture 20-d), checksum-verified."""
    import pyarrow as pa

    from gpumine.adapters import check_output_path, write_table
    from gpumine.datasets import load_corel

    try:
        with translated():
            check_output_path(out)
            X = load_corel(subset, data_home=data_home, **({"url": url} if url else {}))
            write_table(out, pa.table({f"{subset}{j}": X[:, j] for j in range(X.shape[1])}))
    except GpumineError as exc:
        fail(exc)
    _done(out, X.shape[0], X.shape[1], quiet)


@app.command("convert")
def convert_file(
    source: Annotated[Path, typer.Argument(help="Input: .parquet, .csv, .bin or .arff.")],
    out: Annotated[Path, typer.Argument(help="Output: .parquet, .csv, .bin or .arff.")],
    columns: Annotated[str | None, typer.Option(
        help="Comma-separated columns to keep [default: all; numeric ones for .bin].")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q")] = False,
):
    """Convert a data file between formats, streaming (any size), written atomically."""
    import pyarrow as pa

    from gpumine.adapters import (
        TableWriter,
        atomic_output,
        check_columns_writable,
        check_output_path,
        iter_batches,
        read_schema,
        select_columns,
    )

    try:
        with translated():
            check_output_path(out, source)
            schema = read_schema(source)
            names = [c.strip() for c in columns.split(",")] if columns else None
            if names is not None or _kind(out) == "bin":
                names = select_columns(schema, names)
            else:
                names = schema.names
            schema = pa.schema([schema.field(n) for n in names])
            check_columns_writable(out, schema)
            with Stages(quiet=quiet) as stages, stages.stage("convert") as advance, \
                    atomic_output(out) as tmp, TableWriter(tmp, schema, _kind(out)) as writer:
                for batch in iter_batches(source, names):
                    writer.write(batch)
                    advance(writer.rows)
                rows = writer.rows
    except GpumineError as exc:
        fail(exc)
    _done(out, rows, len(names), quiet)

