"""Jobs: what a command or an Airflow task runs, from a file to written results.

The layer above the estimators and the adapters, and below the command line
(``cli/``) and :mod:`gpumine.airflow`, which differ only in how they show progress
and report errors. :func:`cluster_file` is the job of ``gpumine cluster``
(:mod:`gpumine.jobs.cluster`).
"""

from gpumine.jobs.cluster import (
    ALGORITHMS,
    DEMO_CLUSTERS,
    DEMO_SHAPE,
    StageTimer,
    cluster_file,
    make_model,
)

__all__ = ["ALGORITHMS", "DEMO_CLUSTERS", "DEMO_SHAPE", "StageTimer", "cluster_file",
           "make_model"]
