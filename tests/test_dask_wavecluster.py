"""gpumine.dask.WaveCluster on a two-worker distributed.LocalCluster (CPU workers), and on a
GPU when there is one: the in-memory fit's result, lazily labelled."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("dask")
distributed = pytest.importorskip("distributed")
import dask.array as da  # noqa: E402
import dask.dataframe as dd  # noqa: E402
import pandas as pd  # noqa: E402

from gpumine import WaveCluster as InMemory  # noqa: E402
from gpumine.dask import WaveCluster  # noqa: E402
from gpumine.exceptions import InvalidInputError, InvalidParameterError  # noqa: E402


def _shapes(seed, n=20_000, d=2):
    """Five blobs, a ring and 10 % uniform noise, far from the origin."""
    rng = np.random.default_rng(seed)
    centres = rng.uniform(0, 10, size=(5, d))
    blobs = centres[rng.integers(0, 5, int(n * 0.6))] + rng.normal(scale=0.3,
                                                                   size=(int(n * 0.6), d))
    angle = rng.uniform(0, 2 * np.pi, int(n * 0.3))
    ring = np.zeros((len(angle), d))
    ring[:, 0], ring[:, 1] = 14 + 3 * np.cos(angle), 14 + 3 * np.sin(angle)
    ring += rng.normal(scale=0.1, size=ring.shape)
    noise = rng.uniform(-2, 18, size=(n - len(blobs) - len(ring), d))
    X = np.concatenate([blobs, ring, noise]) + 1e4
    return X[rng.permutation(len(X))]


@pytest.mark.parametrize("params", [
    {},
    {"levels": 2, "wavelet": "bior2.2"},
    {"grid_size": 64, "threshold": 3.0, "connectivity": 1, "min_cluster_size": 50},
])
def test_fit_equals_the_in_memory_fit(client, params):
    X = _shapes(0)
    memory = InMemory(device="cpu", **params).fit(X)
    model = WaveCluster(**params).fit(da.from_array(X, chunks=(3_001, 2)))
    assert model.n_clusters_ == memory.n_clusters_ >= 2
    labels = model.labels_
    assert isinstance(labels, da.Array) and labels.dtype == np.int32
    np.testing.assert_array_equal(labels.compute(), memory.labels_)
    np.testing.assert_array_equal(model.grid_labels_, memory.grid_labels_)
    assert model.threshold_ == memory.threshold_
    assert model.grid_shape_ == memory.grid_shape_
    np.testing.assert_array_equal(model.bounds_, memory.bounds_)
    assert model.strategies_ == memory.strategies_ and model.device_ == "cpu"
    assert model.n_features_in_ == 2


def test_weighted_fit_equals_the_in_memory_weighted_fit(client):
    """Weights (the noise light, some points weightless -- outside the bounds' points of
    positive weight): the in-memory weighted fit's labels, grid and threshold."""
    X = _shapes(5)
    rng = np.random.default_rng(5)
    weight = rng.uniform(0.5, 2.0, size=len(X))
    weight[rng.choice(len(X), 500, replace=False)] = 0.0
    memory = InMemory(device="cpu").fit(X, sample_weight=weight)
    model = WaveCluster().fit(da.from_array(X, chunks=(3_001, 2)),
                              sample_weight=da.from_array(weight, chunks=5_000))
    assert model.n_clusters_ == memory.n_clusters_ >= 2
    np.testing.assert_array_equal(model.labels_.compute(), memory.labels_)
    np.testing.assert_array_equal(model.grid_labels_, memory.grid_labels_)
    assert model.threshold_ == pytest.approx(memory.threshold_, rel=1e-12)
    assert model.grid_shape_ == memory.grid_shape_
    np.testing.assert_array_equal(model.bounds_, memory.bounds_)
    # integer weights are repeated rows: the in-memory fit of the rows repeated
    counts = rng.integers(0, 4, size=len(X))
    repeated = InMemory(device="cpu").fit(np.repeat(X, counts, axis=0))
    weighted = WaveCluster().fit(da.from_array(X, chunks=(3_001, 2)),
                                 sample_weight=counts.astype(float))
    assert weighted.n_clusters_ == repeated.n_clusters_
    np.testing.assert_array_equal(weighted.grid_labels_, repeated.grid_labels_)
    np.testing.assert_array_equal(np.repeat(weighted.labels_.compute(), counts),
                                  repeated.labels_)


