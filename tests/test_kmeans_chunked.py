"""Lloyd over chunks (gpumine.kmeans.chunked) against the in-memory loop, on the CPU."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from gpumine import registry
from gpumine.exceptions import InvalidInputError
from gpumine.kmeans import lloyd
from gpumine.kmeans.chunked import _reservoir, chunk_statistics, fit_lloyd_chunked

ASSIGN = registry.load_strategy("kmeans.assign", "numpy")
UPDATE = registry.load_strategy("kmeans.update", "numpy")


def _source(X, w, rows):
    """Chunks of ``rows`` rows (the last one shorter), as a stream would give them."""
    return lambda: ((X[i:i + rows], None if w is None else w[i:i + rows])
                    for i in range(0, len(X), rows))


def _blobs(rng, n=10_007, d=5, k=7, dtype=np.float64, offset=1000.0):
    centres = rng.uniform(-10, 10, size=(k, d))
    X = centres[rng.integers(0, k, n)] + rng.normal(size=(n, d)) + offset  # far from 0
    return X.astype(dtype)


def _both(X, w, init, rows, *, init_sample_size=100_000, **params):
    params = dict(n_clusters=len(init) if not callable(init) else params.pop("k"), init=init,
                  n_init=1, assign=ASSIGN, update=UPDATE, max_iter=params.pop("max_iter", 300),
                  tol=params.pop("tol", 1e-4), **params)
    weight = np.ones(len(X), dtype=X.dtype) if w is None else w
    memory = lloyd.fit_lloyd(X.copy(), weight, random_state=np.random.RandomState(3), **params)
    chunked = fit_lloyd_chunked(_source(X, w, rows), random_state=np.random.RandomState(3),
                                init_sample_size=init_sample_size, **params)
    return memory, chunked


def _assert_same(memory, chunked, rtol=1e-12):
    np.testing.assert_array_equal(chunked.labels, memory.labels)
    assert chunked.n_iter == memory.n_iter
    np.testing.assert_allclose(chunked.centers, memory.centers, rtol=rtol)
    assert chunked.centers.dtype == memory.centers.dtype
    assert chunked.inertia == pytest.approx(memory.inertia, rel=1e-10)


@pytest.mark.parametrize("rows", [1000, 333, 10_007, 1])
def test_chunked_fit_equals_the_in_memory_fit_from_the_same_init(rows):
    rng = np.random.default_rng(0)
    X = _blobs(rng, n=10_007 if rows > 1 else 301)
    init = X[rng.choice(len(X), 7, replace=False)]
    memory, chunked = _both(X, None, init, rows)
    assert memory.n_iter > 2  # the loop ran
    _assert_same(memory, chunked)


def test_weights_float32_and_tolerance():
    rng = np.random.default_rng(1)
    X = _blobs(rng, dtype=np.float32)
    w = rng.uniform(0.1, 3.0, len(X)).astype(np.float32)
    init = X[rng.choice(len(X), 7, replace=False)]
    for tol in (0.0, 1e-2):
        memory, chunked = _both(X, w, init, 777, tol=tol)
        # float32 data: the mean is accumulated differently (float64 over chunks against
        # NumPy's float32 pairwise sum), so the centred values differ in the last bits
        np.testing.assert_array_equal(chunked.labels, memory.labels)
        assert chunked.n_iter == memory.n_iter
        np.testing.assert_allclose(chunked.centers, memory.centers, rtol=1e-5)


def test_an_empty_cluster_is_relocated_as_in_memory():
    rng = np.random.default_rng(2)
    X = _blobs(rng, n=5003, k=4)
    init = np.vstack([X[rng.choice(len(X), 4, replace=False)], X.max(0) + 1e4])  # one far off
    memory, chunked = _both(X, None, init, 640)
    _assert_same(memory, chunked)
    assert np.bincount(chunked.labels, minlength=5).min() > 0  # the far centre got points


def test_kmeans_plusplus_on_a_sample_of_every_row_equals_in_memory():
    """With a sample at least as large as the data, the streamed init sees every row in
    order and draws nothing for the sample: k-means++ gives the in-memory centres."""
    rng = np.random.default_rng(4)
    X = _blobs(rng, n=3001)
    init = registry.load_strategy("kmeans.init", "k-means++")
    memory, chunked = _both(X, None, init, 500, k=6, init_sample_size=5000)
    _assert_same(memory, chunked)


def test_the_reservoir_sample_does_not_depend_on_the_chunking():
    rng = np.random.default_rng(5)
    X = rng.normal(size=(20_000, 3))
    samples = [_reservoir(_source(X, None, rows), 500, np.random.RandomState(7), np)[0]
               for rows in (1000, 777, 20_000)]
    for sample in samples[1:]:
        np.testing.assert_array_equal(sample, samples[0])
    assert len({tuple(row) for row in samples[0]}) == 500  # distinct rows of X
    rows = {tuple(row): i for i, row in enumerate(X)}
    picked = np.array([rows[tuple(row)] for row in samples[0]])
    assert picked.max() > 15_000 and picked.min() < 5_000  # drawn from the whole stream


def test_statistics_match_numpy_and_bad_chunks_are_refused():
    rng = np.random.default_rng(6)
    X = rng.normal(size=(4001, 4)) * [1, 10, 100, 1000] + 1e6
    sizes, dtype, mean, variance = chunk_statistics(_source(X, None, 999))
    assert sum(sizes) == 4001 and dtype == np.float64
    np.testing.assert_allclose(mean, X.mean(0), rtol=1e-13)  # summation order
    assert variance == pytest.approx(X.var(0).mean(), rel=1e-12)
    with pytest.raises(InvalidInputError, match="chunks differ"):
        chunk_statistics(lambda: iter([(X[:10], None), (X[:10, :3], None)]))
    with pytest.raises(InvalidInputError, match="no rows"):
        chunk_statistics(lambda: iter([(X[:0], None)]))


# -- the estimator: GPUKMeans(batch_rows=...) and pyarrow datasets ---------------------------
def _parquet_dataset(tmp_path, X, names=None, files=3, row_group=500):
    import pyarrow as pa
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    names = names or [f"x{j}" for j in range(X.shape[1])]
    folder = tmp_path / "data"
    folder.mkdir()
    for i, part in enumerate(np.array_split(np.arange(len(X)), files)):
        table = pa.table({name: X[part, j] for j, name in enumerate(names)})
        pq.write_table(table, folder / f"part-{i}.parquet", row_group_size=row_group)
    return ds.dataset(sorted(folder.glob("*.parquet")), format="parquet")


def test_estimator_streamed_by_batch_rows_equals_in_memory():
    from gpumine import GPUKMeans

    rng = np.random.default_rng(7)
    X = _blobs(rng, n=6007)
    w = rng.uniform(0.5, 2.0, len(X))
    init = X[rng.choice(len(X), 7, replace=False)]
    memory = GPUKMeans(7, init=init, device="cpu").fit(X, sample_weight=w)
    streamed = GPUKMeans(7, init=init, device="cpu", batch_rows=640).fit(X, sample_weight=w)
    np.testing.assert_array_equal(streamed.labels_, memory.labels_)
    assert streamed.n_iter_ == memory.n_iter_
    np.testing.assert_allclose(streamed.cluster_centers_, memory.cluster_centers_, rtol=1e-12)
    assert streamed.inertia_ == pytest.approx(memory.inertia_, rel=1e-10)
    assert streamed.get_params()["batch_rows"] == 640


def test_a_parquet_dataset_streams_and_predicts(tmp_path):
    from gpumine import GPUKMeans

    rng = np.random.default_rng(8)
    X = _blobs(rng, n=4001, d=3, k=5)
    dataset = _parquet_dataset(tmp_path, X, names=["a", "b", "c"])
    init = X[rng.choice(len(X), 5, replace=False)]
    memory = GPUKMeans(5, init=init, device="cpu").fit(X)
    streamed = GPUKMeans(5, init=init, device="cpu", batch_rows=700).fit(dataset)
    np.testing.assert_array_equal(streamed.labels_, memory.labels_)
    np.testing.assert_allclose(streamed.cluster_centers_, memory.cluster_centers_, rtol=1e-12)
    assert list(streamed.feature_names_in_) == ["a", "b", "c"]
    np.testing.assert_array_equal(streamed.predict(dataset), streamed.labels_)
    # k-means++ on a sample of the stream, seeded: reproducible, and as good as in memory
    first = GPUKMeans(5, device="cpu", random_state=0).fit(dataset)
    again = GPUKMeans(5, device="cpu", random_state=0, batch_rows=333).fit(dataset)
    np.testing.assert_allclose(first.cluster_centers_, again.cluster_centers_, rtol=1e-12)
    assert first.inertia_ <= 1.02 * GPUKMeans(5, device="cpu", random_state=0).fit(X).inertia_


def test_a_float32_dataset_gives_float32_centres(tmp_path):
    from gpumine import GPUKMeans

    X = _blobs(np.random.default_rng(9), n=900, d=2, k=3, dtype=np.float32)
    model = GPUKMeans(3, device="cpu", random_state=0).fit(_parquet_dataset(tmp_path, X))
    assert model.cluster_centers_.dtype == np.float32 and model.labels_.shape == (900,)


def test_bad_datasets_fail_before_any_compute(tmp_path):
    import pyarrow as pa
    import pyarrow.dataset as ds

    from gpumine import GPUKMeans

    text = ds.dataset(pa.table({"x": [1.0, 2.0, 3.0], "name": ["a", "b", "c"]}))
    with pytest.raises(InvalidInputError, match=r"'name'.*not a number"):
        GPUKMeans(2, device="cpu").fit(text)
    holes = ds.dataset(pa.table({"x": [1.0, 2.0, 3.0, None, 5.0]}))
    with pytest.raises(InvalidInputError, match=r"batch 1 \(rows 2 to 3\)"):
        GPUKMeans(2, device="cpu", batch_rows=2).fit(holes)
    numbers = ds.dataset(pa.table({"x": [1.0, 2.0, 3.0]}))
    with pytest.raises(InvalidInputError, match="n_samples=3 should be >= n_clusters=4"):
        GPUKMeans(4, device="cpu").fit(numbers)
    from gpumine.exceptions import InvalidParameterError

    with pytest.raises(InvalidParameterError, match="sample_weight"):
        GPUKMeans(2, device="cpu").fit(numbers, sample_weight=[1, 1, 1])
    with pytest.raises(InvalidParameterError, match="batch_rows"):
        GPUKMeans(2, device="cpu", batch_rows=0).fit(np.zeros((5, 1)))
    model = GPUKMeans(2, device="cpu").fit(np.arange(6.0).reshape(3, 2))
    with pytest.raises(InvalidInputError, match="features seen in fit"):
        model.predict(numbers)


def test_a_dataset_narrowed_by_schema_and_filter(tmp_path):
    """The README's way to choose columns and rows: a narrower schema and a filter."""
    import pyarrow as pa
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    from gpumine import GPUKMeans

    rng = np.random.default_rng(10)
    X = _blobs(rng, n=2000, d=2, k=3)
    pq.write_table(pa.table({"a": X[:, 0], "b": X[:, 1], "tag": ["t"] * len(X)}),
                   tmp_path / "p.parquet")
    features = pa.schema([("a", pa.float64()), ("b", pa.float64())])
    data = ds.dataset(tmp_path, format="parquet", schema=features).filter(ds.field("a") > 1000)
    kept = X[X[:, 0] > 1000]
    init = kept[:3]
    streamed = GPUKMeans(3, init=init, device="cpu").fit(data)
    np.testing.assert_array_equal(streamed.labels_,
                                  GPUKMeans(3, init=init, device="cpu").fit(kept).labels_)


