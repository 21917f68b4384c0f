"""GPU k-means strategies against the FP64 NumPy reference (marked ``gpu``)."""

from __future__ import annotations

import numpy as np
import pytest

from gpumine import GPUKMeans, registry
from gpumine.exceptions import InvalidInputError, InvalidParameterError
from gpumine.kmeans.lloyd import bind_update

pytestmark = pytest.mark.gpu

EPS = {np.float32: float(np.finfo(np.float32).eps), np.float64: float(np.finfo(np.float64).eps)}
UPDATES = [s.name for s in registry.list_strategies("kmeans.update", backend="gpu")]
ASSIGNS = [s.name for s in registry.list_strategies("kmeans.assign", backend="gpu")]
EXACT_ASSIGNS = [name for name in ASSIGNS if name != "tc-fast"]  # tc-fast: FP16, opt-in
DTYPES = [np.float32, np.float64]


@pytest.fixture(scope="module")
def cp():
    from gpumine.backend import cupy_module

    return cupy_module()


def _device_columns(cp, X):
    return cp.ascontiguousarray(cp.asarray(X).T).T


def _reference_sums(X, labels, weight, k):
    sums = np.zeros((k, X.shape[1]))
    for j in range(X.shape[1]):
        sums[:, j] = np.bincount(labels, weights=X[:, j].astype(np.float64) * weight, minlength=k)
    return sums, np.bincount(labels, weights=weight.astype(np.float64), minlength=k)


def _check_update(cp, name, X, labels, weight, k):
    X_dev, weight_dev = _device_columns(cp, X), cp.asarray(weight)
    update = bind_update(registry.load_strategy("kmeans.update", name), X_dev, weight_dev)
    sums = cp.full((k, X.shape[1]), np.nan)  # poison: every element must be written
    weights = cp.full(k, np.nan)
    update(X_dev, cp.asarray(labels), weight_dev, sums, weights)
    expected_sums, expected_weights = _reference_sums(X, labels, weight, k)
    got_sums, got_weights = cp.asnumpy(sums), cp.asnumpy(weights)
    assert np.isfinite(got_sums).all() and np.isfinite(got_weights).all(), "unwritten output"
    # Global sums are double; `atomic` keeps a block's partial sums in the data's precision,
    # so float32 data gets 1e-6 (the bound is 1e-5), float64 data 1e-9.
    rtol = 1e-6 if X.dtype == np.float32 else 1e-9
    scale = max(1.0, np.linalg.norm(expected_sums))
    assert np.linalg.norm(got_sums - expected_sums) <= rtol * scale, name
    np.testing.assert_allclose(got_weights, expected_weights, rtol=rtol, atol=rtol)


SHAPES = [  # (n, d, k): n=1, k=1, k=2, k=n, d=1, d=3, d=300, n not a multiple of 256,
    # Corel's size (gather's auto case), d = 32 (its largest)
    (1, 1, 1), (1, 3, 1), (257, 1, 2), (1000, 3, 1000), (999, 300, 7), (4099, 3, 64),
    (10001, 8, 1), (17695, 18, 128), (3001, 32, 40),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("n", "d", "k"), SHAPES)
@pytest.mark.parametrize("name", UPDATES)
def test_update_matches_fp64_reference(cp, name, n, d, k, dtype, rng):
    X = rng.normal(size=(n, d)).astype(dtype)
    labels = rng.randint(0, k, size=n).astype(np.int32)
    if k > 3:
        labels[labels == 2] = 0  # an empty cluster
    weight = rng.uniform(0.1, 2.0, size=n).astype(dtype)
    if name == "gather" and d > 32:
        with pytest.raises(InvalidParameterError, match="at most 32 features"):
            _check_update(cp, name, X, labels, weight, k)
        return
    _check_update(cp, name, X, labels, weight, k)


