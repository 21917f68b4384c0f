"""The device-resident k-means path: namespaces, device k-means++, the one-readback loop.

CPU tests here check the pieces that run on both backends (NumPy's weighted draw
replayed on an array namespace, the device checks of the adapters); the rest is
marked ``gpu``.
"""

from __future__ import annotations

import types

import numpy as np
import pytest
from sklearn.cluster import kmeans_plusplus as sklearn_kmeans_plusplus
from sklearn.exceptions import ConvergenceWarning

from gpumine import GPUKMeans
from gpumine.exceptions import InvalidInputError, InvalidParameterError
from gpumine.kmeans.init import choice_without_replacement


@pytest.mark.parametrize("seed", range(20))
def test_choice_without_replacement_equals_numpy(seed):
    rng = np.random.RandomState(1000 + seed)
    n = rng.randint(5, 400)
    weights = rng.uniform(0, 1, n) * (rng.uniform(size=n) > 0.3)
    size = min(int(np.count_nonzero(weights)), rng.randint(1, 30))
    expected = np.random.RandomState(seed).choice(n, size, replace=False,
                                                  p=weights / weights.sum())
    got = choice_without_replacement(weights, size, np.random.RandomState(seed), np)
    np.testing.assert_array_equal(got, expected)


def test_choice_without_replacement_needs_enough_positive_weights():
    with pytest.raises(ValueError, match="Fewer non-zero entries"):
        choice_without_replacement(np.array([0.0, 1.0, 0.0]), 2, np.random.RandomState(0), np)


def test_device_mismatch_message_names_both_devices():
    from gpumine.adapters.columns import _check_same_device

    fake_cupy = types.SimpleNamespace(cuda=types.SimpleNamespace(
        Device=lambda: types.SimpleNamespace(id=0)))
    backend = types.SimpleNamespace(xp=fake_cupy)
    X = types.SimpleNamespace(device=types.SimpleNamespace(id=1))
    with pytest.raises(InvalidInputError, match="GPU 1 but gpumine runs on GPU 0"):
        _check_same_device(X, backend)
    _check_same_device(types.SimpleNamespace(device=types.SimpleNamespace(id=0)), backend)


# -- on the GPU ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cp():
    from gpumine.backend import cupy_module

    return cupy_module()


def _kpp(cp, X, k, weight=None, seed=0, trials=None):
    from gpumine.kmeans import gpu

    X_dev = cp.ascontiguousarray(cp.asarray(X).T).T
    w = cp.ones(len(X), X.dtype) if weight is None else cp.asarray(weight.astype(X.dtype))
    return cp.asnumpy(gpu.kmeans_plusplus(X_dev, k, sample_weight=w,
                                          random_state=np.random.RandomState(seed),
                                          n_local_trials=trials))


def _potential(X, centers, weight=None):
    d2 = ((X[:, None, :].astype(np.float64) - centers[None].astype(np.float64)) ** 2).sum(-1)
    w = np.ones(len(X)) if weight is None else weight
    return float((w * d2.min(1)).sum())


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("n", "d", "k"), [(1, 1, 1), (5, 2, 5), (1000, 3, 1), (4099, 7, 31),
                                           (2000, 16, 12), (20000, 18, 128), (3001, 300, 9),
                                           (700, 600, 5)])
def test_device_kmeans_plusplus_picks_distinct_data_points(cp, n, d, k, dtype):
    rng = np.random.RandomState(n + d + k)
    X = rng.normal(size=(n, d)).astype(dtype) + 1000.0  # far from the origin
    centers = _kpp(cp, X, k)
    assert centers.shape == (k, d) and centers.dtype == dtype
    rows = {tuple(row) for row in X}
    assert all(tuple(c) in rows for c in centers), "a centre is not a data point"
    assert len({tuple(c) for c in centers}) == k, "a point was chosen twice"
    np.testing.assert_array_equal(_kpp(cp, X, k), centers)  # same random_state, same centres


