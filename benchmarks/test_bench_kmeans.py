"""k-means steps and fits, per strategy and backend (checked against the NumPy reference)."""

from __future__ import annotations

import numpy as np
import pytest

from gpumine import GPUKMeans, registry
from gpumine.backend import get_backend
from gpumine.bench.timing import SUITE_SCALE as SCALE
from gpumine.bench.timing import summation
from gpumine.datasets import make_uniform
from gpumine.kmeans.reference import assign_numpy, update_numpy

N, D, K = 20_000 * SCALE, 8, 64


def _cases(kind):
    return [pytest.param(s.backend, s.name, id=f"{s.backend}-{s.name}",
                         marks=[pytest.mark.gpu] if s.backend == "gpu" else [])
            for s in registry.list_strategies(kind)]


@pytest.fixture(scope="module")
def data():
    X = make_uniform(N, D, random_state=5489)
    centers = make_uniform(K, D, random_state=1)
    labels = np.empty(N, dtype=np.int32)
    assign_numpy(X, centers, labels)
    return X, centers, labels


@pytest.mark.parametrize(("device", "name"), _cases("kmeans.update"))
def test_update_step(run_timed, data, device, name):
    backend = get_backend(device)
    X, _, labels = data
    X_dev, labels_dev = backend.to_device_columns(X), backend.to_device(labels)
    step, sums, weights = summation(backend.xp, registry.load_strategy("kmeans.update", name),
                                    X_dev, labels_dev, K)
    run_timed(backend, step)
    expected_sums, expected_weights = np.empty((K, D)), np.empty(K)
    update_numpy(X, labels, np.ones(N), expected_sums, expected_weights)
    np.testing.assert_allclose(backend.to_host(sums), expected_sums, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(backend.to_host(weights), expected_weights)


@pytest.mark.parametrize(("device", "name"), _cases("kmeans.assign"))
def test_assign_step(run_timed, data, device, name):
    backend = get_backend(device)
    X, centers, labels = data
    X_dev, centers_dev = backend.to_device_columns(X), backend.to_device(centers)
    out = backend.xp.empty(N, dtype=backend.xp.int32)
    assign = registry.load_strategy("kmeans.assign", name)
    run_timed(backend, lambda: assign(X_dev, centers_dev, out))
    # tc-fast is FP16 by design (opt-in, not exact): it gets the agreement FP16 gives
    agreement = 0.99 if name == "tc-fast" else 0.9999
    assert (backend.to_host(out) == labels).mean() > agreement


def test_fit(run_timed, backend, data):
    X, centers, _ = data
    model = run_timed(backend, lambda: GPUKMeans(K, init=centers, max_iter=20,
                                                 device=backend.name).fit(X), rounds=3)
    assert model.n_iter_ >= 1 and np.isfinite(model.inertia_)