@pytest.mark.parametrize("name", ["atomic", "atomic-f64", "atomic-fixed"])
@pytest.mark.parametrize(("n", "d", "k", "dtype"), [
    (20000, 32, 1024, np.float32),   # 135 KB of float partials: one opted-in slice
    (5000, 128, 1024, np.float32),   # three feature slices (43, 43, 42)
    (5000, 128, 1024, np.float64),   # five slices of double partials
    (1000, 7, 6000, np.float32),     # atomic-f64: three slices of 3, 3 and 1 features
    (3000, 5, 10000, np.float64),    # five one-feature slices
    (2000, 1, 30000, np.float64),    # too many clusters for any slice: global atomics
    (2000, 1, 30000, np.float32),    # the same in float32 (atomic-fixed: atomic's fallback)
])
def test_atomic_update_past_the_default_shared_memory(cp, name, n, d, k, dtype, rng):
    """Partials larger than 48 KB go to opted-in shared memory, in feature slices when
    k (d + 1) do not fit a block; the sums still match the FP64 reference."""
    X = (rng.normal(size=(n, d)) + 3.0).astype(dtype)
    labels = rng.randint(0, k, size=n).astype(np.int32)
    labels[labels == 5] = 0  # an empty cluster
    weight = rng.uniform(0.1, 2.0, size=n).astype(dtype)
    _check_update(cp, name, X, labels, weight, k)


@pytest.mark.parametrize(("n", "d", "k", "offset"), [
    (1, 1, 1, 0.0), (257, 1, 2, 1e4), (4099, 3, 64, -3e5), (20_011, 32, 1024, 50.0),
    (5003, 128, 1024, 0.0), (3001, 7, 40, 1e-30),
])
def test_fixed_update_is_within_half_a_quantum_a_row_and_order_free(cp, n, d, k, offset, rng):
    """update="atomic-fixed": every sum within half its feature's quantum a row of the
    exact one (float64 sums of the exact float64 products), the weights too; the same bits
    when the rows come in another order (integer sums), and again on a second call."""
    from gpumine.kmeans.gpu import fixed_scales

    X = (rng.normal(size=(n, d)) * (1.0 + abs(offset) * 1e-3) + offset).astype(np.float32)
    X[: max(1, n // 7), 0] *= 1000.0  # one feature's magnitudes spread wider
    labels = rng.randint(0, k, size=n).astype(np.int32)
    if k > 3:
        labels[labels == 2] = 0  # an empty cluster
    weight = rng.uniform(0.1, 3.0, size=n).astype(np.float32)
    update = registry.load_strategy("kmeans.update", "atomic-fixed")

    def run(order):
        X_dev = _device_columns(cp, X[order])
        weight_dev = cp.asarray(weight[order])
        bound = bind_update(update, X_dev, weight_dev)
        sums, weights = cp.full((k, d), np.nan), cp.full(k, np.nan)
        bound(X_dev, cp.asarray(labels[order]), weight_dev, sums, weights)
        run.scales = cp.asnumpy(bound.scales)  # the device's quanta (fixed_maxima, _quanta)
        return cp.asnumpy(sums), cp.asnumpy(weights)

    sums, weights = run(np.arange(n))
    expected_sums, expected_weights = _reference_sums(X, labels, weight, k)
    scales, _ = fixed_scales(X.T.astype(np.float64), weight.astype(np.float64))
    np.testing.assert_array_equal(run.scales, scales)  # the host reference's, bit for bit
    counts = np.bincount(labels, minlength=k)[:, None]
    # the float64 reference's own rounding: at most (count + 1) units of 2^-53 of |terms|
    magnitudes, _ = _reference_sums(np.abs(X), labels, weight, k)
    slack = (counts + 2) * 2.0**-52 * magnitudes
    assert (np.abs(sums - expected_sums) <= counts * 0.5 / scales[None, :d] + slack).all()
    assert (np.abs(weights - expected_weights)
            <= counts[:, 0] * (0.5 / scales[d] + 2.0**-52 * expected_weights)).all()
    assert (sums[counts[:, 0] == 0] == 0).all() and (weights[counts[:, 0] == 0] == 0).all()
    shuffled = run(rng.permutation(n))
    np.testing.assert_array_equal(shuffled[0], sums)
    np.testing.assert_array_equal(shuffled[1], weights)
    np.testing.assert_array_equal(run(np.arange(n))[0], sums)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("n", "d", "offset"), [(1, 1, 0.0), (257, 1, 0.0), (4_000_001, 3, 1e4),
                                                (1000, 70_000, -5.0), (30_000, 8, 0.0)])
def test_feature_variance_and_tolerance_equal_numpy(cp, n, d, offset, dtype, rng):
    from gpumine.kmeans.gpu import feature_variance
    from gpumine.kmeans.lloyd import tolerance

    X = (rng.normal(size=(n, d)) * 3.0 + offset).astype(dtype)
    X_dev = _device_columns(cp, X)
    mean = cp.asarray(X.astype(np.float64).mean(axis=0))
    expected = X.astype(np.float64).var(axis=0)
    got = cp.asnumpy(feature_variance(X_dev, mean))
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-300)
    # run to run the same bits (block sums added in a fixed order)
    assert np.array_equal(cp.asnumpy(feature_variance(X_dev, mean)), got)
    assert tolerance(X_dev, 1e-4, cp) == pytest.approx(expected.mean() * 1e-4, rel=1e-10)
    assert tolerance(X_dev, 0.0, cp) == 0.0


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("n", "d", "k", "offset"), [(1, 1, 1, 0.0), (257, 3, 5, 0.0),
                                                     (1000, 4, 7, 1e4), (3001, 6, 64, 0.0),
                                                     (4099, 128, 1024, -30.0), (70, 130, 3, 0.0),
                                                     (50, 4, 50, 0.0)])