def _reference_kpp(X, k, weight, seed, m):
    """Greedy k-means++ in float64 NumPy with direct distances and the uniforms the device
    strategy draws: the first centre by weight (side right), each next the best of m."""
    uniforms = np.random.RandomState(seed).random_sample(1 + (k - 1) * m)
    X64 = X.astype(np.float64)
    cdf = np.cumsum(weight)
    chosen = [int(np.searchsorted(cdf, uniforms[0] * cdf[-1], side="right"))]
    closest = ((X64 - X64[chosen[0]]) ** 2).sum(1)
    for c in range(1, k):
        cdf = np.cumsum(weight * closest)
        drawn = np.searchsorted(cdf, uniforms[1 + (c - 1) * m:1 + c * m] * cdf[-1])
        drawn = np.minimum(drawn, len(X) - 1)
        d2 = ((X64[None, :, :] - X64[drawn][:, None, :]) ** 2).sum(2)
        best = int(np.argmin((weight * np.minimum(closest, d2)).sum(1)))
        chosen.append(int(drawn[best]))
        closest = np.minimum(closest, d2[best])
    return X[chosen]


@pytest.mark.gpu
@pytest.mark.parametrize("unit", [False, True])
@pytest.mark.parametrize(("n", "d", "k", "m"), [(3000, 4, 12, None), (2500, 40, 9, 20),
                                                (777, 1, 30, 1)])
def test_device_kmeans_plusplus_equals_the_greedy_reference(cp, n, d, k, m, unit):
    """The same centres as a direct float64 reference from the same uniforms: the one-pass
    kernel's draw sums (per tile, per block, a lagging D^2) are the algorithm's. Unit
    weights go to the kernel as null (not read): the same centres as weights of 1."""
    rng = np.random.RandomState(n + d)
    X = rng.normal(size=(n, d)) * rng.uniform(0.5, 3.0, size=d) + 50.0
    weight = np.ones(n) if unit else rng.uniform(0.2, 2.0, size=n)
    trials = m if m is not None else 2 + int(np.log(k))
    for seed in range(4):
        expected = _reference_kpp(X, k, weight, seed, trials)
        got = _kpp(cp, X, k, weight=weight, seed=seed, trials=m)
        np.testing.assert_array_equal(got, expected, err_msg=f"seed {seed}")


@pytest.mark.gpu
def test_device_kmeans_plusplus_quality_matches_sklearn(cp):
    rng = np.random.RandomState(7)
    blobs = rng.uniform(-20, 20, size=(40, 6))
    X = (blobs[rng.randint(0, 40, 30000)] + rng.normal(size=(30000, 6))).astype(np.float32)
    ours = [_potential(X, _kpp(cp, X, 40, seed=s)) for s in range(7)]
    theirs = [_potential(X, sklearn_kmeans_plusplus(X, 40, random_state=s)[0])
              for s in range(7)]
    assert np.median(ours) <= 1.05 * np.median(theirs), (ours, theirs)


@pytest.mark.gpu
def test_device_kmeans_plusplus_weights(cp):
    rng = np.random.RandomState(3)
    X = rng.normal(size=(5000, 4)).astype(np.float32)
    weight = rng.uniform(0.5, 2.0, 5000)
    weight[::2] = 0.0  # points of zero weight are never drawn
    centers = _kpp(cp, X, 25, weight=weight)
    allowed = {tuple(row) for row in X[1::2]}
    assert all(tuple(c) in allowed for c in centers)


@pytest.mark.gpu
def test_device_kmeans_plusplus_fewer_distinct_points_than_clusters(cp):
    X = np.repeat(np.arange(3, dtype=np.float32)[:, None], 100, axis=0)
    centers = _kpp(cp, X, 5)
    assert set(centers.ravel().tolist()) == {0.0, 1.0, 2.0}


