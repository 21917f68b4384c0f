"""The Lloyd engine and the NumPy reference strategies against brute-force FP64."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from gpumine import GPUKMeans
from gpumine.kmeans import init as init_strategies
from gpumine.kmeans import lloyd
from gpumine.kmeans.reference import assign_numpy, update_numpy

SHAPES = [  # (n, d, k): k=1, k=n, d=1, large d, n not a multiple of any block
    (1, 1, 1), (7, 1, 3), (1000, 3, 1), (1000, 3, 1000), (1537, 300, 17), (4099, 2, 64),
    (20000, 5, 300),
]


def _brute_force_labels(X, centers):
    d = ((X.astype(np.float64)[:, None, :] - centers.astype(np.float64)[None]) ** 2).sum(-1)
    return d, np.argmin(d, axis=1)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("n", "d", "k"), SHAPES)
def test_reference_assign(n, d, k, dtype, rng):
    X = rng.normal(size=(n, d)).astype(dtype)
    centers = rng.normal(size=(k, d)).astype(dtype)
    labels = np.full(n, -7, dtype=np.int32)  # poison
    assign_numpy(X, centers, labels)
    distances, expected = _brute_force_labels(X, centers)
    assert labels.min() >= 0
    chosen = distances[np.arange(n), labels]
    best = distances[np.arange(n), expected]
    # ||c||^2 - 2x.c in float64 may flip only genuine ties at the 1e-12 level
    np.testing.assert_allclose(chosen, best, rtol=1e-12, atol=1e-12 * (1 + best.max()))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("n", "d", "k"), SHAPES)
def test_reference_update(n, d, k, dtype, rng):
    X = rng.normal(size=(n, d)).astype(dtype)
    labels = rng.randint(0, k, size=n).astype(np.int32)
    if k > 2:
        labels[labels == 1] = 0  # cluster 1 empty
    weight = rng.uniform(0.1, 3, size=n).astype(dtype)
    sums = np.full((k, d), np.nan, dtype=dtype)  # poison
    weights = np.full(k, np.nan, dtype=dtype)
    update_numpy(X, labels, weight, sums, weights)
    expected_sums = np.zeros((k, d))
    expected_weights = np.zeros(k)
    for i in range(n):
        expected_sums[labels[i]] += X[i].astype(np.float64) * float(weight[i])
        expected_weights[labels[i]] += float(weight[i])
    rtol = 1e-6 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(weights, expected_weights, rtol=rtol)
    assert np.linalg.norm(sums - expected_sums) <= rtol * max(1.0, np.linalg.norm(expected_sums))


def test_inertia_is_direct_and_weighted(rng):
    X = rng.normal(size=(500, 4)) + 1e4  # far from 0: the expanded formula would cancel
    centers = X[:3] + 0.5
    labels = rng.randint(0, 3, 500).astype(np.int32)
    w = rng.uniform(size=500)
    expected = sum(w[i] * ((X[i] - centers[labels[i]]) ** 2).sum() for i in range(500))
    assert lloyd.inertia(X, w, centers, labels) == pytest.approx(expected, rel=1e-12)


def test_tolerance_scaled_by_mean_variance(rng):
    X = rng.normal(scale=[1.0, 3.0], size=(1000, 2))
    assert lloyd.tolerance(X, 1e-4) == pytest.approx(np.var(X, axis=0).mean() * 1e-4)
    assert lloyd.tolerance(X, 0) == 0


def test_relocation_takes_farthest_points(rng):
    X = np.array([[0.0], [1.0], [10.0], [20.0]])
    centers_old = np.array([[0.0], [100.0], [200.0]])
    labels = np.zeros(4, dtype=np.int32)
    w = np.array([1.0, 1.0, 2.0, 3.0])
    sums = np.zeros((3, 1))
    weights = np.zeros(3)
    update_numpy(X, labels, w, sums, weights)
    lloyd.relocate_empty_clusters(X, w, centers_old, sums, weights, labels)
    # the two farthest points (20 then 10) seed clusters 1 and 2; their weight moves
    assert weights.tolist() == [2.0, 3.0, 2.0]
    assert sums[:, 0].tolist() == [1.0, 60.0, 20.0]


def test_is_same_clustering():
    a = np.array([0, 0, 1, 2], dtype=np.int32)
    assert lloyd.is_same_clustering(a, np.array([2, 2, 0, 1]), 3)
    assert not lloyd.is_same_clustering(a, np.array([2, 1, 0, 1]), 3)


def test_kmeans_plusplus_properties(rng):
    X = np.concatenate([rng.normal(loc=c, scale=0.01, size=(200, 2)) for c in (0, 5, 10, 15)])
    norms = lloyd.squared_row_norms(X)
    w = np.ones(len(X))
    centers = init_strategies.kmeans_plusplus(X, 4, sample_weight=w, x_squared_norms=norms,
                                              random_state=np.random.RandomState(0))
    # centres are data points, one per well-separated blob
    assert all((X == c).all(1).any() for c in centers)
    assert sorted(np.round(centers[:, 0] / 5).astype(int).tolist()) == [0, 1, 2, 3]
    # a zero weight is never chosen
    w0 = np.ones(len(X))
    w0[:600] = 0
    for seed in range(5):
        c = init_strategies.kmeans_plusplus(X, 1, sample_weight=w0, x_squared_norms=norms,
                                            random_state=np.random.RandomState(seed))
        assert c[0, 0] > 12
        r = init_strategies.random_init(X, 3, sample_weight=w0, x_squared_norms=norms,
                                        random_state=np.random.RandomState(seed))
        assert (r[:, 0] > 12).all() and len(np.unique(r, axis=0)) == 3


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dtypes_preserved(dtype, rng):
    X = rng.uniform(size=(200, 3)).astype(dtype)
    model = GPUKMeans(4, random_state=0, device="cpu").fit(X)
    assert model.cluster_centers_.dtype == dtype
    assert model.labels_.dtype == np.int32
    assert model.predict(X).dtype == np.int32
    assert model.transform(X).dtype == dtype
    assert isinstance(model.inertia_, float)
    assert model.device_ == "cpu"
    from gpumine.kmeans.cpu_fast import available

    cpu = "numba" if available() else "numpy"
    assert model.strategies_ == {"init": "k-means++", "assign": cpu, "update": cpu}


def test_int_input_becomes_float64():
    X = np.array([[0, 0], [0, 1], [10, 10], [10, 11]])
    model = GPUKMeans(2, random_state=0, device="cpu").fit(X)
    assert model.cluster_centers_.dtype == np.float64


@pytest.mark.parametrize("copy_x", [True, False])
def test_copy_x(copy_x, rng):
    X = rng.uniform(size=(300, 2)) + 5
    original = X.copy()
    GPUKMeans(3, copy_x=copy_x, random_state=0, device="cpu").fit(X)
    np.testing.assert_allclose(X, original, rtol=0, atol=1e-12)


@pytest.mark.parametrize("kind", ["numpy", "fortran", "pandas", "arrow", "columns"])
def test_copy_x_leaves_every_input_as_it_was(kind, rng):
    """The fit's own copy is not shifted back; nothing the caller holds is left centred
    (validated Columns are the caller's buffer: shifted back)."""
    import pandas as pd
    import pyarrow as pa

    from gpumine.adapters import as_columns
    from gpumine.backend import get_backend

    X = rng.uniform(size=(300, 2)) + 5
    data = {"numpy": lambda: X.copy(), "fortran": lambda: np.asfortranarray(X),
            "pandas": lambda: pd.DataFrame(X, columns=["a", "b"]),
            "arrow": lambda: pa.table({"a": X[:, 0], "b": X[:, 1]}),
            "columns": lambda: as_columns(X.copy(), backend=get_backend("cpu"))}[kind]()
    reference = GPUKMeans(3, random_state=0, device="cpu").fit(X)
    model = GPUKMeans(3, random_state=0, device="cpu").fit(data)
    held = data.X if kind == "columns" else np.asarray(data)
    np.testing.assert_allclose(held, X, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(model.labels_, reference.labels_)


def test_verbose_prints_iterations(capsys, rng):
    X = rng.uniform(size=(300, 2))
    GPUKMeans(3, verbose=1, random_state=0, device="cpu").fit(X)
    out = capsys.readouterr().out
    assert "Initialization complete" in out
    assert "Iteration 0, inertia" in out
    assert "Converged at iteration" in out


def test_max_iter_bounds_n_iter(rng):
    X = rng.uniform(size=(2000, 2))
    model = GPUKMeans(50, max_iter=3, tol=0, random_state=0, device="cpu").fit(X)
    assert model.n_iter_ == 3
    # the final E-step makes labels_ consistent with the centres
    np.testing.assert_array_equal(model.predict(X), model.labels_)


def test_pandas_feature_names_and_set_output():
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame({"a": [0.0, 0.1, 5.0, 5.1], "b": [1.0, 1.1, 7.0, 7.2]})
    model = GPUKMeans(2, random_state=0, device="cpu").fit(df)
    assert model.feature_names_in_.tolist() == ["a", "b"]
    assert model.get_feature_names_out().tolist() == ["gpukmeans0", "gpukmeans1"]
    out = model.set_output(transform="pandas").transform(df)
    assert isinstance(out, pd.DataFrame)
    assert out.columns.tolist() == ["gpukmeans0", "gpukmeans1"]
    with pytest.warns(UserWarning, match="feature names"):
        model.predict(df.to_numpy())


def test_pickle_round_trip(rng):
    X = rng.uniform(size=(300, 3))
    model = GPUKMeans(3, random_state=0, device="cpu").fit(X)
    clone = pickle.loads(pickle.dumps(model))
    np.testing.assert_array_equal(clone.predict(X), model.predict(X))


def test_callable_init_receives_random_state(rng):
    X = rng.uniform(size=(100, 2))
    seen = []

    def my_init(X, n_clusters, random_state):
        seen.append(random_state)
        return X[random_state.choice(len(X), n_clusters, replace=False)]

    model = GPUKMeans(3, init=my_init, n_init=2, random_state=0, device="cpu").fit(X)
    assert len(seen) == 2 and isinstance(seen[0], np.random.RandomState)
    assert model.cluster_centers_.shape == (3, 2)


def test_explicit_init_with_n_init_warns(rng):
    X = rng.uniform(size=(100, 2))
    with pytest.warns(RuntimeWarning, match="performing only one init"):
        GPUKMeans(2, init=X[:2], n_init=5, device="cpu").fit(X)


@pytest.mark.parametrize("magnitude", [0.0, 1e-38, 1e-3, 1.0, 3.0e5, 1e30])
@pytest.mark.parametrize("n", [1, 2, 1000, 100_003])
def test_fixed_scales_keep_every_integer_sum_below_2_63(n, magnitude, rng):
    """update="atomic-fixed"'s quanta (computed on the host here, as on the device):
    n * max|x_j| * max|w| * 2^s_j at most 2^62 -- so n rounded products stay below 2^63 --
    and s_j the largest such (one more doubles it past 2^62); zero columns and weights
    get a finite scale."""
    from gpumine.kmeans.gpu import fixed_scales

    XT = rng.normal(size=(3, n)).clip(-2, 2) * magnitude
    XT[1] = 0.0
    XT[2, n // 2] = -2.5 * magnitude  # the largest magnitude negative
    weight = rng.uniform(0.5, 4.0, size=n)
    scales, unscales = fixed_scales(XT, weight)
    assert scales.shape == (4,) and np.isfinite(scales).all()
    np.testing.assert_array_equal(scales * unscales, 1.0)
    assert np.array_equal(np.log2(scales), np.round(np.log2(scales)))  # powers of two
    largest = np.append(np.abs(XT).max(axis=1) * weight.max(), weight.max()) * XT.shape[1]
    assert (largest * scales <= 2.0**62).all()
    nonzero = largest > 0
    assert (largest[nonzero] * scales[nonzero] * 2 > 2.0**62).all()
    assert np.log2(scales[1]) == 62  # a zero column: any scale works, this one is finite