def test_inertia_equals_the_direct_fp64_sum(cp, n, d, k, offset, dtype, rng):
    """Inertia against NumPy's direct FP64 sum, the centres read 16 bytes at a time where
    their rows allow: the same bits when the same centres sit 4 bytes off alignment (read a
    value at a time), run to run."""
    from gpumine.kmeans.gpu import inertia, inertia_and_distinct

    X = (rng.normal(size=(n, d)) + offset).astype(dtype)
    C = (rng.normal(size=(k, d)) + offset).astype(dtype)
    labels = rng.randint(0, k, size=n).astype(np.int32)
    w = rng.uniform(0.5, 2.0, size=n).astype(dtype)
    diff = X.astype(np.float64) - C.astype(np.float64)[labels]
    expected = float(np.sum(w.astype(np.float64) * np.sum(diff * diff, axis=1)))
    X_dev, w_dev, labels_dev = _device_columns(cp, X), cp.asarray(w), cp.asarray(labels)
    got = inertia(X_dev, w_dev, cp.asarray(C), labels_dev)
    assert got == pytest.approx(expected, rel=1e-12)
    flat = cp.full(k * d + 1, cp.nan, dtype=dtype)
    off = flat[1:].reshape(k, d)  # 4 or 8 bytes past the allocation's alignment
    off[...] = cp.asarray(C)
    assert inertia(X_dev, w_dev, off, labels_dev) == got
    assert inertia(X_dev, w_dev, cp.asarray(C), labels_dev) == got
    # a fit's end: the same inertia and the distinct labels in one readback, empty
    # clusters among them (the even labels alone, and k + 3 clusters)
    assert inertia_and_distinct(X_dev, w_dev, cp.asarray(C), labels_dev, k) == (
        got, len(np.unique(labels)))
    even = labels & ~1
    total, distinct = inertia_and_distinct(X_dev, w_dev, cp.asarray(C), cp.asarray(even), k + 3)
    assert (total, distinct) == (inertia(X_dev, w_dev, cp.asarray(C), cp.asarray(even)),
                                 len(np.unique(even)))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("n", "d", "offset"), [(1, 1, 0.0), (257, 1, 0.0), (4_000_001, 3, 1e4),
                                                (1000, 70_000, -5.0), (17_695, 18, 0.0)])