@pytest.mark.gpu
@pytest.mark.slow
def test_device_kmeans_plusplus_past_2_31_distances(cp):
    """3M x 1, k = 1000: the n x k distance matrix would pass 2**31 elements (never formed)."""
    X = np.random.RandomState(0).random_sample((3_000_000, 1)).astype(np.float32)
    centers = _kpp(cp, X, 1000)
    assert len(np.unique(centers)) == 1000
    # k-means++ on 1-d uniform data spaces the centres: no gap far above 1/k
    gaps = np.diff(np.sort(centers.ravel()))
    assert gaps.max() < 20.0 / 1000


@pytest.mark.gpu
def test_random_init_on_device_equals_cpu(cp):
    X = np.random.RandomState(1).normal(size=(3000, 3))
    weight = np.random.RandomState(2).uniform(size=3000)
    cpu = GPUKMeans(8, init="random", n_init=1, max_iter=1, random_state=5, device="cpu").fit(
        X, sample_weight=weight)
    gpu = GPUKMeans(8, init="random", n_init=1, max_iter=1, random_state=5, device="gpu").fit(
        X, sample_weight=weight)
    np.testing.assert_allclose(gpu.cluster_centers_, cpu.cluster_centers_, rtol=1e-12)


@pytest.mark.gpu
@pytest.mark.parametrize("order", ["C", "F"])
def test_cupy_in_cupy_out_and_input_untouched(cp, order):
    rng = np.random.RandomState(0)
    X_host = rng.normal(size=(2000, 5)).astype(np.float32)
    X = cp.asarray(X_host, order=order)
    before = X.copy()
    km = GPUKMeans(6, random_state=0, device="gpu").fit(X)
    assert isinstance(km.labels_, cp.ndarray) and isinstance(km.cluster_centers_, cp.ndarray)
    assert km.labels_.device.id == X.device.id
    assert bool((X == before).all()), "copy_x=True must leave X as it was, bit for bit"
    assert isinstance(km.predict(X), cp.ndarray)
    assert isinstance(km.transform(X), cp.ndarray)
    assert isinstance(km.fit_predict(X), cp.ndarray)
    assert isinstance(km.predict(X_host), np.ndarray)  # NumPy in, NumPy out
    host = GPUKMeans(6, random_state=0, device="gpu").fit(X_host)
    assert isinstance(host.labels_, np.ndarray) and isinstance(host.cluster_centers_, np.ndarray)
    np.testing.assert_array_equal(cp.asnumpy(km.labels_), host.labels_)
    np.testing.assert_array_equal(cp.asnumpy(km.predict(X)), km.predict(X_host))
    assert isinstance(km.score(X), float)


@pytest.mark.gpu
def test_device_sample_weight_checked_on_the_device(cp):
    X = cp.asarray(np.random.RandomState(0).normal(size=(500, 2)))
    with pytest.raises(InvalidInputError, match="non-negative"):
        GPUKMeans(3, device="gpu").fit(X, sample_weight=-cp.ones(500))
    with pytest.raises(InvalidInputError, match="NaN"):
        GPUKMeans(3, device="gpu").fit(X, sample_weight=cp.full(500, cp.nan))
    weighted = GPUKMeans(3, random_state=0, device="gpu").fit(X, sample_weight=cp.ones(500))
    plain = GPUKMeans(3, random_state=0, device="gpu").fit(X)
    np.testing.assert_array_equal(cp.asnumpy(weighted.labels_), cp.asnumpy(plain.labels_))


@pytest.mark.gpu
def test_fewer_distinct_clusters_warning_on_device(cp):
    X = cp.asarray(np.repeat(np.arange(3.0)[:, None], 50, axis=0))
    with pytest.warns(ConvergenceWarning, match=r"distinct clusters \(3\)"):
        GPUKMeans(5, random_state=0, device="gpu").fit(X)


