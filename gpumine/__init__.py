"""gpumine: GPU clustering for Python, scikit-learn compatible.

Examples
--------
>>> import gpumine
>>> from gpumine import GPUKMeans, list_strategies
>>> GPUKMeans(n_clusters=3).get_params()["n_clusters"]
3
"""

from importlib import metadata as _metadata

from gpumine.backend import get_backend
from gpumine.exceptions import (
    BackendUnavailable,
    GpumineError,
    KernelCompileError,
    UnknownStrategy,
)
from gpumine.kmeans import GPUKMeans
from gpumine.registry import list_strategies
from gpumine.wavecluster import WaveCluster

try:
    __version__ = _metadata.version("gpumine")
except _metadata.PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"

__all__ = [
    "BackendUnavailable",
    "GPUKMeans",
    "GpumineError",
    "KernelCompileError",
    "UnknownStrategy",
    "WaveCluster",
    "__version__",
    "get_backend",
    "list_strategies",
]