def test_column_means_equal_numpy(cp, n, d, offset, dtype, rng):
    """The validation's column means (its NaN/inf check and the fit's centring mean)."""
    from gpumine.adapters.column_stats import column_means

    X = (rng.normal(size=(n, d)) * 3.0 + offset).astype(dtype)
    expected = X.astype(np.float64).mean(axis=0)
    for layout in (_device_columns(cp, X), cp.asarray(X)):  # column-major, and C order
        got = cp.asnumpy(column_means(layout))
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12 * (1 + abs(offset)))
        assert np.array_equal(cp.asnumpy(column_means(layout)), got)  # the same bits again


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("n", "d"), [(1, 16), (1, 100), (33, 17), (1000, 128), (100_003, 33),
                                      (65, 5), (31, 1), (4097, 16), (1001, 8), (70, 12)])
def test_column_major_equals_the_transposed_copy(cp, n, d, dtype, rng):
    """column_major: a row-major X of 8 features or more through the tiles (n and d not
    multiples of 32, one row), fewer by CuPy's copy: X's values in a (d, n) C-contiguous
    buffer; a column-major X comes back as it is, any other layout copied."""
    from gpumine.adapters.column_stats import column_major

    X = cp.asarray(rng.normal(size=(n, d)).astype(dtype))
    got = column_major(X)
    assert got.shape == (n, d) and got.T.flags.c_contiguous and got.dtype == X.dtype
    assert bool(cp.array_equal(got, X))
    assert column_major(got) is got
    strided = X[::2]
    assert bool(cp.array_equal(column_major(strided), strided))


@pytest.mark.slow
def test_column_major_past_two_to_the_31_elements(cp):
    """The tiles' indices in 64 bits: a float32 X of 67,108,897 x 33 (2.2e9 elements; 8.9 GB,
    twice over), every element compared."""
    n, d = 67_108_897, 33
    if cp.cuda.Device().mem_info[0] < 2.2 * n * d * 4:
        pytest.skip("not enough free GPU memory for two copies of X")
    from gpumine.adapters.column_stats import column_major

    X = cp.random.default_rng(0).random((n, d), dtype=cp.float32)
    got = column_major(X)
    assert bool(cp.array_equal(got, X))
    assert float(got[-1, -1]) == float(X[-1, -1])  # sync: a test's check


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("n", "d"), [(1001, 37), (1, 1), (5000, 3), (3, 70_000)])
@pytest.mark.parametrize("order", ["C", "F"])
def test_shift_rows_equals_the_broadcast(cp, order, n, d, dtype, rng):
    """shift_rows (the fit's centring) and minus_row (a streamed chunk's) through the (d, n)
    buffer of a column-major X (its own kernel, features past grid.y included): the
    broadcast's bits, both ways round, subnormal values too, X's layout kept."""
    from gpumine.kmeans.lloyd import minus_row, shift_rows

    host = rng.normal(size=(n, d)) * 1e3
    tiny = np.finfo(dtype).tiny
    host[::7, 0] = 3 * tiny / 4  # subnormal, and so is its difference with by[0]
    X = cp.asarray(np.asarray(host.astype(dtype), order=order))
    by = rng.normal(size=d)
    by[0] = tiny / 2
    by = cp.asarray(by.astype(dtype))
    want = X - by
    shift_rows(X, by, -1)
    assert bool(cp.array_equal(X, want))
    shift_rows(X, by, +1)
    assert bool(cp.array_equal(X, want + by))
    got = minus_row(X, by)  # a new array (the streamed fit's chunks), X's layout
    assert bool(cp.array_equal(got, X - by)) and got.flags.f_contiguous == X.flags.f_contiguous


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_the_column_means_check_rejects_nan_and_inf_and_not_overflow(cp, bad):
    """A NaN/inf anywhere (one value in the last row of the last feature, past a block) is
    refused; finite float64 data whose sums overflow is not (it comes without means)."""
    from gpumine.adapters import as_columns
    from gpumine.backend import get_backend

    X = np.random.default_rng(0).normal(size=(70_001, 3))
    X[-1, -1] = bad
    with pytest.raises(InvalidInputError, match="NaN or infinity"):
        GPUKMeans(2, device="gpu").fit(cp.asarray(X))
    with pytest.raises(InvalidInputError, match="NaN or infinity"):
        GPUKMeans(2, device="gpu").fit(X)  # host data: checked on the device after the copy
    X[-1, -1] = 0.0
    checked = as_columns(cp.asarray(X), backend=get_backend("gpu"))
    np.testing.assert_allclose(cp.asnumpy(checked.means), X.mean(axis=0), rtol=1e-12)
    huge = np.full((1000, 2), 1.5e308)  # finite; the float64 sum of a column is not
    assert as_columns(cp.asarray(huge), backend=get_backend("gpu")).means is None