@pytest.mark.gpu
@pytest.mark.parametrize("assign", ["tiled", "gemm"])
def test_device_loop_matches_cpu_trajectory(assign):
    """Counting (tiled) and non-counting (gemm) E-steps give the CPU path's iterations."""
    rng = np.random.RandomState(4)
    centres = rng.uniform(-30, 30, size=(9, 4))
    X = (centres[rng.randint(0, 9, 20000)] + rng.normal(size=(20000, 4))) + 500.0
    init = X[:9].copy()
    for tol in (0.0, 1e-4):
        cpu = GPUKMeans(9, init=init, tol=tol, device="cpu").fit(X)
        gpu = GPUKMeans(9, init=init, tol=tol, device="gpu", assign=assign).fit(X)
        assert gpu.n_iter_ == cpu.n_iter_
        np.testing.assert_array_equal(gpu.labels_, cpu.labels_)
        assert gpu.inertia_ == pytest.approx(cpu.inertia_, rel=1e-9)
        np.testing.assert_allclose(gpu.cluster_centers_, cpu.cluster_centers_, rtol=1e-9)


@pytest.mark.gpu
def test_k_equals_n_and_k_one_on_device():
    X = np.random.RandomState(0).normal(size=(257, 3)).astype(np.float32)
    full = GPUKMeans(257, random_state=0, device="gpu").fit(X)
    assert full.inertia_ == pytest.approx(0.0, abs=1e-6)
    assert len(np.unique(full.labels_)) == 257
    one = GPUKMeans(1, random_state=0, device="gpu").fit(X)
    np.testing.assert_allclose(one.cluster_centers_[0], X.mean(0), rtol=1e-5, atol=1e-6)


@pytest.mark.gpu
@pytest.mark.parametrize("empty", [False, True])
def test_graph_loop_equals_launch_loop(cp, monkeypatch, empty):
    """The captured-graph iteration gives the plain launches' result.

    The default update adds with atomics, so two runs may differ in the last bits of a
    sum whatever the launch path; labels and iterations must agree exactly.
    """
    rng = np.random.RandomState(11)
    X = cp.asarray(rng.normal(size=(30000, 6)).astype(np.float32))
    init = cp.asnumpy(X[:7]).copy()
    if empty:
        init[5:] = 100.0  # two clusters empty after the first E-step: relocation runs
    runs = []
    for graphs in ("1", "0"):
        monkeypatch.setenv("GPUMINE_GRAPHS", graphs)
        km = GPUKMeans(7, init=init, tol=0, device="gpu").fit(X)
        runs.append((cp.asnumpy(km.labels_), cp.asnumpy(km.cluster_centers_), km.n_iter_,
                     km.inertia_))
    assert runs[0][2] == runs[1][2] > 2
    np.testing.assert_array_equal(runs[0][0], runs[1][0])
    np.testing.assert_allclose(runs[0][1], runs[1][1], rtol=1e-6, atol=1e-6)
    assert runs[0][3] == pytest.approx(runs[1][3], rel=1e-9)


@pytest.mark.gpu
@pytest.mark.parametrize(("case", "dtype"), [("plain", np.float32), ("plain", np.float64),
                                             ("empty", np.float32), ("empty", np.float64),
                                             ("one_empty", np.float32),
                                             ("many_empty", np.float32), ("tol", np.float64),
                                             ("k_one", np.float32), ("k_n", np.float64)])
