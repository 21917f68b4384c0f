"""A daily pipeline with gpumine: make (or read) the day's partition, cluster it, report.

Put this file in your DAGs folder (``$AIRFLOW_HOME/dags``) on a worker with
``pip install "gpumine[airflow]"`` (add ``[cuda13]`` or ``[cuda12]`` for a GPU worker).
Each run works on its logical date's partition:

1. ``make_partition`` -- reads ``<data_root>/events/<ds>/`` when a producer has written
   Parquet files there, else writes a generated stand-in (4 blobs in 6-d plus an id
   column, seeded by the date) so the example runs anywhere;
2. ``cluster`` -- :class:`~gpumine.airflow.GpuMineClusterOperator`: k-means with k = 4
   on the numeric columns of the partition, on the worker's GPU or its CPU; writes
   ``<data_root>/labels/<ds>.parquet`` (the rows plus a ``cluster`` column) and
   ``<data_root>/centers/<ds>.parquet``, each whole or not at all, and pushes the run
   summary as its XCom value;
3. ``report`` -- reads that summary and pushes a short report of the day.

``data_root`` is a DAG param (set it when triggering, or with the
``GPUMINE_EXAMPLE_DATA`` environment variable; default: ``gpumine-example`` in the
temporary directory). Re-running a date replaces that date's outputs.

Try it: ``airflow dags test gpumine_daily 2026-11-23``.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pendulum
from airflow.sdk import DAG, Param, task

from gpumine.airflow import GpuMineClusterOperator

DATA_ROOT = os.environ.get("GPUMINE_EXAMPLE_DATA",
                           str(Path(tempfile.gettempdir()) / "gpumine-example"))

with DAG(
    dag_id="gpumine_daily",
    description="Cluster each day's events partition with gpumine and report the result",
    schedule="@daily",
    start_date=pendulum.datetime(2026, 11, 1, tz="UTC"),
    catchup=False,
    params={"data_root": Param(DATA_ROOT, type="string",
                               description="Folder holding events/, labels/ and centers/")},
    tags=["gpumine", "example"],
) as dag:

    @task
    def make_partition(ds=None, params=None) -> str:
        """The day's partition: a producer's Parquet files, or a generated stand-in."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.parquet as pq

        folder = Path(params["data_root"]) / "events" / ds
        if folder.is_dir() and any(folder.glob("*.parquet")):
            return str(folder)
        folder.mkdir(parents=True, exist_ok=True)
        rng = np.random.default_rng(int(ds.replace("-", "")))
        centres = rng.uniform(-10, 10, (4, 6))
        points = np.concatenate([c + rng.normal(0, 0.5, (2_500, 6)) for c in centres])
        table = pa.table({f"x{j}": points[:, j] for j in range(6)}
                         | {"event_id": [f"{ds}-{i}" for i in range(len(points))]})
        pq.write_table(table, folder / ".part-0.parquet.tmp")  # hidden while written
        os.replace(folder / ".part-0.parquet.tmp", folder / "part-0.parquet")
        return str(folder)

    cluster = GpuMineClusterOperator(
        task_id="cluster",
        input="{{ params.data_root }}/events/{{ ds }}/",
        output="{{ params.data_root }}/labels/{{ ds }}.parquet",
        centers_output="{{ params.data_root }}/centers/{{ ds }}.parquet",
        n_clusters=4,
        estimator_params={"max_iter": 100},
    )

    @task
    def report(summary: dict, ds=None) -> dict:
        """The day's figures from the cluster task's summary."""
        sizes = summary["cluster_sizes"]
        return {"date": ds, "rows": summary["rows"], "device": summary["device"],
                "n_iter": summary["n_iter"], "inertia": summary["inertia"],
                "smallest_cluster": min(sizes), "largest_cluster": max(sizes)}

    make_partition() >> cluster
    report(cluster.output)