@pytest.mark.slow
@pytest.mark.parametrize("n", [5000, 50000])
@pytest.mark.parametrize("name", UPDATES)
def test_update_seed004_grid(cp, name, n, rng):
    """Seed 004's grid: uniform data, d = 32, k = 2 ... 32768."""
    X = rng.random_sample((n, 32)).astype(np.float32)
    weight = np.ones(n, dtype=np.float32)
    for k in [2**p for p in range(1, 16)]:
        labels = rng.randint(0, k, size=n).astype(np.int32)
        _check_update(cp, name, X, labels, weight, k)


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("name", ["gm-cl", "gm-dl", "sm-cl", "sm-dl"])
def test_lock_kernels_finish_under_full_contention(cp, name, rng):
    """k = 1 with 10^6 points: every thread wants the same lock."""
    X = rng.random_sample((1_000_000, 4)).astype(np.float32)
    _check_update(cp, name, X, np.zeros(len(X), dtype=np.int32), np.ones(len(X), np.float32), 1)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("n", "d", "k"), [(1, 1, 1), (300, 1, 5), (5000, 3, 2), (4099, 300, 17),
                                           (2000, 8, 2000), (50000, 32, 2048),
                                           # 128-thread blocks; d past a vector's end
                                           (20000, 18, 128), (17695, 31, 33),
                                           # two points per thread (n >= 2^19, d >= 8), n odd
                                           (525_289, 12, 37), (600_001, 32, 9)])
@pytest.mark.parametrize("name", EXACT_ASSIGNS)
def test_assign_matches_fp64_up_to_rounding(cp, name, n, d, k, dtype, rng):
    X = rng.normal(size=(n, d)).astype(dtype)
    centers = rng.normal(size=(k, d)).astype(dtype)
    labels = cp.full(n, -7, dtype=cp.int32)  # poison
    registry.load_strategy("kmeans.assign", name)(_device_columns(cp, X), cp.asarray(centers),
                                                  labels)
    got = cp.asnumpy(labels)
    assert got.min() >= 0 and got.max() < k
    X64, C64 = X.astype(np.float64), centers.astype(np.float64)
    d2 = (X64**2).sum(1)[:, None] - 2 * X64 @ C64.T + (C64**2).sum(1)[None, :]
    rows = np.arange(n)
    best = d2.argmin(1)
    gap = d2[rows, got] - d2[rows, best]
    # rounding bound of either formula in dtype: (d + 2) ulps of the terms' magnitude
    bound = 4 * (d + 2) * EPS[dtype] * ((X64**2).sum(1) + (C64**2).sum(1).max())
    assert np.all(gap <= bound), f"{np.sum(gap > bound)} labels beyond the rounding bound"


def test_assign_update_pairs_fit_like_cpu(rng):
    """Every assign x update pair fits well-separated blobs exactly like the CPU path."""
    centres = rng.uniform(-50, 50, size=(12, 5))
    X = (centres[rng.randint(0, 12, 30000)] + rng.normal(size=(30000, 5))).astype(np.float32)
    init = X[:12].copy()
    cpu = GPUKMeans(12, init=init, device="cpu").fit(X)
    for assign in EXACT_ASSIGNS:
        for update in UPDATES:
            gpu = GPUKMeans(12, init=init, device="gpu", assign=assign, update=update).fit(X)
            assert gpu.n_iter_ == cpu.n_iter_, (assign, update)
            _assert_labels_differ_only_at_near_ties(X, gpu.labels_, cpu.labels_,
                                                    gpu.cluster_centers_)
            assert gpu.inertia_ == pytest.approx(cpu.inertia_, rel=1e-5)
            assert gpu.device_ == "gpu"


