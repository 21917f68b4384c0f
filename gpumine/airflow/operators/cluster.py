"""``GpuMineClusterOperator``: cluster a Parquet file, directory or glob as a task of a DAG."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowTaskTerminated

from gpumine.exceptions import InvalidParameterError

__all__ = ["GpuMineClusterOperator"]

_ALGORITHMS = ("kmeans", "wavecluster")
_DEVICES = ("auto", "cpu", "gpu")
_NULLS = ("error", "drop")
#: Seconds between two progress lines of a long stage in the task log.
PROGRESS_EVERY_S = 30.0


class GpuMineClusterOperator(BaseOperator):
    """Cluster the rows of a Parquet file, directory or glob and write them back with their labels.

    The task runs the job of ``gpumine cluster`` (:func:`gpumine.jobs.cluster_file`):
    it checks the parameters, the columns and the output paths before any work,
    reads the feature columns, fits k-means or WaveCluster on the worker's GPU (or
    its CPU), writes the input rows plus a ``label_column`` to ``output`` and the
    centres to ``centers_output``, and returns the run summary, which Airflow
    stores as the task's XCom value.

    For a pipeline:

    * **Idempotent.** Every output is written to a temporary file beside it and
      renamed over it at the end, so a re-run of the same logical date replaces its
      output whole, and a failed or killed run (SIGTERM) leaves no partial file: the
      previous output, if any, stays as it was. Output directories that the task
      created are removed again when it fails.
    * **Clear failures.** Bad parameters or data fail the task without retries, with
      one line in the task log saying what is wrong (``AirflowFailException``); an
      I/O error (a file not there yet, a full disk) fails it with retries
      (``AirflowException``).
    * **The GPU released.** After a GPU run CuPy's memory pools are emptied, so the
      next task on the worker gets the memory; a CPU run never opens a CUDA context.
    * **Any worker.** ``device="auto"`` runs on the worker's GPU and falls back to
      the CPU on a worker without one, with a log line saying so.

    Parameters
    ----------
    input : str or path-like
        A Parquet file, a directory of Parquet files or a glob (all files read as
        one table, in path order), or a .csv, MineBench .bin or .arff file.
        Templated.
    output : str or path-like, optional
        Where to write the input rows plus the label column (.parquet or .csv).
        Templated. Without it only the summary is produced. Kept as the attribute
        ``output_path``: ``output`` is every operator's XComArg (``op.output``).
    algorithm : {"kmeans", "wavecluster"}
    n_clusters : int, optional
        k-means: the number of clusters (8 when not given). Not for WaveCluster.
    columns : sequence of str or str, optional
        Feature columns (a list, or a comma-separated string); default every numeric
        column. Templated.
    exclude : sequence of str or str, optional
        Columns to leave out of the features. Templated.
    device : {"auto", "cpu", "gpu", "gpu:all"} or list of int
        ``"gpu"`` fails on a worker without a GPU; ``"auto"`` falls back to the CPU.
        ``"gpu:all"`` or a list of GPU ids: k-means on several GPUs of the worker
        (:mod:`gpumine.kmeans.multi_gpu`), in memory (no ``fit_sample`` or ``stream``).
    centers_output : str or path-like, optional
        k-means: where to write the centres (one row per cluster). Templated.
    estimator_params : dict, optional
        Further parameters of :class:`~gpumine.GPUKMeans` (``init``, ``max_iter``,
        ``tol``, ``assign``, ``update``, ...) or :class:`~gpumine.WaveCluster`
        (``grid_size``, ``threshold``, ``levels``, ...). Templated. (Not named
        ``params``: that is every Airflow operator's own argument, the DAG params
        that templates read, and Airflow merges the DAG's params into it.)
    nulls : {"error", "drop"}
        Rows with a null or NaN feature: fail, or leave them out of the fit with a
        null label.
    fit_sample : int, optional
        Fit on this many random rows, then label every row streaming the input (for
        inputs larger than memory).
    stream : bool or None
        Fit over the Parquet input's record batches, read again at every pass (every
        row in the fit, in bounded memory); None streams when the features would take
        more than half of the worker's free memory, and logs it.
    labels_only : bool
        Write only the label column to ``output``.
    label_column : str
        Name of the label column.
    seed : int
        k-means' ``random_state`` and the ``fit_sample`` draw.
    create_dirs : bool
        Create the output directories that do not exist (default); else a missing
        directory fails the task.
    **kwargs
        :class:`~airflow.sdk.BaseOperator` arguments (``task_id``, ``retries``, ...).

    Returns
    -------
    dict
        The XCom value: ``rows``, ``algorithm``, ``device``, ``columns``,
        ``n_clusters``, ``cluster_sizes``, ``seconds`` per stage and the strategies
        used; k-means adds ``inertia`` and ``n_iter``, WaveCluster ``noise`` and
        ``grid``; ``output`` and ``centers_output`` when written.

    Examples
    --------
    >>> from gpumine.airflow import GpuMineClusterOperator
    >>> op = GpuMineClusterOperator(task_id="cluster", input="/data/{{ ds }}/points.parquet",
    ...                             output="/data/{{ ds }}/labels.parquet", n_clusters=4)
    >>> op.template_fields[:2]  # output is kept as output_path (op.output is the XComArg)
    ('input', 'output_path')
    """

    # ``output`` is stored as ``output_path``: ``BaseOperator.output`` is the task's XComArg
    template_fields: Sequence[str] = ("input", "output_path", "centers_output", "columns",
                                      "exclude", "estimator_params")
    template_fields_renderers: ClassVar[dict[str, str]] = {"estimator_params": "json"}
    ui_color = "#c6e9b4"

    def __init__(self, *, input, output=None, algorithm: str = "kmeans",
                 n_clusters: int | None = None, columns=None, exclude=None,
                 device: str = "auto", centers_output=None,
                 estimator_params: dict[str, Any] | None = None, nulls: str = "error",
                 fit_sample: int | None = None, labels_only: bool = False,
                 label_column: str = "cluster", seed: int = 0, create_dirs: bool = True,
                 stream: bool | None = None, **kwargs):
        super().__init__(**kwargs)
        # What can be checked when the DAG is parsed is checked here: a DAG with a bad
        # task fails to load, naming the task, instead of failing on its first run.
        several = _several_gpus(self.task_id, device)
        for name, value, allowed in (("algorithm", algorithm, _ALGORITHMS),
                                     ("device", device, _DEVICES), ("nulls", nulls, _NULLS)):
            if name == "device" and several:
                continue
            if value not in allowed:
                raise InvalidParameterError(f"{self.task_id}: {name} must be one of "
                                            f"{', '.join(allowed)}, got {value!r}"
                                            + (", 'gpu:all' or a list of GPU ids"
                                               if name == "device" else ""))
        if several and algorithm != "kmeans":
            raise InvalidParameterError(f"{self.task_id}: device={device!r}: several GPUs are "
                                        "for k-means; WaveCluster runs on one device")
        if n_clusters is not None and algorithm != "kmeans":
            raise InvalidParameterError(f"{self.task_id}: n_clusters is for k-means; "
                                        "WaveCluster finds the number of clusters itself")
        if centers_output is not None and algorithm != "kmeans":
            raise InvalidParameterError(f"{self.task_id}: centers_output is for k-means; "
                                        "WaveCluster has no centres")
        if labels_only and output is None:
            raise InvalidParameterError(f"{self.task_id}: labels_only needs an output")
        if estimator_params is not None and not isinstance(estimator_params, (dict, str)):
            raise InvalidParameterError(f"{self.task_id}: estimator_params must be a dict, got "
                                        f"{type(estimator_params).__name__}")
        self.input = input
        self.output_path = output
        self.algorithm = algorithm
        self.n_clusters = n_clusters
        self.columns = columns
        self.exclude = exclude
        self.device = device
        self.centers_output = centers_output
        self.estimator_params = estimator_params
        self.nulls = nulls
        self.fit_sample = fit_sample
        self.labels_only = labels_only
        self.label_column = label_column
        self.seed = seed
        self.create_dirs = create_dirs
        self.stream = stream
        self._executing_in: int | None = None

    # -- running ---------------------------------------------------------------
    def execute(self, context) -> dict:
        from gpumine.exceptions import (
            DataIOError,
            GpumineError,
            InsufficientMemoryError,
            translated,
        )
        from gpumine.jobs import StageTimer, cluster_file

        params = self._estimator_params()
        created: list[Path] = []  # output folders this run made, removed again on failure
        self._executing_in = threading.get_ident()
        device = None
        try:
            with translated():  # the folders made here too: only gpumine's errors come out
                if self.create_dirs:
                    self._make_dirs(created)
                device = self._device()
                summary = cluster_file(
                    str(self.input), algorithm=self.algorithm, params=params,
                    columns=_names(self.columns), exclude=_names(self.exclude),
                    nulls=self.nulls, out=self.output_path, labels_only=self.labels_only,
                    label_column=self.label_column, centers_out=self.centers_output,
                    fit_sample=self.fit_sample, device=device, seed=self.seed,
                    stream=self.stream,
                    stages=StageTimer(progress=_ProgressLog(self.log)),
                    note=lambda text: self.log.info("gpumine: %s", text))
        except AirflowTaskTerminated:
            _remove_empty(created)
            raise
        except (DataIOError, InsufficientMemoryError) as exc:  # may pass on a retry
            _remove_empty(created)
            message = str(exc) or type(exc).__name__
            self.log.error("gpumine: %s", message)
            raise AirflowException(f"gpumine: {message}") from None
        except GpumineError as exc:  # bad parameters or data: a retry would fail the same way
            _remove_empty(created)
            self.log.error("gpumine: %s", exc)
            raise AirflowFailException(f"gpumine: {exc}") from None
        finally:
            self._executing_in = None
            if device == "gpu":  # a CPU run never touches the GPU, not even to free pools
                _release_gpu_memory()
            elif device is not None and _several_gpus(self.task_id, device):
                _release_gpu_memory(device)
        self.log.info("gpumine: %s", _describe(summary))
        return summary

    def on_kill(self) -> None:
        """Stop a running fit when the task is killed (SIGTERM); nothing partial is left.

        Airflow calls this from its SIGTERM handler, in the main thread, while
        ``execute`` runs there: raising unwinds ``execute``, whose outputs are
        temporary files until the very end and are removed on the way out.
        """
        if self._executing_in is not None and self._executing_in == threading.get_ident():
            raise AirflowTaskTerminated(f"{self.task_id}: killed (SIGTERM); no output written")

    # -- helpers ---------------------------------------------------------------
    def _estimator_params(self) -> dict:
        params = self.estimator_params
        if isinstance(params, str):  # rendered from a template: JSON text
            import json

            try:
                params = json.loads(params) if params.strip() else {}
            except json.JSONDecodeError as exc:
                raise AirflowFailException(f"gpumine: estimator_params is not a JSON object: "
                                           f"{exc}") from None
        if params is not None and not isinstance(params, dict):
            raise AirflowFailException(f"gpumine: estimator_params must be a dict, got "
                                       f"{type(params).__name__}")
        params = dict(params or {})
        if self.n_clusters is not None:
            if "n_clusters" in params and params["n_clusters"] != self.n_clusters:
                raise AirflowFailException("gpumine: n_clusters is given twice (as an argument "
                                           "and in estimator_params) with different values")
            params["n_clusters"] = self.n_clusters
        return params

    def _device(self) -> str:
        """The device to run on; ``"auto"`` on a worker without a GPU says so in the log."""
        if self.device != "auto":
            return self.device
        from gpumine.backend import ENV_VAR, get_backend, gpu_unavailable_reason

        backend = get_backend("auto")
        if backend.is_gpu:
            self.log.info("gpumine: running on the GPU (%s)", backend.device_name)
        elif gpu_unavailable_reason():
            self.log.warning("gpumine: device='auto' and no GPU on this worker (%s); running "
                             "on the CPU", gpu_unavailable_reason())
        else:
            self.log.info("gpumine: device='auto' and %s=cpu; running on the CPU", ENV_VAR)
        return backend.name

    def _make_dirs(self, created: list[Path]) -> None:
        """Create the missing output directories, adding each to ``created`` (deepest first)."""
        for target in (self.output_path, self.centers_output):
            if target is None:
                continue
            missing = []
            folder = Path(str(target)).absolute().parent
            while not folder.exists():
                missing.append(folder)
                folder = folder.parent
            for folder in reversed(missing):
                folder.mkdir()
                created.insert(0, folder)


def _names(value) -> list[str] | None:
    """A column list from a list or a comma-separated (templated) string."""
    if value is None:
        return None
    if isinstance(value, str):
        names = [name.strip() for name in value.split(",")]
        return [name for name in names if name] or None
    return [str(name) for name in value]


def _remove_empty(folders: list[Path]) -> None:
    for folder in folders:  # deepest first
        try:
            folder.rmdir()
        except OSError:  # not empty (someone else wrote there): leave it
            pass


def _release_gpu_memory(device="gpu") -> None:
    """Free the CuPy pools of the GPU (of each GPU of a several-GPU ``device``)."""
    from gpumine.backend import cupy_module, get_backend
    from gpumine.devices import resolve_gpu_ids

    if device == "gpu":
        get_backend("gpu").release_memory()
        return
    for gpu in resolve_gpu_ids(device):
        with cupy_module().cuda.Device(gpu):
            get_backend("gpu").release_memory()


def _several_gpus(task_id, device) -> bool:
    """Whether ``device`` is "gpu:all" or a list of GPU ids (a bad list fails naming the
    task)."""
    from gpumine.devices import is_several_gpus

    try:
        return is_several_gpus(device)
    except InvalidParameterError as exc:
        raise InvalidParameterError(f"{task_id}: {exc}") from None


class _ProgressLog:
    """Stage progress as task-log lines: at most one per ``PROGRESS_EVERY_S`` a stage."""

    def __init__(self, log):
        self.log = log
        self.last: dict[str, float] = {}

    def __call__(self, name: str, done: int, total: int | None) -> None:
        now = time.monotonic()
        if now - self.last.setdefault(name, now) < PROGRESS_EVERY_S:
            return
        self.last[name] = now
        of = f" of {total:,}" if total else ""
        self.log.info("gpumine: %s: %s rows%s", name, f"{done:,}", of)


def _describe(summary: dict) -> str:
    """The summary as one log line."""
    parts = [f"{summary['algorithm']} on {summary['device']}", f"{summary['rows']:,} rows",
             f"{summary['n_clusters']} clusters"]
    if "n_iter" in summary:
        parts.append(f"{summary['n_iter']} iterations")
    if "inertia" in summary:
        parts.append(f"inertia {summary['inertia']:.6g}")
    if "noise" in summary:
        parts.append(f"{summary['noise']:,} noise")
    parts.append(", ".join(f"{stage} {s:.3g} s" for stage, s in summary["seconds"].items()))
    if "output" in summary:
        parts.append(f"wrote {summary['output']}")
    return "; ".join(parts)
