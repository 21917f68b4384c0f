"""gpumine.dask.GPUKMeans on a two-worker distributed.LocalCluster (CPU workers)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("dask")
distributed = pytest.importorskip("distributed")
import dask.array as da  # noqa: E402
import dask.dataframe as dd  # noqa: E402
import pandas as pd  # noqa: E402

from gpumine import GPUKMeans as InMemory  # noqa: E402
from gpumine.dask import GPUKMeans  # noqa: E402
from gpumine.exceptions import InvalidInputError, InvalidParameterError  # noqa: E402


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        yield client


def _blobs(seed, n=6000, d=3, k=5):
    rng = np.random.default_rng(seed)
    centres = rng.uniform(-20, 20, size=(k, d))
    X = centres[rng.integers(0, k, n)] + rng.normal(scale=1.5, size=(n, d)) + 500.0
    return X


def test_distributed_fit_equals_the_in_memory_fit(client):
    X = _blobs(0)
    init = X[np.random.default_rng(1).choice(len(X), 5, replace=False)]
    memory = InMemory(5, init=init, device="cpu").fit(X)
    model = GPUKMeans(5, init=init).fit(da.from_array(X, chunks=(1300, 3)))
    np.testing.assert_array_equal(model.labels_.compute(), memory.labels_)
    assert model.n_iter_ == memory.n_iter_ > 2
    np.testing.assert_allclose(model.cluster_centers_, memory.cluster_centers_, rtol=1e-12)
    assert model.inertia_ == pytest.approx(memory.inertia_, rel=1e-10)
    assert 0.0 <= model.iteration_overhead_ <= 1.0


def test_dataframe_with_unknown_chunks_and_lazy_predict(client):
    X = _blobs(2, n=3000)
    frame = dd.from_pandas(pd.DataFrame(X, columns=["a", "b", "c"]), npartitions=4)
    frame = frame[frame.a > -1e9]  # a filter: the partition lengths are unknown
    init = X[:5]
    model = GPUKMeans(5, init=init).fit(frame)
    labels = model.predict(frame)
    assert isinstance(labels, da.Array)  # lazy
    np.testing.assert_array_equal(labels.compute(), model.labels_.compute())
    np.testing.assert_array_equal(labels.compute(),
                                  InMemory(5, init=init, device="cpu").fit(X).labels_)


def test_kmeans_parallel_init_is_reproducible_and_as_good_as_kmeans_plusplus(client):
    X = _blobs(3, n=8000, k=6)
    data = da.from_array(X, chunks=(2000, 3))
    inertias = [GPUKMeans(6, random_state=seed).fit(data).inertia_ for seed in range(5)]
    reference = np.median([InMemory(6, n_init=1, device="cpu", random_state=seed).fit(X)
                           .inertia_ for seed in range(5)])
    assert np.median(inertias) <= 1.02 * reference
    first = GPUKMeans(6, random_state=7).fit(data)
    again = GPUKMeans(6, random_state=7).fit(data)
    np.testing.assert_array_equal(first.cluster_centers_, again.cluster_centers_)


def test_bad_input(client):
    X = da.from_array(_blobs(4, n=100), chunks=50)
    with pytest.raises(InvalidParameterError, match="init"):
        GPUKMeans(2, init="random").fit(X)
    with pytest.raises(InvalidParameterError, match="sample_weight"):
        GPUKMeans(2).fit(X, sample_weight=np.ones(100))
    with pytest.raises(InvalidInputError, match="n_samples=100 should be >= n_clusters=101"):
        GPUKMeans(101).fit(X)
    with pytest.raises(InvalidInputError, match="dask array or dataframe"):
        GPUKMeans(2).fit(np.zeros((10, 2)))
