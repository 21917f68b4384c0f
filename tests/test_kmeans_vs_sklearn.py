"""GPUKMeans(device="cpu") against sklearn.cluster.KMeans(algorithm="lloyd").

float64: from the same init array, identical labels, equal n_iter_, inertia within 1e-6.

float32: gpumine keeps float32 data and centres but accumulates distances and
sums in float64; scikit-learn accumulates in float32, and on long runs its
trajectory depends on its thread count (on make_uniform(100000, 8), k=100, it
stops after 167 iterations with 2 OpenMP threads and 188 with 1). So a full
float32 fit is compared with scikit-learn's exact (float64) run on the same
values: identical labels, equal n_iter_, inertia within 1e-5. One E-step is
compared with scikit-learn's float32 predict from the same centres: labels may
differ only where the two best distances are closer than the float32 rounding
bound, and the test reports how many do.
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.cluster import KMeans

from gpumine import GPUKMeans
from gpumine.datasets import make_uniform

EPS32 = float(np.finfo(np.float32).eps)


def _blobs():
    """17,695 x 12 float32 points around 40 centres: Corel-sized clustered data, generated."""
    rng = np.random.default_rng(17695)
    centres = rng.uniform(-5, 5, size=(40, 12))
    return (centres[rng.integers(0, 40, 17695)] + rng.normal(size=(17695, 12))).astype(
        np.float32)


def _data(name, request):
    """Generated data always; the Corel subsets only where ../shared is (optional checks)."""
    if name == "uniform":
        return make_uniform(100_000, 8, random_state=5489)
    if name == "blobs":
        return _blobs()
    return request.getfixturevalue("corel")(name)


def _fit_pair(X, k, dtype, weighted, rng, ref_dtype=None):
    X = X.astype(dtype)
    init = X[rng.choice(X.shape[0], k, replace=False)]
    sample_weight = rng.uniform(0.5, 2.0, X.shape[0]).astype(dtype) if weighted else None
    ref_dtype = ref_dtype or dtype
    ours = GPUKMeans(k, init=init, n_init=1, device="cpu").fit(X, sample_weight=sample_weight)
    ref = KMeans(k, init=init.astype(ref_dtype), n_init=1, algorithm="lloyd").fit(
        X.astype(ref_dtype),
        sample_weight=None if sample_weight is None else sample_weight.astype(ref_dtype))
    return ours, ref


COREL = ("color", "edge")


def _param(*values):
    """A test case; those on the Corel subsets are optional checks (``shared_data``)."""
    marks = [pytest.mark.shared_data] if values[0] in COREL else []
    return pytest.param(*values, marks=marks)


CASES = [_param(name, k) for name in ("blobs", "uniform", *COREL) for k in (1, 8, 100)]


@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
@pytest.mark.parametrize(("dataset", "k"), CASES)
def test_float64_matches_sklearn_exactly(dataset, k, weighted, request, rng):
    ours, ref = _fit_pair(_data(dataset, request), k, np.float64, weighted, rng)
    assert ours.cluster_centers_.dtype == np.float64
    assert ours.labels_.dtype == np.int32
    np.testing.assert_array_equal(ours.labels_, ref.labels_)
    assert ours.n_iter_ == ref.n_iter_
    assert ours.inertia_ == pytest.approx(ref.inertia_, rel=1e-6)
    np.testing.assert_allclose(ours.cluster_centers_, ref.cluster_centers_, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
@pytest.mark.parametrize(("dataset", "k"), CASES)
def test_float32_fit_follows_the_exact_trajectory(dataset, k, weighted, request, rng,
                                                  record_property):
    ours, ref = _fit_pair(_data(dataset, request), k, np.float32, weighted, rng,
                          ref_dtype=np.float64)
    assert ours.cluster_centers_.dtype == np.float32
    n_differ = int((ours.labels_ != ref.labels_).sum())
    record_property("labels_differing", n_differ)
    assert n_differ == 0
    assert ours.n_iter_ == ref.n_iter_
    assert ours.inertia_ == pytest.approx(ref.inertia_, rel=1e-5)


@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
@pytest.mark.parametrize("dataset", [_param("blobs"), *map(_param, COREL)])
def test_float32_fit_matches_sklearn_float32_on_clustered_data(dataset, weighted, request, rng):
    """On clustered data (blobs, Corel) scikit-learn's float32 run is stable: match it directly."""
    ours, ref = _fit_pair(_data(dataset, request), 8, np.float32, weighted, rng)
    assert ours.n_iter_ == ref.n_iter_
    np.testing.assert_array_equal(ours.labels_, ref.labels_)
    assert ours.inertia_ == pytest.approx(ref.inertia_, rel=1e-5)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize(("dataset", "k"), CASES)
def test_float32_estep_differs_only_at_near_ties(dataset, k, request, rng, record_property):
    X = _data(dataset, request).astype(np.float32)
    centers = X[rng.choice(X.shape[0], k, replace=False)] + rng.normal(
        0, 1e-3, (k, X.shape[1])).astype(np.float32)
    ours = GPUKMeans(k, init=centers, n_init=1, max_iter=1, device="cpu").fit(X[:k])
    ours.cluster_centers_ = centers
    ref = KMeans(k, init=centers, n_init=1, max_iter=1).fit(X[:k])
    ref.cluster_centers_ = centers
    labels, ref_labels = ours.predict(X), ref.predict(X)
    differ = np.flatnonzero(labels != ref_labels)
    # Exact FP64 distances of the differing points to both choices.
    x = X[differ].astype(np.float64)
    c = centers.astype(np.float64)
    d_ours = ((x - c[labels[differ]]) ** 2).sum(1)
    d_ref = ((x - c[ref_labels[differ]]) ** 2).sum(1)
    assert np.all(d_ours <= d_ref), "gpumine picked a farther centre"
    # Rounding bound of ||c||^2 - 2 x.c in float32: (d + 2) ulps of its terms' magnitudes.
    bound = (X.shape[1] + 2) * EPS32 * ((x**2).sum(1) + (c**2).sum(1).max()) * 2
    gaps = d_ref - d_ours
    record_property("labels_differing", int(differ.size))
    print(f"{dataset} k={k}: {differ.size} of {X.shape[0]} labels differ from scikit-learn's "
          f"float32 E-step; largest gap {gaps.max() if differ.size else 0:.3g}")
    assert np.all(gaps <= bound)