def test_fused_loop_equals_launch_loop(cp, monkeypatch, case, dtype):
    """The one-launch loop (small problems) gives the launch loop's labels, iterations,
    centres and inertia: the same arithmetic, up to the order of the atomic sums. It
    relocates a few empty clusters itself (one launch) and leaves many to the host."""
    from gpumine.kmeans import gpu

    rng = np.random.RandomState(12)
    n, k = {"k_n": (40, 40), "k_one": (17695, 1), "many_empty": (17695, 48)}.get(
        case, (17695, 24))
    middles = rng.uniform(-20, 20, size=(k, 18))
    X = cp.asarray((middles[rng.randint(0, k, n)] + rng.normal(size=(n, 18))
                    + 300.0).astype(dtype))
    init = cp.asnumpy(X[:k]).copy()
    empty = {"empty": 3, "one_empty": 1, "many_empty": gpu.FUSED_MAX_RELOCATIONS + 8}
    if case in empty:
        init[k - empty[case]:] = 1e4  # clusters empty after the first E-step: relocation
    tol = 1e-3 if case == "tol" else 0.0
    launches = []
    real_run = gpu.FusedLoop.run
    monkeypatch.setattr(gpu.FusedLoop, "run",
                        lambda self, *a: launches.append(a) or real_run(self, *a))
    runs = []
    for fused in ("1", "0"):
        monkeypatch.setenv("GPUMINE_FUSED", fused)
        km = GPUKMeans(k, init=init, tol=tol, device="gpu").fit(X)
        runs.append((cp.asnumpy(km.labels_), cp.asnumpy(km.cluster_centers_), km.n_iter_,
                     km.inertia_))
    assert len(launches) == (2 if case == "many_empty" else 1)
    assert runs[0][2] == runs[1][2]
    np.testing.assert_array_equal(runs[0][0], runs[1][0])
    rtol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(runs[0][1], runs[1][1], rtol=rtol, atol=rtol * 300)
    assert runs[0][3] == pytest.approx(runs[1][3], rel=1e-6)
    # the kernel's final pass: inertia of the returned labels and centres, directly
    X64, labels = cp.asnumpy(X).astype(np.float64), runs[0][0]
    direct = ((X64 - runs[0][1].astype(np.float64)[labels]) ** 2).sum()
    assert runs[0][3] == pytest.approx(direct, rel=1e-5, abs=1e-6 * X64.size)


@pytest.mark.gpu
@pytest.mark.parametrize(("n", "d", "k", "relocate"), [
    (5_000, 8, 256, False), (2_001, 2, 3, False), (1_537, 4, 1, False), (3_000, 3, 5, True),
    (900, 32, 40, False), (17_695, 18, 128, False)])
def test_fused_loop_threads_per_point_give_the_same_fit(cp, n, d, k, relocate):
    """Every threads-per-point variant of the fused loop (a group of lanes splitting the
    centres, then the sums) gives one thread's labels, iterations and inertia, and its
    centres to the rounding of the atomic sums; k below the group size and relocation too."""
    from gpumine.kmeans import gpu

    rng = np.random.default_rng(d * 1000 + k)
    middles = rng.uniform(-10, 10, size=(k, d))
    X = cp.asarray((middles[rng.integers(0, k, n)] + rng.normal(size=(n, d))).astype(np.float32))
    X = cp.ascontiguousarray(X.T).T
    init = X[:k].copy()
    if relocate:
        init[-2:] = 1e4  # two clusters empty after the first E-step
    weight = cp.asarray(rng.uniform(0.5, 2.0, n).astype(np.float32))
    runs = {}
    for tpp in gpu.FUSED_TPP:
        loop = gpu.FusedLoop(X, weight, init, threads_per_point=tpp)
        status = loop.run(0, 30, 0.0)
        assert status.finished
        runs[tpp] = (cp.asnumpy(loop.labels), cp.asnumpy(loop.centers[status.done & 1]),
                     status.done, status.inertia)
    for tpp, (labels, centers, done, inertia) in runs.items():
        np.testing.assert_array_equal(labels, runs[1][0], err_msg=f"tpp={tpp}")
        assert done == runs[1][2]
        np.testing.assert_allclose(centers, runs[1][1], rtol=1e-5, atol=1e-4)
        assert inertia == pytest.approx(runs[1][3], rel=1e-6)
    assert gpu._fused_tpp(n, d) in gpu.FUSED_TPP
    with pytest.raises(InvalidParameterError, match="threads_per_point"):
        gpu.FusedLoop(X, weight, init, threads_per_point=3)


