"""Shared fixtures: paths to ../shared/datasets, generators, masks (the GPU skip rule and
SciPy's array-API switch are in the repository's root conftest.py)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
# ../shared/datasets beside the checkout; GPUMINE_SHARED_DATASETS points elsewhere (the GPU
# machine receives a copy inside the working tree).
SHARED_DATASETS = Path(os.environ.get("GPUMINE_SHARED_DATASETS",
                                      REPO_ROOT.parent / "shared" / "datasets"))


@pytest.fixture(scope="session")
def shared_datasets() -> Path:
    """The optional larger data sets (real Corel features, labelled shapes).

    A user's clone has no ``../shared`` beside it: the checks that need those files skip
    with this reason, and the suite stays complete without them (generated data and the
    small files under ``tests/data`` cover the same code). CI runs the suite both ways.
    """
    if not SHARED_DATASETS.is_dir():
        pytest.skip(f"optional data not here: {SHARED_DATASETS} (a checkout's ../shared/datasets, "
                    "or GPUMINE_SHARED_DATASETS)")
    return SHARED_DATASETS


@pytest.fixture(scope="session")
def corel(shared_datasets):
    """Corel subsets from ../shared/datasets/corel, through the real loader (no download)."""
    from gpumine.datasets import load_corel

    def load(subset):
        return load_corel(subset, data_home=shared_datasets / "corel", download=False)

    return load


@pytest.fixture
def rng(request) -> np.random.RandomState:
    """A fresh generator per test, seeded from the test's name (reproducible, not shared)."""
    import zlib

    return np.random.RandomState(zlib.crc32(request.node.nodeid.encode()))


@pytest.fixture(scope="session")
def snake():
    """Factory of an n x n mask holding one long snake: the worst case for propagation."""

    def make(n):
        mask = np.zeros((n, n), dtype=bool)
        mask[::2, :] = True
        for row in range(1, n, 2):
            mask[row, -1 if (row // 2) % 2 == 0 else 0] = True
        return mask

    return make