def test_empty_cluster_relocation_matches_sklearn(rng):
    X = rng.uniform(size=(2000, 3))
    init = X[:4].copy()
    init[2] = 50.0  # far away: empty after the first E-step, so it gets relocated
    init[3] = 60.0
    ours = GPUKMeans(4, init=init, n_init=1, device="cpu").fit(X)
    ref = KMeans(4, init=init, n_init=1).fit(X)
    np.testing.assert_array_equal(ours.labels_, ref.labels_)
    assert ours.n_iter_ == ref.n_iter_
    assert ours.inertia_ == pytest.approx(ref.inertia_, rel=1e-12)
    assert len(np.unique(ours.labels_)) == 4


def test_more_clusters_than_distinct_points_matches_sklearn(rng):
    X = np.repeat(rng.uniform(size=(3, 2)), 4, axis=0)
    with pytest.warns(Warning, match="distinct clusters"):
        ours = GPUKMeans(5, init=X[[0, 4, 8, 1, 2]], n_init=1, device="cpu").fit(X)
    with pytest.warns(Warning, match="distinct clusters"):
        ref = KMeans(5, init=X[[0, 4, 8, 1, 2]], n_init=1).fit(X)
    np.testing.assert_array_equal(ours.labels_, ref.labels_)
    np.testing.assert_allclose(ours.cluster_centers_, ref.cluster_centers_)
    assert ours.inertia_ == pytest.approx(ref.inertia_, abs=1e-12)


def test_k_equals_n(rng):
    X = rng.normal(size=(30, 4))
    ours = GPUKMeans(30, init=X, n_init=1, device="cpu").fit(X)
    assert sorted(ours.labels_.tolist()) == list(range(30))
    assert ours.inertia_ == pytest.approx(0.0, abs=1e-20)


@pytest.mark.parametrize("init", ["random", "k-means++"])
def test_n_init_keeps_the_lowest_inertia(init, rng):
    X = rng.normal(size=(600, 2)) + rng.choice([-6, 0, 6], size=(600, 1))
    best = GPUKMeans(5, init=init, n_init=6, random_state=3, device="cpu").fit(X)
    singles = [GPUKMeans(5, init=init, n_init=1, random_state=s, device="cpu").fit(X).inertia_
               for s in range(6)]
    assert best.inertia_ <= min(singles) * (1 + 1e-9) or best.inertia_ <= np.median(singles)
    assert GPUKMeans(5, init=init, device="cpu").fit(X).n_iter_ >= 1


def test_n_init_auto_rule():
    import gpumine.kmeans.lloyd as lloyd

    seen = []
    real = lloyd.lloyd_single

    def spy(*args, **kwargs):
        seen.append(1)
        return real(*args, **kwargs)

    X = np.random.RandomState(0).uniform(size=(200, 2))
    for init, expected in [("random", 10), ("k-means++", 1), (X[:3], 1),
                           (lambda X, k, random_state: X[:k], 10)]:
        seen.clear()
        lloyd.lloyd_single = spy
        try:
            GPUKMeans(3, init=init, device="cpu").fit(X)
        finally:
            lloyd.lloyd_single = real
        assert len(seen) == expected, init


@pytest.mark.parametrize("dataset", [_param("blobs"), _param("edge")])
def test_kmeans_plusplus_quality(dataset, request):
    X = _data(dataset, request)
    ours = GPUKMeans(16, random_state=0, device="cpu").fit(X).inertia_
    theirs = [KMeans(16, random_state=s).fit(X).inertia_ for s in range(10)]
    assert ours <= np.median(theirs) * 1.02, (ours, np.median(theirs))


def test_random_state_reproducible():
    X = _blobs()
    a = GPUKMeans(8, random_state=0, device="cpu").fit(X)
    b = GPUKMeans(8, random_state=0, device="cpu").fit(X)
    np.testing.assert_array_equal(a.labels_, b.labels_)
    np.testing.assert_array_equal(a.cluster_centers_, b.cluster_centers_)
    c = GPUKMeans(8, random_state=1, device="cpu").fit(X)
    assert not np.array_equal(a.cluster_centers_, c.cluster_centers_)


def test_transform_score_and_predict_match_sklearn():
    X = _blobs().astype(np.float64)
    ours = GPUKMeans(8, random_state=0, device="cpu").fit(X)
    ref = KMeans(8, init=ours.cluster_centers_, n_init=1, max_iter=1).fit(X)
    ref.cluster_centers_ = ours.cluster_centers_
    np.testing.assert_allclose(ours.transform(X), ref.transform(X), rtol=1e-9, atol=1e-9)
    np.testing.assert_array_equal(ours.predict(X), ref.predict(X))
    w = np.linspace(0.1, 2, X.shape[0])
    assert ours.score(X, sample_weight=w) == pytest.approx(ref.score(X, sample_weight=w),
                                                           rel=1e-9)
    np.testing.assert_array_equal(ours.fit_predict(X), ours.labels_)
    assert ours.fit_transform(X).shape == (X.shape[0], 8)
