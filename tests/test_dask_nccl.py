"""gpumine.dask.GPUKMeans's exchange through NCCL: one Dask worker per GPU, the sums
all-gathered GPU to GPU (:mod:`gpumine.dask.collective`).

The checks of the ``exchange`` parameter run everywhere (CPU workers). The fits are GPU
tests: with one GPU visible they run one worker (NCCL with one rank: the same buffers,
all-gather and ordered sums as with two); the tests needing two GPUs skip with fewer.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("dask")
distributed = pytest.importorskip("distributed")
import dask.array as da  # noqa: E402

from gpumine import GPUKMeans as InMemory  # noqa: E402
from gpumine.dask import GPUKMeans  # noqa: E402
from gpumine.exceptions import InvalidParameterError  # noqa: E402


def _blobs(seed, n, d=3, k=5, dtype=np.float64):
    rng = np.random.default_rng(seed)
    centres = rng.uniform(-20, 20, size=(k, d))
    return (centres[rng.integers(0, k, n)] + rng.normal(scale=1.5, size=(n, d))
            + 500.0).astype(dtype)


def _gpus() -> int:
    from gpumine.backend import cupy_module

    return cupy_module().cuda.runtime.getDeviceCount()


def test_exchange_is_checked_and_reported(client):
    X = da.from_array(_blobs(0, 3000), chunks=(1000, 3))
    init = _blobs(0, 3000)[:4]
    with pytest.raises(InvalidParameterError, match="exchange must be one of"):
        GPUKMeans(4, init=init, exchange="mpi").fit(X)
    with pytest.raises(InvalidParameterError, match="collective engine"):
        GPUKMeans(4, init=init, engine="graph", exchange="nccl").fit(X)
    # CPU workers: no GPU for NCCL
    with pytest.raises(InvalidParameterError, match="no GPU or no NCCL"):
        GPUKMeans(4, init=init, engine="collective", exchange="nccl").fit(X)
    auto = GPUKMeans(4, init=init, engine="collective").fit(X)
    actor = GPUKMeans(4, init=init, engine="collective", exchange="actor").fit(X)
    graph = GPUKMeans(4, init=init, engine="graph").fit(X)
    assert (auto.exchange_, actor.exchange_, graph.exchange_) == ("actor", "actor", "driver")
    np.testing.assert_array_equal(auto.cluster_centers_, actor.cluster_centers_)


@pytest.mark.gpu
def test_workers_sharing_a_gpu_take_the_actor(client):
    """The module's two workers share one GPU: NCCL refuses two ranks on one device, so
    "auto" exchanges through the actor and "nccl" says why it cannot."""
    X = da.from_array(_blobs(1, 4000), chunks=(1000, 3))
    init = _blobs(1, 4000)[:5]
    model = GPUKMeans(5, init=init, device="gpu", engine="collective").fit(X)
    assert model.exchange_ == "actor"
    with pytest.raises(InvalidParameterError, match="share a GPU"):
        GPUKMeans(5, init=init, device="gpu", engine="collective", exchange="nccl").fit(X)


@pytest.mark.gpu
@pytest.mark.parametrize("gpus", [1, 2])
def test_nccl_exchange_gives_the_actor_exchanges_bits(gpu_worker_cluster, gpus):
    """One worker a GPU: the NCCL fit's centres are bit-equal to the actor's on the same
    cluster (the same partition-order sums), its labels and n_iter_ equal the in-memory GPU
    fit's -- weighted, float32 and float64, and with empty clusters relocated (k = 40 of
    700 rows); with two GPUs also bit-equal to one worker's fit."""
    if _gpus() < gpus:
        pytest.skip(f"needs {gpus} GPUs, {_gpus()} visible")
    cases = [(30_000, 6, 7_001, False, np.float64), (30_000, 6, 4_000, True, np.float32),
             (700, 40, 90, True, np.float64)]
    fits = {}
    with gpu_worker_cluster(gpus) as cluster, distributed.Client(cluster):
        for n, k, chunks, weighted, dtype in cases:
            X = _blobs(11, n, dtype=dtype)
            rng = np.random.default_rng(12)
            weight = rng.uniform(0.2, 3.0, size=n) if weighted else None
            init = X[rng.choice(n, k, replace=False)]
            data = da.from_array(X, chunks=(chunks, 3))
            nccl, actor = (GPUKMeans(k, init=init, device="gpu", engine="collective",
                                     exchange=exchange, update="sort").fit(
                                         data, sample_weight=weight)
                           for exchange in ("nccl", "actor"))
            assert (nccl.exchange_, actor.exchange_) == ("nccl", "actor")
            np.testing.assert_array_equal(nccl.cluster_centers_, actor.cluster_centers_)
            assert nccl.n_iter_ == actor.n_iter_
            memory = InMemory(k, init=init, device="gpu", update="sort").fit(
                X, sample_weight=weight)
            np.testing.assert_array_equal(nccl.labels_.compute(), memory.labels_)
            assert nccl.n_iter_ == memory.n_iter_ > 2
            rtol = 1e-5 if dtype == np.float32 else 1e-10
            np.testing.assert_allclose(nccl.cluster_centers_, memory.cluster_centers_,
                                       rtol=rtol)
            assert len(nccl.iteration_seconds_) == nccl.n_iter_
            assert 0.0 <= nccl.iteration_overhead_ < 1.0
            fits[n, k, weighted] = nccl.cluster_centers_
    if gpus == 2:  # the same partitions on one worker: the same bits
        with gpu_worker_cluster(1) as cluster, distributed.Client(cluster):
            for n, k, chunks, weighted, dtype in cases:
                X = _blobs(11, n, dtype=dtype)
                rng = np.random.default_rng(12)
                weight = rng.uniform(0.2, 3.0, size=n) if weighted else None
                init = X[rng.choice(n, k, replace=False)]
                one = GPUKMeans(k, init=init, device="gpu", engine="collective",
                                exchange="nccl", update="sort").fit(
                                    da.from_array(X, chunks=(chunks, 3)), sample_weight=weight)
                np.testing.assert_array_equal(one.cluster_centers_, fits[n, k, weighted])


@pytest.mark.gpu
def test_a_gpu_worker_killed_mid_nccl_fit_starts_again_with_the_same_bits(
        gpu_worker_cluster, fit_killing_a_worker):
    """A worker dies while the ranks run NCCL collectives: the driver breaks the exchange,
    the surviving rank sees it while waiting for its GPU and aborts its communicator (NCCL
    alone would wait for the lost peer forever), and the loop runs again, giving the bits of
    an undisturbed fit."""
    if _gpus() < 2:
        pytest.skip(f"needs 2 GPUs, {_gpus()} visible")
    X = np.random.default_rng(3).uniform(-1, 1, (4_000_000, 64)).astype(np.float32)
    init = X[:2048]

    def fit(data):
        return GPUKMeans(2048, init=init, device="gpu", engine="collective",
                         exchange="nccl", update="sort", max_iter=60, tol=0).fit(data)

    with gpu_worker_cluster(2) as cluster, distributed.Client(cluster):
        expected = fit(da.from_array(X, chunks=(500_000, 64)))
    assert expected.n_iter_ == 60 and expected.exchange_ == "nccl"
    model = fit_killing_a_worker(fit, X, 500_000, task="gpumine-lloyd", victim=1, settle=2.0,
                                 gpus=True)
    assert model.exchange_ == "nccl"
    np.testing.assert_array_equal(model.cluster_centers_, expected.cluster_centers_)
