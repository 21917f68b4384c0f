"""Cluster a data file end to end: the job that ``gpumine cluster`` and the Airflow operator run.

One function, :func:`cluster_file`: check everything that can be checked before any
work (parameters, strategies, columns, output paths), read the feature columns (or
a random sample of the rows), fit k-means or WaveCluster, label every row (streaming
the file again when the fit saw a sample), write the input rows plus a label column
and the centres, each file whole or not at all, and return a JSON-serializable
summary. The command line and :mod:`gpumine.airflow` differ only in how they show
progress and report errors.

Examples
--------
>>> import os, tempfile
>>> import numpy as np, pyarrow as pa, pyarrow.parquet as pq
>>> from gpumine.jobs import cluster_file
>>> folder = tempfile.mkdtemp()
>>> rng = np.random.default_rng(0)
>>> points = np.concatenate([rng.normal(0, 0.1, (50, 2)), rng.normal(5, 0.1, (50, 2))])
>>> pq.write_table(pa.table({"x": points[:, 0], "y": points[:, 1]}),
...                os.path.join(folder, "points.parquet"))
>>> summary = cluster_file(os.path.join(folder, "points.parquet"), params={"n_clusters": 2},
...                        out=os.path.join(folder, "labelled.parquet"), device="cpu")
>>> summary["rows"], summary["n_clusters"], sorted(summary["cluster_sizes"])
(100, 2, [50, 50])
>>> pq.read_table(os.path.join(folder, "labelled.parquet")).column_names
['x', 'y', 'cluster']
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from gpumine.devices import is_several_gpus, resolve_gpu_ids
from gpumine.exceptions import InvalidInputError, InvalidParameterError, translating

__all__ = ["ALGORITHMS", "DEMO_CLUSTERS", "DEMO_SHAPE", "StageTimer", "cluster_file",
           "make_model"]

ALGORITHMS = ("kmeans", "wavecluster")
DEMO_SHAPE = (100_000, 8)
DEMO_CLUSTERS = 8
NULLS = ("error", "drop")
#: Estimator parameters naming a registered strategy, by algorithm: checked before any work.
_STRATEGY_PARAMS = {"kmeans": {"init": "kmeans.init", "assign": "kmeans.assign",
                               "update": "kmeans.update"},
                    "wavecluster": {"wavelet": "wavecluster.wavelet",
                                    "label": "wavecluster.label"}}

log = logging.getLogger(__name__)


class StageTimer:
    """Wall time of each named stage of a job, with an optional progress callback.

    ``stage(name, total)`` is a context manager yielding ``advance(done)``; after it,
    ``seconds[name]`` holds the stage's wall time. The command line shows the same
    stages as progress bars (``gpumine.cli.console.Stages``); the Airflow operator
    logs them.

    Parameters
    ----------
    progress : callable, optional
        ``progress(name, done, total)``, called with the rows done so far.

    Examples
    --------
    >>> timer = StageTimer()
    >>> with timer.stage("read", total=10) as advance:
    ...     advance(10)
    >>> list(timer.seconds)
    ['read']
    """

    def __init__(self, progress: Callable[[str, int, int | None], None] | None = None):
        self.seconds: dict[str, float] = {}
        self._progress = progress

    @contextlib.contextmanager
    def stage(self, name: str, total: int | None = None):
        start = time.perf_counter()
        try:
            if self._progress is None:
                yield lambda done: None
            else:
                yield lambda done: self._progress(name, done, total)
        finally:
            self.seconds[name] = round(time.perf_counter() - start, 4)


def make_model(algorithm: str, params: dict | None = None, *, device: str = "auto",
               seed: int = 0):
    """The estimator of a job, its parameters checked before any data is read.

    Parameters
    ----------
    algorithm : {"kmeans", "wavecluster"}
    params : dict, optional
        Estimator parameters (``GPUKMeans`` or ``WaveCluster`` ones); the
        estimator's defaults for the rest. ``device`` and ``random_state`` are
        the job's own arguments, not parameters here.
    device : {"auto", "cpu", "gpu", "gpu:all"} or list of int
        ``"gpu:all"`` or a list of GPU ids: k-means on several GPUs of this process
        (:mod:`gpumine.kmeans.multi_gpu`); WaveCluster runs on one device.
    seed : int
        k-means' ``random_state``.

    Raises
    ------
    InvalidParameterError
        An unknown algorithm or parameter, a bad value, an unknown strategy name.
    """
    from gpumine.kmeans import GPUKMeans
    from gpumine.registry import get_strategy
    from gpumine.wavecluster import WaveCluster

    if algorithm not in ALGORITHMS:
        raise InvalidParameterError(f"algorithm must be one of {', '.join(ALGORITHMS)}, got "
                                    f"{algorithm!r}")
    estimator = GPUKMeans if algorithm == "kmeans" else WaveCluster
    params = dict(params or {})
    for name, instead in (("device", "device"), ("random_state", "seed")):
        if name in params:
            raise InvalidParameterError(f"give {name} as the job's {instead!r} argument, not as "
                                        "an estimator parameter")
    known = estimator().get_params()
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise InvalidParameterError(
            f"{estimator.__name__} has no parameter {unknown[0]!r}; its parameters are: "
            f"{', '.join(sorted(set(known) - {'device', 'random_state'}))}")
    for name, kind in _STRATEGY_PARAMS[algorithm].items():
        value = params.get(name)
        if isinstance(value, str) and value != "auto":
            get_strategy(kind, value)  # UnknownStrategy names the registered ones
    if algorithm == "wavecluster" and is_several_gpus(device):
        raise InvalidParameterError(f"device={device!r}: several GPUs are for k-means; "
                                    "WaveCluster runs on one device (device='gpu')")
    if algorithm == "kmeans":
        model = GPUKMeans(**{**params, "device": device, "random_state": seed})
        model._check_params()  # the estimator's own checks, before reading
    else:
        model = WaveCluster(**{**params, "device": device})
    return model


def _jsonable(value):
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    return value


@translating
def cluster_file(source, *, algorithm: str = "kmeans", params: dict | None = None,
                 columns=None, exclude=None, nulls: str = "error", out=None,
                 labels_only: bool = False, label_column: str = "cluster", centers_out=None,
                 fit_sample: int | None = None, device: str = "auto", seed: int = 0,
                 stages=None, note: Callable[[str], None] | None = None,
                 demo: bool = False, stream: bool | None = None) -> dict:
    """Cluster the rows of a data file and write the labels: the whole ``gpumine cluster`` job.

    Parameters
    ----------
    source : path-like
        A data file (.parquet, .csv, MineBench .bin, .arff) or a directory or glob
        of Parquet files (read as one table; see
        :func:`gpumine.adapters.parquet_parts`). ``None`` with ``demo=True``.
    algorithm : {"kmeans", "wavecluster"}
    params : dict, optional
        Estimator parameters (see :func:`make_model`); k-means' ``n_clusters``
        is 8 unless given.
    columns, exclude : sequence of str, optional
        The feature columns (default: every numeric column), and columns to leave
        out. Without ``columns``, a column named ``label_column`` (labels written by
        an earlier run) is left out, with a note.
    nulls : {"error", "drop"}
        Rows with a null or NaN feature: an error, or left out of the fit with a
        null label.
    out : path-like, optional
        Write the input rows plus ``label_column`` here (.parquet or .csv), through
        a temporary file renamed over ``out`` at the end: an existing file is
        replaced whole, a failure leaves it as it was.
    labels_only : bool
        Write only the label column to ``out``.
    label_column : str
    centers_out : path-like, optional
        k-means: write the centres here (one row per cluster, the feature columns).
    fit_sample : int, optional
        Fit on this many random rows (drawn with ``seed``), then label every row
        streaming the file: for files larger than memory.
    device : {"auto", "cpu", "gpu", "gpu:all"} or list of int
        ``"gpu:all"`` or GPU ids: k-means on several GPUs (:func:`make_model`), the file
        read onto the first of them; in memory only (no ``fit_sample`` or ``stream``, and
        no automatic streaming).
    seed : int
        k-means' ``random_state`` and the ``fit_sample`` draw.
    stages : object, optional
        Where stage times (and progress) go: a :class:`StageTimer` (the default) or
        anything with its ``stage(name, total)`` and ``seconds``.
    note : callable, optional
        Called with each informational note (columns left out); logged by default.
    demo : bool
        Cluster generated data instead of ``source``: 100,000 uniform 8-d points
        (MT19937, seed 5489) for k-means, noisy shapes for WaveCluster.
    stream : bool or None
        Fit over the file's record batches, read again at every pass, instead of
        reading it whole (:mod:`gpumine.kmeans.chunked`): Parquet inputs (a file, a
        directory or a glob), ``nulls="error"``. None
        (the default) streams, with a note, when the features would take more than
        half of the memory the device has free.

    Returns
    -------
    dict
        JSON-serializable: ``input``, ``algorithm``, ``rows``, ``clustered_rows``,
        ``features``, ``columns``, ``device``, the strategies used, ``n_clusters``,
        ``cluster_sizes``, ``seconds`` per stage (``device_ids`` on several GPUs);
        k-means adds ``n_iter`` and
        ``inertia`` (``inertia_of_fit_rows`` after a ``fit_sample``), WaveCluster
        ``grid`` and ``noise``; ``output``/``centers_output`` when written.

    Raises
    ------
    GpumineError
        Only gpumine's own errors (:func:`gpumine.exceptions.translated`):
        ``InvalidParameterError``, ``InvalidInputError`` or ``DataFormatError`` (each a
        ``ValueError``) for bad parameters or data, nothing written;
        ``DataIOError`` (an ``OSError``; ``DataNotFoundError`` when nothing is there) for
        a file that cannot be read or written; ``InsufficientMemoryError``.
    """
    from gpumine.adapters import check_output_path, read_columns, write_labeled
    from gpumine.backend import get_backend

    note = note or log.info
    stages = stages if stages is not None else StageTimer()
    if nulls not in NULLS:
        raise InvalidParameterError(f"nulls must be one of {', '.join(NULLS)}, got {nulls!r}")
    if demo == (source is not None):
        raise InvalidParameterError("give either a source or demo=True")
    if labels_only and out is None:
        raise InvalidParameterError("labels_only needs an output")
    if centers_out is not None and algorithm == "wavecluster":
        raise InvalidParameterError("centres are for k-means; WaveCluster has none")
    if fit_sample is not None and (demo or int(fit_sample) < 1):
        raise InvalidParameterError("fit_sample needs a source file and a size >= 1, got "
                                    f"{fit_sample!r}")
    if stream and (demo or fit_sample is not None or nulls != "error"):
        raise InvalidParameterError("stream takes a source file, no fit_sample, and "
                                    "nulls='error' (every row keeps its label)")
    several = is_several_gpus(device)
    if several and (fit_sample is not None or stream):
        raise InvalidParameterError(f"device={device!r} fits in memory: several GPUs take no "
                                    "fit_sample or stream (stream on one GPU: device='gpu')")
    params = dict(params or {})
    if algorithm == "kmeans":
        params.setdefault("n_clusters", 8)
    model = make_model(algorithm, params, device=device, seed=seed)
    out = None if out is None else Path(out)
    centers_out = None if centers_out is None else Path(centers_out)
    for path in (out, centers_out):
        if path is not None:
            check_output_path(path, source)
    if out is not None and centers_out is not None and out.resolve() == centers_out.resolve():
        raise InvalidParameterError("the labelled output and the centres name the same file")
    if source is not None:
        from gpumine.adapters import (
            check_columns_writable,
            check_numeric,
            read_schema,
            select_columns,
        )

        schema = read_schema(source)  # a missing or corrupt input fails here
        if out is not None and not labels_only:
            check_columns_writable(out, schema)  # the input rows are written too
        exclude = _announce_columns(schema, columns, exclude, label_column, note)
        names = select_columns(schema, columns, exclude)
        check_numeric(schema, names)
        if out is not None and not labels_only and label_column in schema.names:
            raise InvalidInputError(f"the input already has a column {label_column!r}; "
                                    "choose another name for the labels")
        if algorithm == "wavecluster":
            model._check_params(len(names))
    backend = get_backend("gpu" if several else device)  # fails here, before reading, without
    dtype = (np.float64, np.float32) if algorithm == "kmeans" else np.float64  # a GPU
    with _stage_scope(stages), _first_gpu(device):
        if demo:
            data, names, n_rows, kept = _demo(algorithm, stages)
            source_name = ("demo: make_uniform" if algorithm == "kmeans"
                           else "demo: make_shapes")
        elif fit_sample is not None:
            data, names, n_rows, kept = _read_sample(source, names, int(fit_sample), seed,
                                                     backend, dtype, nulls, stages)
            source_name = str(source)
        elif not several and _streams(stream, source, names, nulls, backend, note):
            data, n_rows, kept = _dataset(source, names), _row_count(source), None
            source_name = str(source)
        else:
            from gpumine.adapters import row_count

            with stages.stage("read", total=row_count(source)) as advance:
                data = read_columns(source, names, backend=backend, dtype=dtype, nulls=nulls,
                                    progress=advance)
            kept = data.kept_rows
            n_rows = len(kept) if kept is not None else data.n_samples
            source_name = str(source)
        with stages.stage("fit"):
            model.fit(data)
        demo_X = data.X if demo else None
        del data  # the file's copy: writing streams the file again
        labels = model.labels_
        sampled = fit_sample is not None and fit_sample < n_rows
        if sampled:
            labels = _label_file(model, source, names, backend, nulls, out, labels_only,
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
    summary = _summary(model, algorithm, source_name, names, n_rows, np.asarray(labels),
                       stages, fit_sample if sampled else None)
    if out is not None:
        summary["output"] = str(out)
    if centers_out is not None:
        summary["centers_output"] = str(centers_out)
    return _jsonable(summary)


def _row_count(source) -> int:
    """Rows of a Parquet ``source``, from its metadata."""
    from gpumine.adapters import row_count

    return int(row_count(source))


def _streams(stream, source, names, nulls, backend, note) -> bool:
    """Whether to stream ``source`` (``stream``, or, when None, its size against memory)."""
    from gpumine.adapters import row_count, source_format

    kind = source_format(source)
    if stream is None:
        if nulls != "error" or kind not in ("parquet", "dataset"):
            return False
        need = (row_count(source) or 0) * len(names) * 8
        free = _free_memory(backend)
        if need <= free // 2:
            return False
        note(f"streaming the input: its {len(names)} features take about {need / 2**30:.1f} "
             f"GiB, more than half of the {free / 2**30:.1f} GiB free on the {backend.name}")
        return True
    if stream and kind not in ("parquet", "dataset"):
        raise InvalidParameterError(f"stream reads Parquet inputs, not {kind}")
    return bool(stream)


def _free_memory(backend) -> int:
    if backend.is_gpu:
        free, _ = backend.xp.cuda.runtime.memGetInfo()  # sync: none, a driver query
        return int(free)
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 1 << 34


def _dataset(source, names):
    """``source`` as a ``pyarrow.dataset.Dataset`` of the feature columns."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    from gpumine.adapters import parquet_parts, read_schema, source_format

    schema = read_schema(source)
    features = pa.schema([schema.field(name) for name in names])
    kind = source_format(source)
    paths = [str(p) for p in parquet_parts(source)] if kind == "dataset" else [str(source)]
    return ds.dataset(paths, format="parquet", schema=features)


