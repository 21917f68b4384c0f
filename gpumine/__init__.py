"""gpumine: GPU clustering for Python, scikit-learn compatible.

The estimators and helpers are imported on first use (PEP 562), so that
``import gpumine`` -- and with it ``gpumine --help`` -- does not pay for
scikit-learn, SciPy and pandas before they are needed.

Examples
--------
>>> import gpumine
>>> from gpumine import GPUKMeans, list_strategies
>>> GPUKMeans(n_clusters=3).get_params()["n_clusters"]
3
"""

from importlib import import_module as _import_module

from gpumine.exceptions import (
    BackendUnavailable,
    GpumineError,
    KernelCompileError,
    UnknownStrategy,
)

#: Public name -> module that defines it, imported when the name is first used.
_LAZY = {
    "GPUKMeans": "gpumine.kmeans",
    "WaveCluster": "gpumine.wavecluster",
    "get_backend": "gpumine.backend",
    "list_strategies": "gpumine.registry",
}

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


def __getattr__(name):
    if name in _LAZY:
        value = getattr(_import_module(_LAZY[name]), name)
    elif name == "__version__":
        from importlib import metadata

        try:
            value = metadata.version("gpumine")
        except metadata.PackageNotFoundError:  # a source tree that was never installed
            value = "0+unknown"
    else:
        raise AttributeError(f"module 'gpumine' has no attribute {name!r}")
    globals()[name] = value  # once imported, a plain attribute
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