def test_files_of_different_column_types_are_cast_once_with_a_warning(tmp_path):
    """One file float32, one float64: pyarrow reads both as the schema's type (the first
    file's); the fit warns, naming the column, the types and the file, and equals the fit
    of the data cast to that type. A schema given at opening chooses float64 instead."""
    import pyarrow as pa
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq
    from sklearn.exceptions import DataConversionWarning

    from gpumine import GPUKMeans

    X = _blobs(np.random.default_rng(11), n=1000, d=2, k=3)
    pq.write_table(pa.table({"a": X[:500, 0].astype(np.float32),
                             "b": X[:500, 1].astype(np.float32)}), tmp_path / "0.parquet")
    pq.write_table(pa.table({"a": X[500:, 0], "b": X[500:, 1]}), tmp_path / "1.parquet")
    init = X[:3].astype(np.float32)
    data = ds.dataset(sorted(tmp_path.glob("*.parquet")), format="parquet")
    with pytest.warns(DataConversionWarning, match=r"column 'a' is double in .*1\.parquet but "
                                                   r"float in the dataset's schema"):
        model = GPUKMeans(3, init=init, device="cpu").fit(data)
    assert model.cluster_centers_.dtype == np.float32
    np.testing.assert_array_equal(
        model.labels_, GPUKMeans(3, init=init, device="cpu").fit(X.astype(np.float32)).labels_)
    wide = ds.dataset(sorted(tmp_path.glob("*.parquet")), format="parquet",
                      schema=pa.schema([("a", pa.float64()), ("b", pa.float64())]))
    with pytest.warns(DataConversionWarning, match=r"'a' is float in .*0\.parquet but double"):
        model = GPUKMeans(3, init=init, device="cpu").fit(wide)
    assert model.cluster_centers_.dtype == np.float64
    same = ds.dataset(tmp_path / "1.parquet", format="parquet")
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataConversionWarning)  # one type: no warning
        GPUKMeans(3, init=init.astype(np.float64), device="cpu").fit(same)