@pytest.mark.gpu
@pytest.mark.parametrize("fused", ["1", "0"])
def test_fused_loop_counts_the_clusters_used(cp, monkeypatch, fused):
    """Five distinct points, eight clusters: nothing can be relocated (every point sits on
    its centre), three clusters stay empty, and both loops warn with the same count."""
    monkeypatch.setenv("GPUMINE_FUSED", fused)
    points = np.random.RandomState(3).uniform(-5, 5, size=(5, 3)).astype(np.float32)
    X = cp.asarray(points[np.arange(3000) % 5])
    init = np.concatenate([points, points[:3]])
    with pytest.warns(ConvergenceWarning, match=r"distinct clusters \(5\)"):
        km = GPUKMeans(8, init=init, device="gpu").fit(X)
    assert len(np.unique(cp.asnumpy(km.labels_))) == 5
    assert km.inertia_ == pytest.approx(0.0, abs=1e-6)


@pytest.mark.gpu
def test_fused_loop_takes_only_small_default_problems(cp):
    from gpumine import registry
    from gpumine.kmeans import gpu

    tiled = registry.load_strategy("kmeans.assign", "tiled")
    atomic = registry.load_strategy("kmeans.update", "atomic")
    small = cp.zeros((1000, 18), dtype=cp.float32)
    assert gpu.FusedLoop.takes(small, 128, tiled, atomic)
    assert not gpu.FusedLoop.takes(small, 128, tiled, registry.load_strategy(
        "kmeans.update", "sort"))
    assert not gpu.FusedLoop.takes(cp.zeros((1000, 33), dtype=cp.float32), 8, tiled, atomic)
    assert not gpu.FusedLoop.takes(small, 4096, tiled, atomic)  # centres past shared memory


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_streamed_gpu_fit_equals_the_in_memory_gpu_fit(cp, dtype):
    """batch_rows streams host data through the GPU chunk by chunk: from the same init the
    labels and n_iter equal the in-memory GPU fit's, the centres up to summation order
    (at this size; benchmarks/stream_timing.py records 10M rows). Data far from the origin."""
    rng = np.random.default_rng(11)
    middles = rng.uniform(-4, 4, size=(24, 16))
    X = (middles[rng.integers(0, 24, 300_007)] + rng.normal(size=(300_007, 16)) + 250.0)
    X = X.astype(dtype)
    init = X[rng.choice(len(X), 24, replace=False)]
    memory = GPUKMeans(24, init=init, max_iter=15, tol=0, device="gpu").fit(X)
    streamed = GPUKMeans(24, init=init, max_iter=15, tol=0, device="gpu",
                         batch_rows=65_536).fit(X)
    np.testing.assert_array_equal(cp.asnumpy(streamed.labels_), cp.asnumpy(memory.labels_))
    assert streamed.n_iter_ == memory.n_iter_
    np.testing.assert_allclose(streamed.cluster_centers_, memory.cluster_centers_,
                               rtol=1e-5 if dtype == np.float32 else 1e-12)


@pytest.mark.gpu
@pytest.mark.parametrize("update", ["sort", "atomic-f64"])
def test_streamed_gpu_fit_with_a_float64_update_is_bit_equal_to_in_memory(cp, update):
    """update="sort" (float64 in a fixed order) and "atomic-f64" (float64 block partials):
    at a size where the atomic update's float32 block partials already move labels between
    runs, two fits and the streamed fit equal the in-memory one bit for bit."""
    rng = np.random.default_rng(5)
    X = rng.standard_normal((1_000_003, 32), dtype=np.float32)
    init = X[rng.choice(len(X), 64, replace=False)]
    kw = dict(init=init, max_iter=8, tol=0, device="gpu", update=update)
    memory = GPUKMeans(64, **kw).fit(X)
    again = GPUKMeans(64, **kw).fit(X)
    np.testing.assert_array_equal(again.cluster_centers_, memory.cluster_centers_)
    streamed = GPUKMeans(64, batch_rows=262_144, **kw).fit(X)
    np.testing.assert_array_equal(streamed.labels_, memory.labels_)
    np.testing.assert_array_equal(streamed.cluster_centers_, memory.cluster_centers_)
    assert streamed.n_iter_ == memory.n_iter_


