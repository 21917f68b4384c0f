"""gpumine.dask.GPUKMeans on a two-worker distributed.LocalCluster (CPU workers)."""

from __future__ import annotations

import time

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


def _blobs(seed, n=6000, d=3, k=5):
    rng = np.random.default_rng(seed)
    centres = rng.uniform(-20, 20, size=(k, d))
    X = centres[rng.integers(0, k, n)] + rng.normal(scale=1.5, size=(n, d)) + 500.0
    return X


def test_graph_engine_fit_equals_the_in_memory_fit(client):
    X = _blobs(0)
    init = X[np.random.default_rng(1).choice(len(X), 5, replace=False)]
    memory = InMemory(5, init=init, device="cpu").fit(X)
    model = GPUKMeans(5, init=init, engine="graph").fit(da.from_array(X, chunks=(1300, 3)))
    np.testing.assert_array_equal(model.labels_.compute(), memory.labels_)
    assert model.n_iter_ == memory.n_iter_ > 2
    np.testing.assert_allclose(model.cluster_centers_, memory.cluster_centers_, rtol=1e-12)
    assert model.inertia_ == pytest.approx(memory.inertia_, rel=1e-10)
    assert 0.0 <= model.iteration_overhead_ <= 1.0
    assert model.iteration_seconds_.shape == (model.n_iter_,)
    assert (model.iteration_seconds_ > 0).all()


@pytest.mark.parametrize(("n", "k", "chunks"), [(6000, 5, 1300), (700, 40, 200)])
def test_collective_engine_equals_the_in_memory_fit(client, n, k, chunks):
    """One long-lived task per worker exchanging sums through the actor: the in-memory
    result, with empty clusters relocated across the workers' partitions (k = 40 of 700)."""
    X = _blobs(0, n=n, k=min(k, 5))
    init = X[np.random.default_rng(1).choice(len(X), k, replace=False)]
    memory = InMemory(k, init=init, device="cpu").fit(X)
    data = da.from_array(X, chunks=(chunks, 3))
    start = time.perf_counter()
    model = GPUKMeans(k, init=init, engine="collective").fit(data)
    fit_seconds = time.perf_counter() - start
    np.testing.assert_array_equal(model.labels_.compute(), memory.labels_)
    assert model.n_iter_ == memory.n_iter_ > 2
    np.testing.assert_allclose(model.cluster_centers_, memory.cluster_centers_, rtol=1e-12)
    assert model.inertia_ == pytest.approx(memory.inertia_, rel=1e-10)
    assert 0.0 <= model.iteration_overhead_ <= 1.0
    # each iteration timed on the first task: n_iter_ positive times, together less than the
    # fit (which also persists, starts the tasks and takes the inertia)
    assert model.iteration_seconds_.shape == (model.n_iter_,)
    assert (model.iteration_seconds_ > 0).all()
    assert model.iteration_seconds_.sum() < fit_seconds
    again = GPUKMeans(k, init=init, engine="collective").fit(data)
    np.testing.assert_array_equal(again.cluster_centers_, model.cluster_centers_)


@pytest.mark.parametrize("engine", ["graph", "collective"])
def test_float32_partitions_fit_as_the_in_memory_float32_fit(client, engine):
    """float32 data far from the origin: the same labels and iterations as the in-memory
    float32 fit; a resident partition is centred in float32, as the in-memory fit centres X
    (a float64 mean made it float64: twice the bytes, and a float64 assignment on the GPU),
    and its persisted block is left as it was."""
    from gpumine.dask.kmeans import ResidentPartition

    X = _blobs(0).astype(np.float32)
    init = X[np.random.default_rng(1).choice(len(X), 5, replace=False)]
    memory = InMemory(5, init=init, device="cpu").fit(X)
    model = GPUKMeans(5, init=init, engine=engine).fit(da.from_array(X, chunks=(1300, 3)))
    assert model.cluster_centers_.dtype == np.float32
    np.testing.assert_array_equal(model.labels_.compute(), memory.labels_)
    assert model.n_iter_ == memory.n_iter_ > 2
    np.testing.assert_allclose(model.cluster_centers_, memory.cluster_centers_, rtol=1e-6)
    block = X[:100].copy()
    part = ResidentPartition(block, None, X.mean(axis=0, dtype=np.float64), "cpu", "auto",
                             "auto")
    assert part.X.dtype == np.float32 and part.weight.dtype == np.float32
    np.testing.assert_array_equal(block, X[:100])


def test_one_worker_and_two_give_the_same_bits(client):
    """The same partitions on one worker and on two: the same centres to the last bit (each
    partition's sums added in partition order on every rank, not per-rank subtotals)."""
    X = _blobs(4, n=9000, k=5)
    init = X[np.random.default_rng(2).choice(len(X), 12, replace=False)]
    data = da.from_array(X, chunks=(700, 3))  # per-rank subtotals differed here in a bit
    two = GPUKMeans(12, init=init, engine="collective").fit(data)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster):  # the default client until it closes
        one = GPUKMeans(12, init=init, engine="collective").fit(data)
        one_labels = one.labels_.compute()
    assert one.n_iter_ == two.n_iter_ > 2
    np.testing.assert_array_equal(one.cluster_centers_, two.cluster_centers_)
    np.testing.assert_array_equal(one_labels, two.labels_.compute())
    assert one.inertia_ == two.inertia_