def _first_gpu(device):
    """Where a several-GPU job reads and fits: its first GPU (the estimator's X holder)."""
    if not is_several_gpus(device):
        return contextlib.nullcontext()
    from gpumine.backend import cupy_module

    return cupy_module().cuda.Device(resolve_gpu_ids(device)[0])


def _stage_scope(stages):
    # the command line's Stages is a context manager (its progress display); a StageTimer is not
    return stages if hasattr(stages, "__enter__") else contextlib.nullcontext()


def _summary(model, algorithm, source, columns, n_rows, labels, stages, fit_rows):
    summary = {"input": source, "algorithm": algorithm, "rows": int(n_rows),
               "clustered_rows": len(labels), "features": len(columns),
               "columns": list(columns), "device": model.device_}
    if getattr(model, "device_ids_", None) is not None:
        summary["device_ids"] = list(model.device_ids_)
    if fit_rows is not None:
        summary["fit_rows"] = fit_rows
    if algorithm == "kmeans":
        sizes = np.bincount(labels, minlength=model.n_clusters)
        inertia = "inertia" if fit_rows is None else "inertia_of_fit_rows"
        summary.update(model.strategies_, n_clusters=model.n_clusters, n_iter=model.n_iter_,
                       **{inertia: float(model.inertia_)}, cluster_sizes=sizes.tolist())
    else:
        clustered = labels[labels >= 0]
        summary.update(model.strategies_, grid=list(model.grid_shape_),
                       n_clusters=model.n_clusters_, noise=int((labels < 0).sum()),
                       cluster_sizes=np.bincount(clustered, minlength=model.n_clusters_).tolist())
    summary["seconds"] = dict(stages.seconds)
    return summary