def _assert_labels_differ_only_at_near_ties(X, labels, other, centers):
    """Points labelled differently must be (near-)equidistant from both centres in FP64.

    The CPU path iterates its centres in float64, the GPU path in the data's dtype, so
    the bound is float32 rounding of the distance terms plus of the centres themselves.
    """
    differ = np.flatnonzero(labels != other)
    x = X[differ].astype(np.float64)
    c = centers.astype(np.float64)
    d_mine = ((x - c[labels[differ]]) ** 2).sum(1)
    d_other = ((x - c[other[differ]]) ** 2).sum(1)
    scale = (x**2).sum(1) + (c**2).sum(1).max()
    bound = 8 * (X.shape[1] + 2) * EPS[np.float32] * scale
    assert np.all(np.abs(d_mine - d_other) <= bound), (differ.size, np.abs(d_mine - d_other).max())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("subset", ["color", "edge"])
def test_gpu_fit_matches_cpu_on_corel(subset, dtype, corel):
    X = corel(subset).astype(dtype)
    init = X[np.random.RandomState(0).choice(len(X), 16, replace=False)]
    cpu = GPUKMeans(16, init=init, device="cpu").fit(X)
    gpu = GPUKMeans(16, init=init, device="gpu").fit(X)
    assert gpu.n_iter_ == cpu.n_iter_
    _assert_labels_differ_only_at_near_ties(X, gpu.labels_, cpu.labels_, gpu.cluster_centers_)
    assert gpu.inertia_ == pytest.approx(cpu.inertia_, rel=1e-5)
    assert gpu.cluster_centers_.dtype == dtype


def test_gpu_init_and_predict(corel):
    X = corel("edge")
    a = GPUKMeans(16, random_state=0, device="gpu").fit(X)
    b = GPUKMeans(16, random_state=0, device="gpu").fit(X)
    np.testing.assert_array_equal(a.labels_, b.labels_)
    cpu_inertias = [GPUKMeans(16, random_state=s, device="cpu").fit(X).inertia_ for s in range(5)]
    assert a.inertia_ <= np.median(cpu_inertias) * 1.02
    np.testing.assert_array_equal(a.predict(X), a.labels_)
    assert a.transform(X).shape == (len(X), 16)
    random = GPUKMeans(16, init="random", n_init=3, random_state=0, device="gpu").fit(X)
    assert random.inertia_ > 0


def test_sort_update_is_bit_reproducible(cp, rng):
    X = rng.random_sample((200_000, 8)).astype(np.float32)
    labels = cp.asarray(rng.randint(0, 37, len(X)).astype(np.int32))
    update = registry.load_strategy("kmeans.update", "sort")
    outs = []
    for _ in range(3):
        sums, weights = cp.empty((37, 8)), cp.empty(37)
        update(_device_columns(cp, X), labels, cp.ones(len(X), cp.float32), sums, weights)
        outs.append(cp.asnumpy(sums))
    assert all(np.array_equal(outs[0], o) for o in outs[1:])


def test_irregular_reduction_counts_changed_points(cp, rng):
    X = rng.random_sample((5000, 4)).astype(np.float32)
    labels = rng.randint(0, 9, 5000).astype(np.int32)
    old = labels.copy()
    old[:123] = (old[:123] + 1) % 9
    update = registry.load_strategy("kmeans.update", "irregular-reduction")
    changed = update(_device_columns(cp, X), cp.asarray(labels), cp.ones(5000, cp.float32),
                     cp.empty((9, 4)), cp.empty(9), labels_old=cp.asarray(old))
    assert changed == 123