def test_three_features_bounds_given_and_the_default_scheduler():
    """No client: the default scheduler; explicit bounds that cut some points off."""
    X = _shapes(1, n=9_000, d=3)
    bounds = np.stack([X.min(axis=0) + 1.0, X.max(axis=0)])
    memory = InMemory(device="cpu", bounds=bounds).fit(X)
    model = WaveCluster(bounds=bounds).fit(da.from_array(X, chunks=(2_000, 3)))
    np.testing.assert_array_equal(model.labels_.compute(), memory.labels_)
    np.testing.assert_array_equal(model.grid_labels_, memory.grid_labels_)


def test_dataframe_with_unknown_chunks_and_lazy_predict(client):
    X = _shapes(2)
    frame = dd.from_pandas(pd.DataFrame(X, columns=["a", "b"]), npartitions=4)
    frame = frame[frame.a > -1e9]  # unknown partition sizes
    memory = InMemory(device="cpu").fit(X)
    model = WaveCluster().fit(frame)
    np.testing.assert_array_equal(model.labels_.compute(), memory.labels_)
    new = _shapes(3, n=3_000)
    predicted = model.predict(da.from_array(new, chunks=(1_000, 2)))
    assert isinstance(predicted, da.Array)
    np.testing.assert_array_equal(predicted.compute(), memory.predict(new))


def test_bad_input(client):
    X = _shapes(4, n=4_000)
    X[2_500, 1] = np.nan
    with pytest.raises(InvalidInputError, match=r"partition 2 has NaN .*its row 500, row 2500"):
        WaveCluster().fit(da.from_array(X, chunks=(1_000, 2)))
    good = da.from_array(_shapes(4, n=4_000), chunks=(1_000, 2))
    weight = np.ones(4_000)
    weight[1_234] = -1.0
    with pytest.raises(InvalidInputError, match=r"partition 1 has a NaN, infinite or negative "
                                                r"sample_weight \(its row 234, row 1234"):
        WaveCluster().fit(good, sample_weight=weight)
    with pytest.raises(InvalidInputError, match="sums to 0"):
        WaveCluster().fit(good, sample_weight=np.zeros(4_000))
    with pytest.raises(InvalidParameterError):
        WaveCluster(levels=0).fit(good)
    with pytest.raises(InvalidInputError, match="dask array or dataframe"):
        WaveCluster().fit(np.zeros((10, 2)))
    constant = np.column_stack([np.arange(100.0), np.ones(100)])
    with pytest.raises(InvalidInputError, match="no spread"):
        WaveCluster().fit(da.from_array(constant, chunks=(30, 2)))
    model = WaveCluster().fit(good)
    with pytest.raises(InvalidInputError, match="3 features, the fit saw 2"):
        model.predict(da.zeros((10, 3), chunks=(5, 3)))


@pytest.mark.gpu
def test_gpu_partitions_equal_the_in_memory_gpu_fit():
    """device="gpu": each partition's grid, weights and labels on the GPU, the grid labelled
    there too (the default scheduler's threads share the one GPU)."""
    X = _shapes(5, n=200_000)
    memory = InMemory(device="gpu").fit(X)
    model = WaveCluster(device="gpu").fit(da.from_array(X, chunks=(30_001, 2)))
    np.testing.assert_array_equal(model.labels_.compute(), memory.labels_)
    np.testing.assert_array_equal(model.grid_labels_, memory.grid_labels_)
    assert model.device_ == "gpu" and model.strategies_ == memory.strategies_


def test_a_worker_killed_mid_fit_is_retried_and_the_result_is_the_same(fit_killing_a_worker):
    """A worker process dies while the partitions' grids are being made: Dask recomputes its
    lost partitions and tasks on the other, and the fit gives the in-memory result."""
    X = _shapes(6, n=3_000_000)
    expected = InMemory(device="cpu").fit(X)

    def fit(data):
        model = WaveCluster().fit(data)
        return model, model.labels_.compute()

    model, labels = fit_killing_a_worker(fit, X, 100_000, task="_block_grid")
    np.testing.assert_array_equal(labels, expected.labels_)
    np.testing.assert_array_equal(model.grid_labels_, expected.grid_labels_)
