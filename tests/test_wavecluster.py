"""WaveCluster: scikit-learn compliance, quality on the shapes, bad input."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.metrics import adjusted_rand_score
from sklearn.utils.estimator_checks import parametrize_with_checks

from gpumine import WaveCluster
from gpumine.datasets import read_arff_points
from gpumine.exceptions import (
    BackendUnavailable,
    GpumineError,
    InvalidParameterError,
    UnknownStrategy,
)

CLUTO = ["cluto-t4-8k", "cluto-t7-10k"]
OTHERS = ["aggregation", "compound", "jain", "3-spiral", "atom", "chainlink", "hepta"]


EXPECTED_FAILURES = {
    "check_sample_weight_equivalence_on_dense_data":
        "the check uses 30 features: a 4^30-cell grid cannot exist, so fit raises MemoryError "
        "(weights do equal repetition: test_sample_weight_equals_repetition)",
}


@parametrize_with_checks([WaveCluster(device="cpu")],
                         expected_failed_checks=lambda est: EXPECTED_FAILURES)
def test_sklearn_compatible(estimator, check):
    check(estimator)


def _shape(shared_datasets, name):
    return read_arff_points(shared_datasets / "shapes" / f"{name}.arff")


def _ari(shared_datasets, name, **params):
    X, y, _ = _shape(shared_datasets, name)
    labels = WaveCluster(device="cpu", **params).fit_predict(X)
    return adjusted_rand_score(y, labels)  # noise (-1) counts as a label of its own


def _blobs_with_noise(d, seed):
    """Three well-separated Gaussian blobs and 10 % uniform noise in [0, 1]^d (generated)."""
    rng = np.random.default_rng(seed)
    centres = rng.uniform(0.2, 0.8, size=(3, d))
    while min(np.linalg.norm(a - b) for i, a in enumerate(centres) for b in centres[i + 1:]) < 0.3:
        centres = rng.uniform(0.2, 0.8, size=(3, d))
    y = rng.integers(0, 3, 6000)
    X = centres[y] + rng.normal(scale=0.03, size=(6000, d))
    return (np.concatenate([X, rng.uniform(size=(600, d))]),
            np.concatenate([y, np.full(600, -1)]))


@pytest.mark.parametrize("d", [2, 3])
@pytest.mark.parametrize("seed", [0, 1])
def test_quality_on_generated_blobs_with_noise(d, seed, record_property):
    X, y = _blobs_with_noise(d, seed)
    wc = WaveCluster(device="cpu").fit(X)
    score = adjusted_rand_score(y, wc.labels_)
    record_property("ari", score)
    assert wc.n_clusters_ == 3 and score >= 0.9, (wc.n_clusters_, score)


@pytest.mark.parametrize("name", CLUTO)
def test_quality_on_cluto_with_defaults(name, shared_datasets, record_property):
    score = _ari(shared_datasets, name)
    record_property("ari", score)
    assert score >= 0.85, score


def test_quality_on_the_other_shapes_with_defaults(shared_datasets, record_property):
    scores = {name: _ari(shared_datasets, name) for name in OTHERS}
    record_property("ari", scores)
    assert np.mean(list(scores.values())) >= 0.85, scores


def test_fitted_attributes_and_predict():
    X, _ = _blobs_with_noise(2, 5)
    wc = WaveCluster(device="cpu").fit(X)
    assert wc.labels_.dtype == np.int32 and wc.labels_.min() == -1  # KMeans's label type
    assert wc.grid_labels_.dtype == np.int32 and wc.predict(X).dtype == np.int32
    sizes = np.bincount(wc.labels_[wc.labels_ >= 0])
    assert len(sizes) == wc.n_clusters_ and np.all(np.diff(sizes) <= 0)  # ids by size
    np.testing.assert_array_equal(wc.predict(X), wc.labels_)
    assert wc.grid_labels_.max() == wc.n_clusters_ - 1
    assert wc.bounds_.shape == (2, 2) and wc.threshold_ > 0
    outside = wc.bounds_[1] + 1.0
    assert wc.predict(outside[None, :]).tolist() == [-1]
    # min_cluster_size turns small components into noise
    strict = WaveCluster(device="cpu", min_cluster_size=len(X)).fit(X)
    assert strict.n_clusters_ == 0 and (strict.labels_ == -1).all()


@pytest.mark.parametrize("wavelet", ["haar", "bior2.2"])
def test_two_blobs_every_wavelet_and_label(wavelet, rng):
    X = np.vstack([rng.normal(0, 0.3, (400, 2)), rng.normal(6, 0.3, (400, 2))])
    for label in ["scipy", "union-find"]:
        for connectivity in (1, 2):
            wc = WaveCluster(device="cpu", wavelet=wavelet, label=label,
                             connectivity=connectivity).fit(X)
            assert wc.n_clusters_ == 2
            truth = np.repeat([0, 1], 400)
            assert adjusted_rand_score(truth, wc.labels_) > 0.9


def test_sample_weight_equals_repetition(rng):
    X = np.vstack([rng.normal(0, 0.3, (200, 2)), rng.normal(4, 0.3, (200, 2))])
    w = rng.randint(1, 3, len(X))
    weighted = WaveCluster(device="cpu").fit(X, sample_weight=w)
    repeated = WaveCluster(device="cpu").fit(np.repeat(X, w, axis=0))
    np.testing.assert_array_equal(weighted.grid_labels_, repeated.grid_labels_)


def test_pandas_feature_names_and_clone():
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame({"x": np.r_[np.zeros(50), np.ones(50) * 9] + np.linspace(0, 1, 100),
                       "y": np.linspace(0, 3, 100)})
    wc = WaveCluster(device="cpu").fit(df)
    assert wc.feature_names_in_.tolist() == ["x", "y"]
    twin = clone(wc).set_params(levels=2)
    assert twin.get_params()["levels"] == 2 and not hasattr(twin, "labels_")


@pytest.mark.parametrize(("data", "params", "error", "match"), [
    (np.array([[np.nan, 1.0], [2.0, 3.0]]), {}, ValueError, "NaN"),
    (np.c_[np.arange(10.0), np.ones(10)], {}, ValueError, "#1 has no spread"),
    (np.random.RandomState(0).rand(50, 2), {"grid_size": 10**6}, MemoryError, "GiB"),
    (np.random.RandomState(0).rand(50, 2), {"grid_size": 8, "levels": 3}, ValueError,
     "vanishes"),
    (np.random.RandomState(0).rand(400, 12), {"grid_size": 64}, MemoryError, "12 features"),
    (np.random.RandomState(0).rand(50, 2), {"connectivity": 3}, ValueError, "1..2"),
    (np.random.RandomState(0).rand(50, 2), {"wavelet": "db4"}, UnknownStrategy, "haar"),
    (np.random.RandomState(0).rand(50, 2), {"label": "nope"}, UnknownStrategy, "union-find"),
    (np.random.RandomState(0).rand(50, 2), {"levels": 0}, ValueError, "levels"),
    (np.random.RandomState(0).rand(50, 2), {"grid_size": (8, 8, 8)}, ValueError, "3 entries"),
    (np.ones((1, 2)), {}, ValueError, "1 sample"),
    (np.random.RandomState(0).rand(50, 2), {"threshold": -1}, InvalidParameterError, ">= 0"),
    (np.random.RandomState(0).rand(50, 2), {"levels": True}, InvalidParameterError, "levels"),
    (np.random.RandomState(0).rand(50, 2), {"grid_size": 2.5}, InvalidParameterError,
     "grid_size must be 'auto', an integer"),
    (np.random.RandomState(0).rand(50, 2), {"levels": 14}, MemoryError,
     "levels=14 with grid_size='auto'.*use fewer levels"),
    (np.random.RandomState(0).rand(50, 2), {"bounds": [[np.nan, 0.0], [1.0, 1.0]]},
     InvalidParameterError, "bounds must be finite; they hold NaN"),
    (np.random.RandomState(0).rand(50, 2), {"bounds": [[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]]},
     InvalidParameterError, r"bounds must have shape \(2, 2\)"),
])
def test_bad_input(data, params, error, match):
    wc = WaveCluster(device="cpu", **params)
    with pytest.raises(error, match=match) as info:
        wc.fit(data)
    if error is not MemoryError:
        assert isinstance(info.value, GpumineError) or error is ValueError
    assert not hasattr(wc, "labels_") and not hasattr(wc, "n_features_in_")


def test_device_gpu_without_gpu_is_clear(monkeypatch):
    import sys

    from gpumine import backend

    monkeypatch.setitem(sys.modules, "cupy", None)
    backend._probe_gpu.cache_clear()
    try:
        wc = WaveCluster(device="gpu")
        with pytest.raises(BackendUnavailable, match="cuda12"):
            wc.fit(np.random.RandomState(0).rand(20, 2))
        assert not hasattr(wc, "labels_")
    finally:
        backend._probe_gpu.cache_clear()


@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_compared_with_dbscan_and_hdbscan(shared_datasets, capsys):
    """The README's table: WaveCluster (defaults) beside DBSCAN (best of an eps grid) and
    HDBSCAN (defaults); on the noisy cluto sets WaveCluster must beat both."""
    from sklearn.cluster import DBSCAN, HDBSCAN

    lines = []
    for name in CLUTO + OTHERS:
        X, y, _ = _shape(shared_datasets, name)
        ours = adjusted_rand_score(y, WaveCluster(device="cpu").fit_predict(X))
        diagonal = np.linalg.norm(X.max(0) - X.min(0))
        dbscan = max(adjusted_rand_score(y, DBSCAN(eps=f * diagonal).fit_predict(X))
                     for f in (0.005, 0.01, 0.02, 0.03, 0.05, 0.08))
        hdbscan = adjusted_rand_score(y, HDBSCAN().fit_predict(X))
        lines.append(f"{name:14s} WaveCluster {ours:.3f}  DBSCAN {dbscan:.3f}  "
                     f"HDBSCAN {hdbscan:.3f}")
        if name in CLUTO:
            assert ours > max(dbscan, hdbscan), lines[-1]
    with capsys.disabled():
        print("\n" + "\n".join(lines))


def test_auto_threshold_removes_a_percolating_background():
    """4 Gaussian blobs in 20 % uniform noise, 4-d: the noise cells touch one another and
    join everything at one point per cell; the automatic threshold rises past them."""
    from gpumine.datasets import make_shape_sets

    X, y = make_shape_sets(random_state=0)["blobs-noise20-d4"]
    model = WaveCluster(device="cpu").fit(X)
    assert model.n_clusters_ == 4
    assert adjusted_rand_score(y, model.labels_) > 0.9
    at_one_point = WaveCluster(device="cpu", threshold=0.5 * model.threshold_ / 1.5).fit(X)
    assert at_one_point.n_clusters_ == 1  # what the previous rule gave: one cluster


def test_auto_threshold_keeps_every_occupied_cell_without_a_background():
    """Clean shapes and pure noise keep the one-point level: sparse clusters are not cut,
    and the clumps of a uniform background are not taken for clusters (specks near a
    cluster may join it; every point of the one-point level's clusters keeps its cluster)."""
    rng = np.random.RandomState(0)
    noise = rng.uniform(size=(10_000, 3))
    model = WaveCluster(device="cpu").fit(noise)
    grid = WaveCluster(device="cpu", threshold=1e-300).fit(noise)
    assert model.n_clusters_ == grid.n_clusters_ <= 1
    moons = np.vstack([np.column_stack([np.cos(t), np.sin(t)]) + d
                       + rng.normal(0, 0.05, (300, 2))
                       for t, d in ((rng.uniform(0, np.pi, 300), 0),
                                    (rng.uniform(np.pi, 2 * np.pi, 300), [1, 0.4]))])
    model = WaveCluster(device="cpu").fit(moons)
    assert model.n_clusters_ >= 2
    every_cell = WaveCluster(device="cpu", threshold=1e-300).fit(moons).labels_
    kept = every_cell >= 0
    assert np.array_equal(model.labels_[kept], every_cell[kept])


@pytest.mark.parametrize("name", ["moons", "blobs-noise20-d3", "blobs-noise20-d6", "tori-3d"])
def test_auto_threshold_fit_equals_a_fit_given_the_threshold_it_chose(name, monkeypatch):
    """The base rule hands back the labelling of the level it chose: the same as labelling
    anew (the split step, the next level, the border cells and the specks, switched off here,
    are tested in test_wavecluster_hierarchy.py and test_wavecluster_levels.py)."""
    from gpumine.datasets import make_shape_sets
    from gpumine.wavecluster import engine, hierarchy

    X, _ = make_shape_sets(scale=0.5, random_state=1)[name]
    monkeypatch.setattr(hierarchy, "AUTO_SPLIT_PERSISTENCE", 10 ** 6)
    monkeypatch.setattr(engine, "AUTO_BORDER_CONNECTIVITY", 0)
    monkeypatch.setattr(engine, "AUTO_SPECK_STEPS", 0)
    monkeypatch.setattr(engine, "AUTO_COARSER_LEVELS", 0)
    auto = WaveCluster(device="cpu").fit(X)
    given = WaveCluster(device="cpu", threshold=auto.threshold_).fit(X)
    assert np.array_equal(auto.labels_, given.labels_)
    assert np.array_equal(auto.grid_labels_, given.grid_labels_)


@pytest.mark.parametrize(("d", "expected"), [(2, 2), (3, 3), (4, 2), (6, 2)])
def test_default_connectivity_is_full_up_to_3_features_then_2(d, expected):
    """connectivity=None: all 3^d - 1 neighbours up to d = 3, then cells that differ in at
    most two coordinates (engine.auto_connectivity says why)."""
    X, _ = _blobs_with_noise(d, 0)
    default = WaveCluster(device="cpu").fit(X)
    given = WaveCluster(device="cpu", connectivity=expected).fit(X)
    np.testing.assert_array_equal(default.labels_, given.labels_)
    if d >= 4:  # and it is not the full neighbourhood: that labels the grid differently
        full = WaveCluster(device="cpu", connectivity=d).fit(X)
        assert not np.array_equal(full.grid_labels_, default.grid_labels_)


def test_streamed_fit_equals_the_in_memory_one(tmp_path):
    """batch_rows and a Parquet dataset: the same grid, labels and threshold."""
    import pyarrow as pa
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    X, _ = _blobs_with_noise(3, 1)
    memory = WaveCluster(device="cpu").fit(X)
    streamed = WaveCluster(device="cpu", batch_rows=777).fit(X)
    np.testing.assert_array_equal(streamed.labels_, memory.labels_)
    np.testing.assert_array_equal(streamed.grid_labels_, memory.grid_labels_)
    assert streamed.threshold_ == memory.threshold_ and streamed.n_clusters_ == 3
    for i, part in enumerate(np.array_split(X, 3)):
        pq.write_table(pa.table({f"x{j}": part[:, j] for j in range(3)}),
                       tmp_path / f"{i}.parquet", row_group_size=1000)
    dataset = ds.dataset(sorted(tmp_path.glob("*.parquet")), format="parquet")
    from_files = WaveCluster(device="cpu", batch_rows=500).fit(dataset)
    np.testing.assert_array_equal(from_files.labels_, memory.labels_)
    assert list(from_files.feature_names_in_) == ["x0", "x1", "x2"]
    weighted = WaveCluster(device="cpu", batch_rows=1000).fit(X, sample_weight=np.full(len(X), 2))
    np.testing.assert_array_equal(weighted.labels_,
                                  WaveCluster(device="cpu").fit(X, sample_weight=np.full(
                                      len(X), 2)).labels_)
    with pytest.raises(InvalidParameterError, match="batch_rows"):
        WaveCluster(device="cpu", batch_rows=0).fit(X)


def test_one_feature_clusters_are_found_whole():
    """With one feature the automatic grid is coarser (engine.auto_grid_shape): three
    clumps of different widths in 20 % uniform noise on a line come out as three clusters,
    not a dozen fragments."""
    from sklearn.metrics import adjusted_rand_score

    rng = np.random.default_rng(0)
    X = np.concatenate([rng.normal(0, 0.3, 2000), rng.normal(3, 0.5, 1500),
                        rng.normal(6, 0.2, 500), rng.uniform(-2, 8, 1000)])[:, None]
    y = np.repeat([0, 1, 2, -1], [2000, 1500, 500, 1000])
    model = WaveCluster(device="cpu").fit(X)
    assert model.grid_shape_ == (200,)
    assert model.n_clusters_ == 3
    assert adjusted_rand_score(y, model.labels_) > 0.7