def _announce_columns(schema, columns, exclude, label_column, note):
    """Note which columns are left out of the features, and why.

    Without ``columns``: a column named like gpumine's label column (a file it
    labelled before) is left out -- clustering on old labels is never meant -- and so
    is every non-numeric column; each is named. Returns the exclusions to use.
    """
    from gpumine.adapters import select_columns

    if columns:
        return exclude
    exclude = list(exclude or [])
    if label_column in schema.names and label_column not in exclude:
        exclude.append(label_column)
        note(f"leaving out column {label_column!r}, a label column as gpumine writes them; "
             "name it among the columns to cluster on it")
    chosen = select_columns(schema, None, exclude)
    dropped = [f"{f.name} ({f.type})" for f in schema
               if f.name not in chosen and f.name not in exclude]
    if dropped:
        note(f"leaving out non-numeric columns: {', '.join(dropped)}")
    return exclude


def _demo(algorithm, stages):
    """The demo points: uniform MT19937 data for k-means, shapes with noise for WaveCluster."""
    from gpumine.adapters import Columns
    from gpumine.datasets import DEFAULT_SEED, make_shapes, make_uniform

    with stages.stage("generate"):
        if algorithm == "kmeans":
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


def _sample_rows(n_rows, n_sample, seed):
    return np.sort(np.random.RandomState(seed).choice(n_rows, n_sample, replace=False))


def _read_sample(source, names, n_sample, seed, backend, dtype, nulls, stages):
    import pyarrow as pa

    from gpumine.adapters import as_columns, iter_batches, read_schema, row_count

    schema = read_schema(source)
    n_rows = row_count(source)
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


def _label_file(model, source, names, backend, nulls, out, labels_only, label_column,
                stages, n_rows):
    """Label every row of ``source`` with the fitted model, streaming; returns the labels."""
    import pyarrow as pa

    from gpumine.adapters import as_columns, iter_device_batches, labels_as, write_labeled

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

