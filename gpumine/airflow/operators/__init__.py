"""The gpumine provider's operators: :mod:`.cluster` and :mod:`.benchmark`."""

from gpumine.airflow.operators.benchmark import GpuMineBenchmarkOperator
from gpumine.airflow.operators.cluster import GpuMineClusterOperator

__all__ = ["GpuMineBenchmarkOperator", "GpuMineClusterOperator"]
