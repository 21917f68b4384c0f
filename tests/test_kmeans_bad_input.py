"""Bad input to GPUKMeans: a clear error, and the estimator left unfitted."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.exceptions import NotFittedError

from gpumine import GPUKMeans
from gpumine.exceptions import (
    BackendUnavailable,
    GpumineError,
    IncompatibleStrategy,
    UnknownStrategy,
)

X = np.random.RandomState(0).uniform(size=(50, 3))


def _assert_unfitted(model):
    assert not hasattr(model, "cluster_centers_")
    with pytest.raises(NotFittedError):
        model.predict(X)


@pytest.mark.parametrize(("data", "match"), [
    (np.where(np.eye(50, 3) > 0, np.nan, X), "NaN"),
    (np.where(np.eye(50, 3) > 0, np.inf, X), "infinity"),
    (np.where(np.eye(50, 3) > 0, -np.inf, X), "infinity"),
    (np.empty((0, 3)), "0 sample"),
    (np.empty((5, 0)), "0 feature"),
    (X[:, 0], "Expected 2D array"),
    (X + 1j, "[Cc]omplex"),
    (np.array([["a", "b"], ["c", "d"]], dtype=object), "convert|could not"),
    (np.array([["1.0", "x"], ["2", "3"]]), "convert|could not"),
], ids=["nan", "inf", "-inf", "empty", "no-features", "1d", "complex", "object", "strings"])
def test_bad_X(data, match):
    model = GPUKMeans(2, device="cpu")
    with pytest.raises(ValueError, match=match) as info:
        model.fit(data)
    assert isinstance(info.value, GpumineError)
    _assert_unfitted(model)


@pytest.mark.parametrize(("params", "match"), [
    ({"n_clusters": 0}, "n_clusters must be an integer >= 1"),
    ({"n_clusters": 2.5}, "n_clusters must be an integer"),
    ({"n_clusters": 51}, "n_samples=50 should be >= n_clusters=51"),
    ({"max_iter": 0}, "max_iter"),
    ({"n_init": 0}, "n_init"),
    ({"n_init": "many"}, "n_init"),
    ({"tol": -1.0}, "tol"),
    ({"device": "tpu"}, "device must be one of"),
    ({"init": np.zeros((3, 3))}, "does not match the number of clusters 2"),
    ({"init": np.zeros((2, 4))}, "does not match the number of features of the data 3"),
    ({"init": np.array([[np.nan, 0, 0], [0, 0, 0]])}, "NaN"),
    ({"init": lambda X, k, random_state: X[:k + 1]}, "does not match the number of clusters"),
    ({"init": "nope"},
     "unknown kmeans.init strategy 'nope'; known: k-means\\+\\+, k-means\\|\\|, random"),
    ({"assign": "nope"},
     "unknown kmeans.assign strategy 'nope'; known: gemm, hamerly, numba, numpy, tc-exact, "
     "tc-fast, tiled"),
    ({"update": "nope"}, "unknown kmeans.update strategy 'nope'"),
])
def test_bad_parameters(params, match):
    model = GPUKMeans(**{"n_clusters": 2, "device": "cpu", **params})
    with pytest.raises(ValueError, match=match):
        model.fit(X)
    _assert_unfitted(model)


def test_unknown_strategy_is_its_own_error():
    with pytest.raises(UnknownStrategy):
        GPUKMeans(2, device="cpu", update="gm-cl-typo").fit(X)


def test_gpu_strategy_on_cpu_is_incompatible(monkeypatch):
    from gpumine import registry

    registry.register(registry.Strategy(kind="kmeans.update", name="gpu-only-test",
                                        backend="gpu", target="math:fabs"))
    try:
        with pytest.raises(IncompatibleStrategy, match="runs on the gpu backend"):
            GPUKMeans(2, device="cpu", update="gpu-only-test").fit(X)
    finally:
        registry.refresh()


@pytest.mark.parametrize(("weight", "match"), [
    (-np.ones(50), "non-negative"),
    (np.r_[np.ones(49), -1.0], "1 negative"),
    (np.ones(49), r"shape \(50,\)"),
    (np.ones((50, 1)), r"shape \(50,\)"),
    (np.zeros(50), "sums to zero"),
    (np.r_[np.ones(49), np.nan], "NaN"),
    (np.array(["a"] * 50), "numeric"),
])
def test_bad_sample_weight(weight, match):
    model = GPUKMeans(2, device="cpu")
    with pytest.raises(ValueError, match=match):
        model.fit(X, sample_weight=weight)
    _assert_unfitted(model)


def test_predict_with_other_feature_count():
    model = GPUKMeans(2, device="cpu", random_state=0).fit(X)
    with pytest.raises(ValueError, match="3 features"):
        model.predict(X[:, :2])
    with pytest.raises(ValueError, match="3 features"):
        model.transform(np.ones((4, 5)))


def test_device_gpu_without_gpu(monkeypatch):
    import sys

    from gpumine import backend

    monkeypatch.setitem(sys.modules, "cupy", None)  # makes `import cupy` fail here
    backend._probe_gpu.cache_clear()
    try:
        model = GPUKMeans(2, device="gpu")
        with pytest.raises(BackendUnavailable, match=r'pip install "gpumine\[cuda12\]"'):
            model.fit(X)
        _assert_unfitted(model)
    finally:
        backend._probe_gpu.cache_clear()