@pytest.mark.slow
def test_64bit_indexing_fit(cp):
    """n * d > 2**31 elements: 70M x 32 float32 with the default strategies."""
    n, d, k = 70_000_000, 32, 8
    X = np.random.default_rng(0).random((n, d), dtype=np.float32)
    assert n * d > 2**31
    model = GPUKMeans(k, max_iter=3, n_init=1, random_state=0, device="gpu", copy_x=False).fit(X)
    tail = slice(n - 100_000, n)
    X64 = X[tail].astype(np.float64)
    C64 = model.cluster_centers_.astype(np.float64)
    d2 = (X64**2).sum(1)[:, None] - 2 * X64 @ C64.T + (C64**2).sum(1)[None, :]
    got = model.labels_[tail]
    gap = d2[np.arange(len(got)), got] - d2.min(1)
    assert np.all(gap <= 4 * (d + 2) * EPS[np.float32] * ((X64**2).sum(1) + (C64**2).sum(1).max()))
    counts = np.bincount(model.labels_, minlength=k)
    assert counts.sum() == n and (counts > 0).all()


def test_compile_error_carries_the_nvrtc_log(tmp_path, monkeypatch):
    import gpumine.kernels as kernels
    from gpumine.exceptions import KernelCompileError

    (tmp_path / "broken.cu").write_text(
        "template <typename T> __global__ void broken(T* out) { out[0] = undeclared_name; }\n")
    monkeypatch.setattr(kernels, "KERNEL_DIR", tmp_path)
    monkeypatch.setattr(kernels, "_DECLARED", dict(kernels._DECLARED))  # keep the probe out
    with pytest.raises(KernelCompileError, match="undeclared_name") as info:
        kernels.get_kernel("broken.cu", "broken", np.float32)
    assert "broken<float>" in str(info.value)


def test_empty_cluster_relocation_on_the_device(rng):
    """Two init centres far from the data: both clusters empty after the first E-step."""
    X = rng.uniform(size=(5000, 3))
    init = X[:5].copy()
    init[3] = 50.0
    init[4] = 60.0
    cpu = GPUKMeans(5, init=init, n_init=1, device="cpu").fit(X)
    gpu = GPUKMeans(5, init=init, n_init=1, device="gpu").fit(X)
    assert len(np.unique(gpu.labels_)) == 5
    assert gpu.n_iter_ == cpu.n_iter_
    _assert_labels_differ_only_at_near_ties(X, gpu.labels_, cpu.labels_, gpu.cluster_centers_)
    assert gpu.inertia_ == pytest.approx(cpu.inertia_, rel=1e-5)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", ["one", "several", "zero_weight", "all_on_centres"])
def test_device_relocation_equals_the_host_one(cp, rng, dtype, case):
    """gpu.relocate_empty_clusters against lloyd.relocate_empty_clusters on NumPy copies."""
    from gpumine.kmeans import gpu, lloyd

    n, d, k = 3001, 5, 9  # n not a multiple of a block
    X = (rng.normal(size=(n, d)) + 1000.0).astype(dtype)  # far from the origin
    weight = rng.uniform(0.5, 2.0, n).astype(dtype)
    labels = rng.randint(0, k, n).astype(np.int32)
    empty = {"one": [4], "several": [0, 4, 8], "zero_weight": [2, 7],
             "all_on_centres": [1, 3]}[case]
    labels[np.isin(labels, empty)] = 5
    centers = (rng.normal(size=(k, d)) + 1000.0).astype(dtype)
    if case == "zero_weight":  # cluster 7 has points, but no weight: it counts as empty
        labels[:10] = 7
        weight[labels == 7] = 0
    if case == "all_on_centres":
        X = centers[labels]
    sums = np.zeros((k, d))
    np.add.at(sums, labels, (X * weight[:, None]).astype(np.float64))
    weights = np.bincount(labels, weights=weight.astype(np.float64), minlength=k)
    n_empty = int((weights == 0).sum())
    assert n_empty == len(empty)
    host_sums, host_weights = sums.copy(), weights.copy()
    lloyd.relocate_empty_clusters(X, weight, centers, host_sums, host_weights, labels)
    device_sums, device_weights = cp.asarray(sums), cp.asarray(weights)
    gpu.relocate_empty_clusters(_device_columns(cp, X), cp.asarray(weight), cp.asarray(centers),
                                device_sums, device_weights, cp.asarray(labels), n_empty)
    device_sums, device_weights = device_sums.get(), device_weights.get()
    if case == "all_on_centres":  # every distance is 0: nothing moves
        np.testing.assert_array_equal(device_sums, sums)
        np.testing.assert_array_equal(device_weights, weights)
        return
    assert (device_weights[empty] > 0).all()
    if n_empty == 1:  # one empty cluster: the farthest point, bit for bit as on the host
        np.testing.assert_array_equal(device_sums, host_sums)
        np.testing.assert_array_equal(device_weights, host_weights)
        return
    # Several: the same farthest points move (argpartition may list them in another order
    # on the device), each into one empty cluster, and the rest is as on the host.
    def moved(s, w):
        return sorted(map(tuple, (s[empty] / w[empty, None]).round(6)))

    assert moved(device_sums, device_weights) == moved(host_sums, host_weights)
    untouched = [c for c in range(k) if c not in empty]
    np.testing.assert_allclose(device_sums[untouched].sum(0), host_sums[untouched].sum(0),
                               rtol=1e-12)
    np.testing.assert_allclose(device_weights.sum(), host_weights.sum(), rtol=1e-12)


