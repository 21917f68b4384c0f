"""The provider's metadata for Airflow's providers manager (``apache_airflow_provider``).

Pure data, imported by ``airflow providers list`` without importing the operators.
"""

from __future__ import annotations

__all__ = ["get_provider_info"]


def get_provider_info() -> dict:
    """Name, description, versions and operators of the gpumine provider.

    Examples
    --------
    >>> info = get_provider_info()
    >>> info["package-name"], info["operators"][0]["python-modules"][0]
    ('gpumine', 'gpumine.airflow.operators.cluster')
    """
    from gpumine import __version__

    return {
        "package-name": "gpumine",
        "name": "gpumine",
        "description": "GPU clustering for data pipelines: k-means and WaveCluster over Parquet "
                       "files, directories and globs, on a GPU or the CPU, with the labels "
                       "written back and a run summary as the task's XCom value; and the "
                       "performance regression gate as a task.",
        "versions": [__version__],
        "integrations": [{"integration-name": "gpumine", "tags": ["software"]}],
        "operators": [{"integration-name": "gpumine",
                       "python-modules": ["gpumine.airflow.operators.cluster",
                                          "gpumine.airflow.operators.benchmark"]}],
    }
