"""``gpumine cluster``: cluster a data file (or demo data) and write or summarize the result."""

from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich.markup import escape
from rich.table import Table

from gpumine.cli.console import Stages, fail, stdout
from gpumine.exceptions import GpumineError

__all__ = ["DEMO_CLUSTERS", "DEMO_SHAPE", "cluster"]

DEMO_SHAPE = (100_000, 8)
DEMO_CLUSTERS = 8
#: Defaults of the algorithm-specific options (None on the command line = not given).
KMEANS_DEFAULTS = {"n_clusters": 8, "init": "k-means++", "assign": "auto", "update": "auto",
                   "max_iter": 300, "tol": 1e-4}
WAVECLUSTER_DEFAULTS = {"grid_size": "auto", "levels": 1, "wavelet": "haar",
                        "threshold": "auto"}


class Algorithm(str, Enum):
    kmeans = "kmeans"
    wavecluster = "wavecluster"


class Nulls(str, Enum):
    error = "error"
    drop = "drop"


class Device(str, Enum):
    auto = "auto"
    cpu = "cpu"
    gpu = "gpu"


def _check_strategies(given: dict[str, str | None]) -> None:
    """Unknown strategy names are usage errors (exit 2), found before anything is read.

    The registry's own lookup and message; ``"auto"`` is resolved later, per backend.
    """
    from gpumine.registry import get_strategy

    for option, (kind, name) in given.items():
        if name is None or name == "auto":
            continue
        try:
            get_strategy(kind, name)
        except GpumineError as exc:
            raise typer.BadParameter(str(exc), param_hint=option) from None


def _names(option: str | None) -> list[str] | None:
    if option is None:
        return None
    names = [name.strip() for name in option.split(",")]
    if not all(names):
        raise typer.BadParameter(f"empty column name in {option!r}")
    return names


def _grid_size(value: str | None):
    if value is None or value == "auto":
        return "auto"
    try:
        sizes = tuple(int(v) for v in value.split(","))
    except ValueError:
        raise typer.BadParameter(f"--grid-size must be 'auto', an integer or integers "
                                 f"separated by commas, got {value!r}") from None
    return sizes[0] if len(sizes) == 1 else sizes


def _threshold(value: str | None):
    if value is None or value == "auto":
        return "auto"
    try:
        return float(value)
    except ValueError:
        raise typer.BadParameter(f"--threshold must be 'auto' or a number, got {value!r}") \
            from None


def _check_usage(algorithm, given_kmeans, given_wave, out, labels_only, centers_out, demo,
                 source, fit_sample):
    """Usage errors (exit 2): conflicting or misplaced options."""
    if demo == (source is not None):
        raise typer.BadParameter("give either INPUT or --demo")
    wrong = given_wave if algorithm == Algorithm.kmeans else given_kmeans
    if wrong:
        raise typer.BadParameter(f"{', '.join(wrong)} do not apply to --algorithm "
                                 f"{algorithm.value}")
    if labels_only and out is None:
        raise typer.BadParameter("--labels-only needs --out")
    if centers_out is not None and algorithm == Algorithm.wavecluster:
        raise typer.BadParameter("--centers-out is for k-means; WaveCluster has no centres")
    if demo and fit_sample is not None:
        raise typer.BadParameter("--fit-sample needs an INPUT file")


def _model(algorithm, options, device, seed):
    from gpumine import GPUKMeans, WaveCluster

    if algorithm == Algorithm.kmeans:
        return GPUKMeans(options["n_clusters"], init=options["init"], device=device,
                         assign=options["assign"], update=options["update"],
                         max_iter=options["max_iter"], tol=options["tol"], random_state=seed)
    return WaveCluster(grid_size=options["grid_size"], levels=options["levels"],
                       wavelet=options["wavelet"], threshold=options["threshold"],
                       device=device)


def _summary(model, algorithm, source, columns, n_rows, labels, stages, out, fit_rows):
    summary = {"input": source, "algorithm": algorithm.value, "rows": int(n_rows),
               "clustered_rows": len(labels), "features": len(columns),
               "columns": columns, "device": model.device_}
    if fit_rows is not None:
        summary["fit_rows"] = fit_rows
    if algorithm == Algorithm.kmeans:
        sizes = np.bincount(labels, minlength=model.n_clusters)
        inertia = "inertia" if fit_rows is None else "inertia_of_fit_rows"
        summary.update(model.strategies_, n_clusters=model.n_clusters, iterations=model.n_iter_,
                       **{inertia: model.inertia_}, cluster_sizes=sizes.tolist())
    else:
        clustered = labels[labels >= 0]
        summary.update(model.strategies_, grid=list(model.grid_shape_),
                       n_clusters=model.n_clusters_, noise=int((labels < 0).sum()),
                       cluster_sizes=np.bincount(clustered, minlength=model.n_clusters_).tolist())
    summary["seconds"] = dict(stages.seconds)
    if out is not None:
        summary["output"] = str(out)
    return summary


