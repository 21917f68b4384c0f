"""gpumine as an Airflow provider: clustering and the regression gate as tasks of a DAG.

Install with ``pip install "gpumine[airflow]"`` (Airflow 3, written against
``airflow.sdk``). The provider registers itself through the ``apache_airflow_provider``
entry point, so ``airflow providers list`` shows it.

* :class:`GpuMineClusterOperator` -- k-means or WaveCluster on a Parquet file, a
  directory or a glob (templated, so ``{{ ds }}`` partitions work), the input rows
  plus a ``cluster`` column written to ``output`` whole or not at all, the run
  summary returned as the task's XCom value.
* :class:`GpuMineBenchmarkOperator` -- ``gpumine bench gate`` as a task that fails
  on a performance regression.

Examples
--------
A daily step of a pipeline (see ``examples/gpumine_daily_dag.py``)::

    from gpumine.airflow import GpuMineClusterOperator

    GpuMineClusterOperator(
        task_id="cluster",
        input="/data/events/{{ ds }}/",
        output="/data/labels/{{ ds }}.parquet",
        n_clusters=16,
        estimator_params={"max_iter": 100},
    )
"""

from __future__ import annotations

from gpumine.exceptions import MissingDependency

__all__ = ["GpuMineBenchmarkOperator", "GpuMineClusterOperator"]

_OPERATORS = {"GpuMineClusterOperator": "gpumine.airflow.operators.cluster",
              "GpuMineBenchmarkOperator": "gpumine.airflow.operators.benchmark"}


def __getattr__(name: str):
    # The operators import Airflow: only on use, with the extra's name when it is missing.
    if name not in _OPERATORS:
        raise AttributeError(f"module 'gpumine.airflow' has no attribute {name!r}")
    from importlib import import_module

    try:
        import airflow.sdk  # noqa: F401
    except ImportError as exc:
        raise MissingDependency("gpumine.airflow needs Apache Airflow 3: pip install "
                                "'gpumine[airflow]'") from exc
    return getattr(import_module(_OPERATORS[name]), name)