def test_gather_refuses_wide_data_before_the_fit():
    model = GPUKMeans(3, update="gather", device="gpu")
    with pytest.raises(InvalidParameterError, match="at most 32 features, got 33"):
        model.fit(np.random.RandomState(0).normal(size=(100, 33)))
    assert not hasattr(model, "labels_")
    narrow = GPUKMeans(3, update="gather", device="gpu", random_state=0).fit(
        np.random.RandomState(0).normal(size=(100, 32)))
    assert narrow.strategies_["update"] == "gather"


def test_average_centers_on_the_device_places_empty_clusters_as_on_the_host(cp):
    """lloyd.average_centers on CuPy arrays (its branch without a host read): the
    quotients where the weight is positive, the heaviest cluster's centre where it is not
    (scikit-learn's rule, as on the host), in the centres' dtype; and with no empty
    cluster, the quotients alone."""
    from gpumine.kmeans.lloyd import average_centers

    sums = np.array([[2.0, 4.0], [0.0, 0.0], [10.0, -5.0], [3.0, 3.0], [0.0, 0.0]])
    weights = np.array([2.0, 0.0, 5.0, 3.0, -0.0])
    expected = average_centers(sums, weights, np.float32)
    np.testing.assert_array_equal(expected[[1, 4]], [[2.0, -1.0], [2.0, -1.0]])
    got = average_centers(cp.asarray(sums), cp.asarray(weights), np.float32)
    assert got.dtype == np.float32 and got.shape == (5, 2)
    np.testing.assert_array_equal(cp.asnumpy(got), expected)
    full = average_centers(cp.asarray(sums[[0, 2]]), cp.asarray(weights[[0, 2]]), np.float64)
    np.testing.assert_array_equal(cp.asnumpy(full), [[1.0, 2.0], [2.0, -1.0]])


def test_fits_reuse_the_memory_pools_blocks(cp, rng):
    """Graph captures run on one stream per thread and device, kept: fit after fit CuPy's
    pool (which keeps freed blocks per stream) finds the last fit's blocks, so it holds no
    more after four fits than after one; another thread gets a stream of its own."""
    import threading

    from gpumine.kmeans.gpu import capture_stream

    X = cp.asarray(rng.normal(size=(300_000, 32)).astype(np.float32))
    pool = cp.get_default_memory_pool()
    model = GPUKMeans(64, n_init=1, max_iter=4, tol=0.0, random_state=0, assign="tc-exact",
                      device="gpu")
    model.fit(X)
    held = pool.total_bytes()
    for _ in range(3):
        model.fit(X)
    assert pool.total_bytes() == held
    stream = capture_stream()
    assert capture_stream() is stream and stream.ptr != 0
    other = []
    thread = threading.Thread(target=lambda: other.append(capture_stream()))
    thread.start()
    thread.join()
    assert other[0] is not stream