def _print(summary):
    table = Table(title=f"gpumine {summary['algorithm']}", show_header=False)
    for key, value in summary.items():
        if key == "cluster_sizes":
            value = (f"{len(value)} clusters, min {min(value):,}, max {max(value):,}"
                     if value else "none")
        elif key == "columns":
            value = ", ".join(value) if len(value) <= 8 else f"{', '.join(value[:8])}, ..."
        elif key == "seconds":
            value = ", ".join(f"{stage} {seconds:.3g}" for stage, seconds in value.items())
        elif isinstance(value, float):
            value = f"{value:,.6g}"
        elif isinstance(value, int):
            value = f"{value:,}"
        table.add_row(key.replace("_", " "), escape(str(value)))
    stdout.print(table)


def _sample_rows(n_rows, n_sample, seed):
    return np.sort(np.random.RandomState(seed).choice(n_rows, n_sample, replace=False))


def cluster(
    input: Annotated[Path | None, typer.Argument(
        help="Data file: .parquet, .csv, MineBench .bin or .arff.", show_default=False)] = None,
    demo: Annotated[bool, typer.Option(
        "--demo", help=f"Cluster {DEMO_SHAPE[0]:,} x {DEMO_SHAPE[1]} uniform MT19937 points "
                       "(seed 5489) with k-means, or the built-in snake shapes with "
                       "--algorithm wavecluster.")] = False,
    algorithm: Annotated[Algorithm, typer.Option(help="Clustering algorithm.")] =
        Algorithm.kmeans,
    n_clusters: Annotated[int | None, typer.Option(
        "-k", "--n-clusters", min=1, help="k-means: number of clusters [default: 8].",
        show_default=False)] = None,
    columns: Annotated[str | None, typer.Option(
        help="Comma-separated feature columns [default: every numeric column].")] = None,
    exclude: Annotated[str | None, typer.Option(
        help="Comma-separated columns to leave out.")] = None,
    nulls: Annotated[Nulls, typer.Option(
        help="Rows with a null or NaN feature: error, or drop them (their label is null).")] =
        Nulls.error,
    out: Annotated[Path | None, typer.Option(
        help="Write the input rows plus a label column to this .parquet or .csv file.")] = None,
    labels_only: Annotated[bool, typer.Option(
        "--labels-only", help="With --out: write only the label column.")] = False,
    label_column: Annotated[str, typer.Option(help="Name of the label column.")] = "cluster",
    centers_out: Annotated[Path | None, typer.Option(
        help="k-means: write the centres (one row per cluster, feature columns) here.")] = None,
    fit_sample: Annotated[int | None, typer.Option(
        min=1, help="Fit on this many random rows, then label every row, streaming the "
                    "file (for files larger than memory).")] = None,
    device: Annotated[Device, typer.Option(help="Where to run.")] = Device.auto,
    init: Annotated[str | None, typer.Option(
        help="k-means: init strategy [default: k-means++].", show_default=False)] = None,
    assign: Annotated[str | None, typer.Option(
        help="k-means: assign strategy [default: auto].", show_default=False)] = None,
    update: Annotated[str | None, typer.Option(
        help="k-means: update strategy [default: auto].", show_default=False)] = None,
    max_iter: Annotated[int | None, typer.Option(
        min=1, help="k-means: maximum iterations [default: 300].", show_default=False)] = None,
    tol: Annotated[float | None, typer.Option(
        min=0.0, help="k-means: relative tolerance [default: 1e-4].", show_default=False)] = None,
    grid_size: Annotated[str | None, typer.Option(
        help="WaveCluster: cells per feature: auto, N, or N1,N2,... [default: auto].",
        show_default=False)] = None,
    levels: Annotated[int | None, typer.Option(
        min=1, help="WaveCluster: wavelet levels [default: 1].", show_default=False)] = None,
    wavelet: Annotated[str | None, typer.Option(
        help="WaveCluster: haar or bior2.2 [default: haar].", show_default=False)] = None,
    threshold: Annotated[str | None, typer.Option(
        help="WaveCluster: density threshold, or auto [default: auto].",
        show_default=False)] = None,
    seed: Annotated[int, typer.Option(
        help="Random seed (k-means init, --fit-sample rows).")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress display.")] = False,
):
    """Cluster a data file (or --demo data) and print a summary.

    Reads the numeric columns (or --columns), fits k-means or WaveCluster on the
    chosen device, prints rows, features, device, strategies, iterations and
    inertia (k-means) or clusters and noise (WaveCluster) and the time of each
    stage, and with --out writes the input rows plus a label column. Outputs
    are written whole or not at all.

    Exit codes: 0 ok, 1 data or runtime error (one line on stderr), 2 usage error.
    """
    given_kmeans = [flag for flag, value in (("-k", n_clusters), ("--init", init),
                                             ("--assign", assign), ("--update", update),
                                             ("--max-iter", max_iter), ("--tol", tol))
                    if value is not None]
    given_wave = [flag for flag, value in (("--grid-size", grid_size), ("--levels", levels),
                                           ("--wavelet", wavelet), ("--threshold", threshold))
                  if value is not None]
    _check_usage(algorithm, given_kmeans, given_wave, out, labels_only, centers_out, demo,
                 input, fit_sample)
    _check_strategies({"--init": ("kmeans.init", init), "--assign": ("kmeans.assign", assign),
                       "--update": ("kmeans.update", update),
                       "--wavelet": ("wavecluster.wavelet", wavelet)})
    given = {"n_clusters": n_clusters, "init": init, "assign": assign, "update": update,
             "max_iter": max_iter, "tol": tol, "grid_size": _grid_size(grid_size),
             "levels": levels, "wavelet": wavelet, "threshold": _threshold(threshold)}
    defaults = KMEANS_DEFAULTS if algorithm == Algorithm.kmeans else WAVECLUSTER_DEFAULTS
    options = {name: default if given[name] is None else given[name]
               for name, default in defaults.items()}
    try:
        summary = _run(algorithm, options, input, demo, _names(columns), _names(exclude),
                       nulls.value, out, labels_only, label_column, centers_out, fit_sample,
                       device.value, seed, quiet)
    except (GpumineError, ValueError, OSError, MemoryError) as exc:
        fail(exc)
    if as_json:
        sys.stdout.write(json.dumps(summary) + "\n")
    else:
        _print(summary)


def _run(algorithm, options, source, demo, columns, exclude, nulls, out, labels_only,
         label_column, centers_out, fit_sample, device, seed, quiet):
    from gpumine.adapters import check_output_path, read_columns, write_labeled
    from gpumine.backend import get_backend

    for path in (out, centers_out):
        if path is not None:
            check_output_path(path, source)
    if out is not None and source is not None and not labels_only:
        from gpumine.adapters import check_columns_writable, read_schema

        check_columns_writable(out, read_schema(source))  # the input rows are written too
    if source is not None and not demo:
        exclude = _announce_columns(source, columns, exclude, label_column)
    if out is not None and centers_out is not None and out.resolve() == centers_out.resolve():
        raise GpumineError("--out and --centers-out name the same file")
    backend = get_backend(device)  # fails here, before reading, without a GPU
    model = _model(algorithm, options, device, seed)
    dtype = (np.float64, np.float32) if algorithm == Algorithm.kmeans else np.float64
    with Stages(quiet=quiet) as stages:
        if demo:
            data, names, n_rows, kept = _demo(algorithm, stages)
            source_name = ("demo: make_uniform" if algorithm == Algorithm.kmeans
                           else "demo: make_shapes")
        elif fit_sample is not None:
            data, names, n_rows, kept = _read_sample(source, columns, exclude, fit_sample, seed,
                                                     backend, dtype, nulls, stages)
            source_name = str(source)
        else:
            from gpumine.adapters import read_schema

            n_total = _row_count_hint(source, read_schema)
            with stages.stage("read", total=n_total) as advance:
                data = read_columns(source, columns, exclude, backend=backend, dtype=dtype,
                                    nulls=nulls, progress=advance)
            names, kept = data.feature_names, data.kept_rows
            n_rows = len(kept) if kept is not None else data.n_samples
            source_name = str(source)
        with stages.stage("fit"):
            model.fit(data)
        demo_X = data.X if demo else None
        del data  # the file's copy: writing streams the file again
        labels = model.labels_
        if fit_sample is not None and fit_sample < n_rows:
            labels = _label_file(model, source, names, backend, dtype, nulls, out, labels_only,
                                 label_column, stages, n_rows)
        elif out is not None:
            with stages.stage("write", total=n_rows) as advance:
                if demo:
                    _write_demo(out, demo_X, labels, names, labels_only, label_column)
                else:
                    write_labeled(source, out, labels, label_column=label_column,
                                  labels_only=labels_only, kept_rows=kept, progress=advance)
        if centers_out is not None:
            _write_centers(centers_out, model, names)
    sampled = fit_sample is not None and fit_sample < n_rows
    return _summary(model, Algorithm(algorithm), source_name, names, n_rows,
                    np.asarray(labels), stages, out, fit_sample if sampled else None)


def _row_count_hint(source, read_schema):
    import pyarrow.parquet as pq

    read_schema(source)  # a missing or corrupt file fails here, with its own message
    try:
        return pq.ParquetFile(source).metadata.num_rows
    except Exception:  # not Parquet: no cheap row count, the progress bar has no total
        return None


def _demo(algorithm, stages):
    """The demo points: uniform MT19937 data for k-means, shapes with noise for WaveCluster."""
    from gpumine.adapters import Columns
    from gpumine.datasets import DEFAULT_SEED, make_shapes, make_uniform

    with stages.stage("generate"):
        if algorithm == Algorithm.kmeans:
            X = make_uniform(*DEMO_SHAPE, random_state=DEFAULT_SEED)
        else:
            X, _ = make_shapes(DEMO_SHAPE[0], random_state=DEFAULT_SEED)
    names = [f"x{j}" for j in range(X.shape[1])]
    return Columns(X, names), names, len(X), None


def _write_demo(out, X, labels, names, labels_only, label_column):
    import pyarrow as pa

    from gpumine.adapters import write_table

    columns = {} if labels_only else {name: X[:, j] for j, name in enumerate(names)}
    columns[label_column] = labels
    write_table(out, pa.table(columns))


def _announce_columns(source, columns, exclude, label_column):
    """Say on stderr which columns are left out of the features, and why.

    Without ``--columns``: a column named like gpumine's label column (a file it
    labelled before) is left out -- clustering on old labels is never meant -- and so
    is every non-numeric column; each is named. Returns the exclusions to use.
    """
    from gpumine.adapters import read_schema, select_columns
    from gpumine.cli.console import stderr

    if columns:
        return exclude
    schema = read_schema(source)
    exclude = list(exclude or [])
    if label_column in schema.names and label_column not in exclude:
        exclude.append(label_column)
        stderr.print(f"note: leaving out column {label_column!r}, a label column as gpumine "
                     "writes them; name it in --columns to cluster on it", markup=False,
                     highlight=False, soft_wrap=True)
    chosen = select_columns(schema, None, exclude)
    dropped = [f"{f.name} ({f.type})" for f in schema
               if f.name not in chosen and f.name not in exclude]
    if dropped:
        stderr.print(f"note: leaving out non-numeric columns: {', '.join(dropped)}",
                     markup=False, highlight=False, soft_wrap=True)
    return exclude


def _read_sample(source, columns, exclude, n_sample, seed, backend, dtype, nulls, stages):
    import pyarrow as pa

    from gpumine.adapters import as_columns, iter_batches, read_schema, select_columns

    schema = read_schema(source)
    names = select_columns(schema, columns, exclude)
    n_rows = _row_count_hint(source, read_schema)
    if n_rows is None:
        n_rows = sum(batch.num_rows for batch in iter_batches(source, names[:1]))
    rows = _sample_rows(n_rows, min(n_sample, n_rows), seed)
    parts, first = [], 0
    with stages.stage("sample", total=n_rows) as advance:
        for batch in iter_batches(source, names):
            lo, hi = np.searchsorted(rows, [first, first + batch.num_rows])
            if hi > lo:
                parts.append(batch.take(pa.array(rows[lo:hi] - first)))
            first += batch.num_rows
            advance(first)
    table = pa.Table.from_batches(parts, schema=pa.schema([schema.field(n) for n in names]))
    data = as_columns(table, backend=backend, dtype=dtype, nulls=nulls)
    return data, names, n_rows, None


def _label_file(model, source, names, backend, dtype, nulls, out, labels_only, label_column,
                stages, n_rows):
    """Label every row of ``source`` with the fitted model, streaming; returns the labels."""
    import pyarrow as pa

    from gpumine.adapters import (
        as_columns,
        iter_device_batches,
        labels_as,
        write_labeled,
    )

    # k-means predicts in its training dtype; WaveCluster always works in float64
    out_dtype = getattr(model, "cluster_centers_", np.empty(0, np.float64)).dtype
    collected = []

    def predict(columns):
        labels = np.asarray(model.predict(columns)) if columns.n_samples else np.empty(0, int)
        return labels_as(labels, "arrow", kept_rows=columns.kept_rows)

    with stages.stage("label", total=n_rows) as advance:
        if out is None:
            for first_row, columns in iter_device_batches(source, names, backend=backend,
                                                          dtype=out_dtype, nulls=nulls):
                collected.append(predict(columns))
                advance(first_row + len(collected[-1]))
        else:
            def batch_labels(first_row, batch):
                part = predict(as_columns(batch.select(names), backend=backend, dtype=out_dtype,
                                          nulls=nulls, allow_empty=True))
                collected.append(part)
                return part

            write_labeled(source, out, batch_labels, label_column=label_column,
                          labels_only=labels_only, progress=advance)
    labels = pa.chunked_array(collected, type=collected[0].type if collected else pa.int64())
    return labels.drop_null().to_numpy()


def _write_centers(path, model, names):

    from gpumine.adapters import table_as, write_table

    write_table(path, table_as(model.cluster_centers_, "arrow", columns=names))