@pytest.mark.parametrize("engine", ["graph", "collective"])
def test_weighted_fit_equals_the_in_memory_weighted_fit(client, engine):
    """Weights (some zero, as a dask array in other chunks than X's): the in-memory weighted
    fit's labels, centres, n_iter_ and weighted inertia; empty clusters relocated with their
    points' weights (k = 40 of 700 rows)."""
    for n, k, chunks in [(6000, 5, 1300), (700, 40, 200)]:
        X = _blobs(5, n=n, k=min(k, 5))
        rng = np.random.default_rng(6)
        weight = rng.uniform(0.2, 3.0, size=n)
        weight[rng.choice(n, n // 10, replace=False)] = 0.0
        init = X[rng.choice(n, k, replace=False)]
        memory = InMemory(k, init=init, device="cpu").fit(X, sample_weight=weight)
        model = GPUKMeans(k, init=init, engine=engine).fit(
            da.from_array(X, chunks=(chunks, 3)), sample_weight=da.from_array(weight, chunks=333))
        np.testing.assert_array_equal(model.labels_.compute(), memory.labels_)
        assert model.n_iter_ == memory.n_iter_ > 2
        np.testing.assert_allclose(model.cluster_centers_, memory.cluster_centers_, rtol=1e-12)
        assert model.inertia_ == pytest.approx(memory.inertia_, rel=1e-10)
        unweighted = GPUKMeans(k, init=init, engine=engine).fit(da.from_array(X, chunks=chunks))
        assert model.inertia_ != pytest.approx(unweighted.inertia_, rel=1e-3)


@pytest.mark.gpu
@pytest.mark.parametrize("engine", ["graph", "collective"])
def test_gpu_workers_equal_the_in_memory_gpu_fit(client, engine):
    """device="gpu" on both worker processes (sharing the GPU): the collective task keeps its
    partitions and labels on the device; labels, n_iter_ and centres as the in-memory GPU
    fit's, weighted and unweighted, with empty clusters relocated (k = 40 of 700 rows)."""
    for n, k, chunks, weighted in [(20_000, 5, 6_001, False), (20_000, 5, 6_001, True),
                                   (700, 40, 200, True)]:
        X = _blobs(11, n=n, k=min(k, 5))
        rng = np.random.default_rng(12)
        weight = rng.uniform(0.2, 3.0, size=n) if weighted else None
        init = X[rng.choice(n, k, replace=False)]
        memory = InMemory(k, init=init, device="gpu").fit(X, sample_weight=weight)
        model = GPUKMeans(k, init=init, device="gpu", engine=engine).fit(
            da.from_array(X, chunks=(chunks, 3)), sample_weight=weight)
        np.testing.assert_array_equal(model.labels_.compute(), memory.labels_)
        assert model.n_iter_ == memory.n_iter_ > 2
        np.testing.assert_allclose(model.cluster_centers_, memory.cluster_centers_, rtol=1e-10)
        assert model.inertia_ == pytest.approx(memory.inertia_, rel=1e-9)


def test_strategies_are_said(client):
    """The partitions' strategies and why: the fixed rule for "auto" on the CPU, "given" for
    a name."""
    X = _blobs(3)
    model = GPUKMeans(4, random_state=0, update="numpy").fit(da.from_array(X, chunks=(2000, 3)))
    assert model.strategies_["update"] == "numpy"
    assert model.strategies_["assign"] in {"numba", "numpy"}
    assert model.strategy_reasons_["update"] == "given"
    assert "fixed rule" in model.strategy_reasons_["assign"]


@pytest.mark.gpu
def test_gpu_workers_take_the_measured_pick_of_the_largest_partition(client):
    """On GPU workers "auto" is the measured table's pair at the largest partition's shape (as
    the in-memory fit resolves its own), and whichever it is the labels are tiled's."""
    from gpumine import registry
    from gpumine.backend import get_backend

    rng = np.random.default_rng(5)
    X = rng.standard_normal((60_000, 32)).astype(np.float32)
    init = X[rng.choice(len(X), 256, replace=False)]
    model = GPUKMeans(256, init=init, device="gpu", max_iter=5, tol=0.0,
                      engine="collective").fit(da.from_array(X, chunks=(40_000, 32)))
    backend = get_backend("gpu")
    a, u, _ = registry.resolve_kmeans_pair("auto", "auto", "gpu", n_samples=40_000,
                                           n_features=32, n_clusters=256, dtype="float32",
                                           device_name=backend.device_name)
    assert model.strategies_ == {"assign": a.name, "update": u.name}
    assert set(model.strategy_reasons_) == {"assign", "update"}
    memory = InMemory(256, init=init, device="gpu", max_iter=5, tol=0.0, assign="tiled",
                      update=u.name).fit(X)
    np.testing.assert_array_equal(model.labels_.compute(), memory.labels_)


def test_integer_weights_equal_repeated_rows(client):
    """A weight of 2 is the row twice: the same centres and inertia from the same init."""
    X = _blobs(7, n=2000)
    weight = np.random.default_rng(8).integers(0, 3, size=2000).astype(float)
    init = X[:5]
    model = GPUKMeans(5, init=init).fit(da.from_array(X, chunks=600), sample_weight=weight)
    repeated = GPUKMeans(5, init=init).fit(da.from_array(np.repeat(X, weight.astype(int),
                                                                   axis=0), chunks=600))
    np.testing.assert_allclose(model.cluster_centers_, repeated.cluster_centers_, rtol=1e-10)
    assert model.inertia_ == pytest.approx(repeated.inertia_, rel=1e-10)


def test_kmeans_parallel_never_picks_a_weightless_point(client):
    """Far outliers of weight 0: k-means|| draws by w D^2, so none becomes a centre (without
    the weights, they do)."""
    X = _blobs(9, n=4000, k=4)
    X[:40] += 1e4  # forty far points
    weight = np.ones(4000)
    weight[:40] = 0.0
    data = da.from_array(X, chunks=1000)
    for seed in range(3):
        centres = GPUKMeans(4, random_state=seed).fit(data, sample_weight=weight)
        assert np.abs(centres.cluster_centers_).max() < 1e3
    assert np.abs(GPUKMeans(4, random_state=0).fit(data).cluster_centers_).max() > 1e3


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
    with pytest.raises(InvalidInputError, match="sample_weight has 99 values for 100 rows"):
        GPUKMeans(2).fit(X, sample_weight=np.ones(99))
    with pytest.raises(InvalidInputError, match="sample_weight must be numeric"):
        GPUKMeans(2).fit(X, sample_weight=np.array(["a"] * 100))
    with pytest.raises(InvalidInputError, match="sums to 0"):
        GPUKMeans(2).fit(X, sample_weight=np.zeros(100))
    for bad in (np.nan, -1.0):
        weight = np.ones(100)
        weight[61] = bad
        with pytest.raises(InvalidInputError,
                           match=r"partition 1 has a NaN, infinite or negative sample_weight "
                                 r"\(its row 11, row 61"):
            GPUKMeans(2).fit(X, sample_weight=weight)
    with pytest.raises(InvalidInputError, match="n_samples=100 should be >= n_clusters=101"):
        GPUKMeans(101).fit(X)
    with pytest.raises(InvalidInputError, match="dask array or dataframe"):
        GPUKMeans(2).fit(np.zeros((10, 2)))
    with pytest.raises(InvalidParameterError, match="engine must be"):
        GPUKMeans(2, engine="mpi").fit(X)
    holes = _blobs(4, n=100)
    holes[73, 2] = np.inf
    with pytest.raises(InvalidInputError, match=r"partition 1 has NaN .*its row 23, row 73"):
        GPUKMeans(2).fit(da.from_array(holes, chunks=50))


def _init(X, k):
    """The first k of a seeded choice of rows, and the in-memory fit from them (tol 0)."""
    init = X[np.random.default_rng(6).choice(len(X), k, replace=False)]
    return init, InMemory(k, init=init, device="cpu", tol=0).fit(X)


def test_a_worker_killed_mid_collective_fit_starts_the_loop_again_with_the_same_result(
        fit_killing_a_worker):
    """The long-lived loop loses a worker: the driver breaks the exchange, Dask recomputes
    the lost partitions, and the loop runs again from the same centres on what is left."""
    X = _blobs(5, n=400_000, d=4, k=12)
    init, expected = _init(X, 12)
    model = fit_killing_a_worker(
        lambda data: GPUKMeans(12, init=init, tol=0, engine="collective").fit(data), X, 50_000,
        task="gpumine-lloyd", victim=1, settle=0.1)
    assert model.n_iter_ == expected.n_iter_
    np.testing.assert_allclose(model.cluster_centers_, expected.cluster_centers_, rtol=1e-12)


def test_a_worker_killed_mid_fit_is_retried_and_the_result_is_the_same(fit_killing_a_worker):
    """A worker process dies during the fit: Dask recomputes its lost partitions and tasks
    on the other, and the fit gives the in-memory result all the same."""
    X = _blobs(5, n=40_000, d=4, k=12)
    init, expected = _init(X, 12)
    model = fit_killing_a_worker(
        lambda data: GPUKMeans(12, init=init, tol=0, engine="graph").fit(data), X, 5000,
        task="_partial", victim=0, settle=0.1)
    assert model.n_iter_ == expected.n_iter_
    np.testing.assert_allclose(model.cluster_centers_, expected.cluster_centers_, rtol=1e-12)