@pytest.mark.gpu
def test_a_parquet_dataset_read_ahead_on_the_gpu_equals_the_in_memory_fit(cp, tmp_path):
    """A Parquet dataset streamed through the GPU, each batch read, checked and copied on the
    read-ahead thread while the one before is computed (adapters/read_ahead.py): with
    update="sort" the fit and predict equal the in-memory fit's bit for bit, batch after
    batch of uneven sizes (files of 70,001 rows, batches of 32,768)."""
    import pyarrow as pa
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    rng = np.random.default_rng(12)
    X = (rng.standard_normal((210_003, 12)) + 50.0).astype(np.float32)
    names = [f"f{j}" for j in range(12)]
    for part, start in enumerate(range(0, len(X), 70_001)):
        piece = X[start:start + 70_001]
        pq.write_table(pa.table({n: piece[:, j] for j, n in enumerate(names)}),
                       tmp_path / f"part-{part}.parquet", row_group_size=20_000)
    dataset = ds.dataset(sorted(tmp_path.glob("*.parquet")), format="parquet")
    init = X[rng.choice(len(X), 40, replace=False)]
    kw = dict(init=init, max_iter=12, tol=0, device="gpu", update="sort")
    memory = GPUKMeans(40, **kw).fit(X)
    streamed = GPUKMeans(40, batch_rows=32_768, **kw).fit(dataset)
    np.testing.assert_array_equal(cp.asnumpy(streamed.labels_), memory.labels_)
    np.testing.assert_array_equal(streamed.cluster_centers_, memory.cluster_centers_)
    assert streamed.n_iter_ == memory.n_iter_
    np.testing.assert_array_equal(streamed.predict(dataset), memory.labels_)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cupy_init_array_stays_on_the_device_and_equals_host_init(cp, dtype, rng):
    X = rng.normal(size=(3000, 5)).astype(dtype)
    C = X[:7].astype(np.float64)  # another dtype: cast to X's, as for host arrays
    fits = [GPUKMeans(7, init=init, n_init=1, max_iter=20, tol=0.0, update="sort",
                      device="gpu").fit(cp.asarray(X)) for init in (C, cp.asarray(C))]
    np.testing.assert_array_equal(cp.asnumpy(fits[0].labels_), cp.asnumpy(fits[1].labels_))
    np.testing.assert_array_equal(cp.asnumpy(fits[0].cluster_centers_),
                                  cp.asnumpy(fits[1].cluster_centers_))
    # and a CuPy init with a host X, and from a callable returning CuPy centres
    host_fit = GPUKMeans(7, init=cp.asarray(C), n_init=1, max_iter=20, tol=0.0, update="sort",
                         device="gpu").fit(X)
    np.testing.assert_array_equal(host_fit.labels_, cp.asnumpy(fits[0].labels_))
    # a callable gets the (centred) data and may return its centres on the device
    called = [GPUKMeans(7, init=init, n_init=1, max_iter=20, tol=0.0, update="sort",
                        device="gpu").fit(cp.asarray(X))
              for init in (lambda X, k, random_state: cp.asnumpy(X[:k]),
                           lambda X, k, random_state: X[:k])]
    np.testing.assert_array_equal(cp.asnumpy(called[0].labels_), cp.asnumpy(called[1].labels_))


@pytest.mark.gpu
def test_cupy_init_array_with_nan_or_bad_shape_is_refused(cp, rng):
    X = cp.asarray(rng.normal(size=(100, 3)))
    bad = cp.asarray(rng.normal(size=(4, 3)))
    bad[1, 2] = cp.nan
    with pytest.raises(InvalidInputError, match="NaN or infinity"):
        GPUKMeans(4, init=bad, device="gpu").fit(X)
    with pytest.raises(InvalidInputError, match="2-d numeric"):
        GPUKMeans(4, init=cp.zeros(12), device="gpu").fit(X)
    with pytest.raises(InvalidInputError, match="shape of the initial centers"):
        GPUKMeans(4, init=cp.zeros((4, 2)), device="gpu").fit(X)
