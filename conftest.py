"""Root conftest (tests/ and benchmarks/): SciPy's array-API mode and the GPU skip rule."""

from __future__ import annotations

import os

# scikit-learn's check_array_api_input (run by the estimator checks) needs SciPy's
# array-API mode, which SciPy reads once at import: set it before anything imports SciPy.
os.environ.setdefault("SCIPY_ARRAY_API", "1")

import pytest


def pytest_collection_modifyitems(config, items):
    """Mark the optional checks on shared data; skip GPU tests only when no GPU is present.

    Tests that use the ``shared_datasets`` (or ``corel``) fixture get the ``shared_data``
    marker, so CI can run them on their own once the self-contained suite has passed.
    """
    from gpumine.backend import gpu_available

    for item in items:
        if {"shared_datasets", "corel"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.shared_data)

    if gpu_available():
        return
    skip = pytest.mark.skip(reason="no CUDA GPU with CuPy on this machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
