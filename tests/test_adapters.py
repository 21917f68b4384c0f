"""gpumine.adapters: the conversion entry point, file sources and atomic sinks."""

from __future__ import annotations

import decimal
import itertools
import threading
import time
import warnings

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sklearn.exceptions import DataConversionWarning

from gpumine import GPUKMeans, WaveCluster
from gpumine.adapters import (
    Columns,
    TableWriter,
    as_columns,
    atomic_output,
    check_output_path,
    iter_batches,
    iter_device_batches,
    labels_as,
    read_columns,
    read_table,
    select_columns,
    write_labeled,
    write_table,
)
from gpumine.adapters import sources as sources_module
from gpumine.backend import get_backend
from gpumine.datasets import read_minebench_bin
from gpumine.exceptions import DataFormatError, InvalidInputError

CPU = get_backend("cpu")


def _frame(rng, n=257):
    return pd.DataFrame({"a": rng.rand(n), "b": rng.randint(-5, 5, n),
                         "c": rng.rand(n).astype(np.float32)})


def _chunked_table(frame, pieces=3):
    """The frame as an Arrow table whose columns have several chunks."""
    bounds = np.linspace(0, len(frame), pieces + 1).astype(int)
    return pa.Table.from_batches([pa.RecordBatch.from_pandas(frame.iloc[lo:hi],
                                                             preserve_index=False)
                                  for lo, hi in itertools.pairwise(bounds)])


@pytest.mark.parametrize("kind", ["numpy", "pandas", "arrow", "record_batch", "list"])
def test_every_input_gives_the_same_float64_values(rng, kind):
    frame = _frame(rng)
    expected = frame.to_numpy(dtype=np.float64)
    data = {"numpy": expected, "pandas": frame, "arrow": _chunked_table(frame),
            "record_batch": pa.RecordBatch.from_pandas(frame, preserve_index=False),
            "list": expected.tolist()}[kind]
    cols = as_columns(data, backend=CPU)
    assert cols.X.dtype == np.float64
    np.testing.assert_array_equal(cols.X, expected)
    if kind in ("pandas", "arrow", "record_batch"):
        assert cols.feature_names == ["a", "b", "c"]
        assert cols.X.flags.f_contiguous and not cols.X.flags.c_contiguous
        assert cols.host_bytes_copied == 0  # numeric columns are read in place
    assert cols.kept_rows is None and cols.device_bytes == 0


def test_series_and_single_arrow_array_are_one_feature(rng):
    values = rng.rand(10)
    for data in (pd.Series(values, name="v"), pa.chunked_array([values[:4], values[4:]]),
                 pa.array(values)):
        cols = as_columns(data, backend=CPU)
        np.testing.assert_array_equal(cols.X[:, 0], values)
        assert cols.X.shape == (10, 1)


def test_output_dtype_follows_check_array(rng):
    all32 = pd.DataFrame({"a": rng.rand(5).astype(np.float32),
                          "b": rng.rand(5).astype(np.float32)})
    assert as_columns(all32, backend=CPU).X.dtype == np.float32
    assert as_columns(pa.Table.from_pandas(all32), backend=CPU).X.dtype == np.float32
    assert as_columns(all32, backend=CPU, dtype=np.float64).X.dtype == np.float64
    mixed = all32.assign(c=np.arange(5))
    cols = as_columns(mixed, backend=CPU)
    assert cols.X.dtype == np.float64
    np.testing.assert_array_equal(cols.X, mixed.to_numpy(np.float64))


def test_boolean_and_decimal_columns_are_cast_with_a_warning():
    frame = pd.DataFrame({"flag": [True, False, True],
                          "price": [decimal.Decimal("1.25"), decimal.Decimal("2.5"),
                                    decimal.Decimal("-3")]})
    with pytest.warns(DataConversionWarning) as caught:
        cols = as_columns(frame, backend=CPU)
    messages = " ".join(str(w.message) for w in caught)
    assert "'flag' is boolean" in messages and "'price' is decimal" in messages
    np.testing.assert_array_equal(cols.X, [[1, 1.25], [0, 2.5], [1, -3]])
    table = pa.table({"d": pa.array([decimal.Decimal("0.1")], pa.decimal128(5, 2))})
    with pytest.warns(DataConversionWarning, match="decimal"):
        assert as_columns(table, backend=CPU).X[0, 0] == 0.1


@pytest.mark.parametrize(("data", "message"), [
    (pd.DataFrame({"x": [1.0, 2.0], "name": ["a", "b"]}), "column 'name' has"),
    (pa.table({"x": [1.0, 2.0], "name": ["a", "b"]}), "column 'name' has type"),
    (pd.DataFrame({"x": [1.0, 2.0], "colour": pd.Categorical(["r", "g"])}),
     "column 'colour' is categorical"),
    (pa.table({"colour": pa.array(["r", "g"]).dictionary_encode()}),
     "column 'colour' is categorical"),
    (pd.DataFrame({"when": pd.to_datetime(["2024-01-01", "2024-01-02"])}),
     "column 'when' has dtype datetime64"),
    (pd.DataFrame({"x": [1.0, np.inf]}), "column 'x' has infinite values"),
    (pd.DataFrame({"x": [1.0, np.nan]}), "column 'x' has 1 NaN values"),
    (pd.DataFrame({"n": pd.array([1, None, 3], dtype="Int64")}), "column 'n' has 1 nulls"),
    (pa.table({"x": pa.array([1.0, None])}), "column 'x' has 1 nulls"),
    (pd.DataFrame(index=range(3)), "0 feature(s)"),
    (pd.DataFrame({"x": np.empty(0)}), "0 sample(s)"),
])
def test_bad_columns_are_named(data, message):
    with pytest.raises(InvalidInputError) as info:
        as_columns(data, backend=CPU)
    assert message in str(info.value)


def test_nulls_drop_removes_rows_across_chunks():
    table = pa.Table.from_batches([
        pa.record_batch({"a": pa.array([1.0, None, 3.0]), "b": pa.array([1, 2, None])}),
        pa.record_batch({"a": pa.array([np.nan, 5.0, 6.0]), "b": pa.array([4, 5, 6])}),
    ])
    cols = as_columns(table, backend=CPU, nulls="drop")
    assert cols.kept_rows.tolist() == [True, False, False, False, True, True]
    np.testing.assert_array_equal(cols.X, [[1, 1], [5, 5], [6, 6]])
    assert cols.host_bytes_copied > 0  # the filtered columns were copied on the host
    masked = pd.DataFrame({"n": pd.array([1, None, 3], dtype="Int64"), "x": [1.0, 2.0, 3.0]})
    np.testing.assert_array_equal(as_columns(masked, backend=CPU, nulls="drop").X,
                                  [[1, 1], [3, 3]])
    with pytest.raises(InvalidInputError, match="every row has a null"):
        as_columns(pa.table({"a": pa.array([None, None], pa.float64())}), backend=CPU,
                   nulls="drop")
    with pytest.raises(ValueError, match="nulls must be one of"):
        as_columns(table, backend=CPU, nulls="fill")


def test_estimators_fit_dataframes_and_arrow_like_numpy(rng):
    centres = np.array([[0, 0, 0], [5, 5, 5], [0, 5, 10]], dtype=float)
    X = centres[rng.randint(0, 3, 600)] + rng.normal(0, 0.3, (600, 3))
    frame = pd.DataFrame(X, columns=["p", "q", "r"])
    init = X[:3]
    reference = GPUKMeans(3, init=init, device="cpu").fit(X)
    for data in (frame, _chunked_table(frame)):
        model = GPUKMeans(3, init=init, device="cpu").fit(data)
        np.testing.assert_array_equal(model.labels_, reference.labels_)
        np.testing.assert_allclose(model.cluster_centers_, reference.cluster_centers_,
                                   rtol=1e-12)
        assert model.feature_names_in_.tolist() == ["p", "q", "r"]
        np.testing.assert_array_equal(model.predict(data), reference.labels_)
    wave = WaveCluster(device="cpu").fit(_chunked_table(frame))
    np.testing.assert_array_equal(wave.labels_, WaveCluster(device="cpu").fit(X).labels_)
    with pytest.raises(InvalidInputError, match="Feature names unseen at fit time"):
        model.predict(frame.rename(columns={"r": "s"}))
    with pytest.warns(UserWarning, match="does not have valid feature names"):
        model.predict(X)
    with pytest.raises(InvalidInputError, match="column 'p' has 1 NaN"):
        GPUKMeans(3, device="cpu").fit(frame.assign(p=np.where(frame.index == 4, np.nan, 1.0)))


def test_a_fit_dispatches_its_input_once(rng, monkeypatch):
    """One look at the input's type per fit: the table found is converted as it is."""
    from gpumine.adapters import columns as columns_module

    seen = []
    as_table = columns_module._as_table
    monkeypatch.setattr(columns_module, "_as_table", lambda data: seen.append(1) or as_table(data))
    frame = pd.DataFrame(rng.normal(size=(200, 2)), columns=["a", "b"])
    for estimator in (GPUKMeans(2, device="cpu"), WaveCluster(device="cpu")):
        seen.clear()
        estimator.fit(frame)
        assert len(seen) == 1, type(estimator).__name__


def test_validated_columns_pass_through_predict(rng):
    frame = _frame(rng)
    model = GPUKMeans(4, random_state=0, device="cpu").fit(frame)
    cols = as_columns(frame, backend=CPU)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(model.predict(cols), model.labels_)
    renamed = as_columns(frame.rename(columns={"a": "z"}), backend=CPU)
    with pytest.raises(InvalidInputError, match="Feature names"):
        model.predict(renamed)


# -- files ------------------------------------------------------------------------------


@pytest.fixture
def parquet_file(tmp_path, rng):
    frame = _frame(rng, 1000).assign(name=[f"r{i}" for i in range(1000)])
    path = tmp_path / "data.parquet"
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), path, row_group_size=300)
    return path, frame


def test_read_columns_streams_row_groups_into_one_buffer(parquet_file):
    path, frame = parquet_file
    progress = []
    cols = read_columns(path, backend=CPU, progress=progress.append, batch_rows=300)
    assert cols.feature_names == ["a", "b", "c"]  # the string column is left out
    np.testing.assert_array_equal(cols.X, frame[["a", "b", "c"]].to_numpy(np.float64))
    assert cols.X.flags.f_contiguous
    assert progress == [300, 600, 900, 1000]
    only = read_columns(path, ["c"], backend=CPU)
    assert only.X.dtype == np.float32 and only.feature_names == ["c"]
    assert read_columns(path, exclude=["a"], backend=CPU).feature_names == ["b", "c"]


def test_read_columns_drops_nulls_across_batches(tmp_path):
    a = np.arange(10, dtype=float)
    a[[1, 2, 3, 7]] = np.nan
    path = tmp_path / "n.parquet"
    pq.write_table(pa.table({"a": pa.array(a, from_pandas=True)}), path, row_group_size=3)
    cols = read_columns(path, backend=CPU, nulls="drop")
    np.testing.assert_array_equal(cols.X[:, 0], [0, 4, 5, 6, 8, 9])
    assert cols.kept_rows.tolist() == [not np.isnan(v) for v in a]
    with pytest.raises(InvalidInputError, match="column 'a' has 4 nulls"):
        read_columns(path, backend=CPU)


@pytest.mark.parametrize("suffix", [".csv", ".bin", ".arff"])
def test_other_formats_round_trip(tmp_path, rng, suffix):
    X = rng.rand(50, 3).astype(np.float32)
    table = pa.table({f"x{j}": X[:, j] for j in range(3)})
    path = tmp_path / f"d{suffix}"
    write_table(path, table)
    cols = read_columns(path, backend=CPU)
    assert cols.feature_names == ["x0", "x1", "x2"]
    np.testing.assert_allclose(cols.X, X, rtol=1e-6)
    if suffix == ".bin":
        np.testing.assert_array_equal(read_minebench_bin(path), X)


def test_select_columns_errors(parquet_file):
    path, _ = parquet_file
    schema = pq.read_schema(path)
    with pytest.raises(InvalidInputError, match="no column 'zzz'"):
        select_columns(schema, ["a", "zzz"])
    with pytest.raises(InvalidInputError, match="no column 'q'"):
        select_columns(schema, exclude=["q"])
    with pytest.raises(InvalidInputError, match="given twice"):
        select_columns(schema, ["a", "a"])
    with pytest.raises(InvalidInputError, match="no numeric columns"):
        select_columns(schema, exclude=["a", "b", "c"])
    with pytest.raises(InvalidInputError, match="column 'name' has type"):
        read_columns(path, ["a", "name"], backend=CPU)


def test_broken_files(tmp_path, parquet_file):
    path, _ = parquet_file
    empty = tmp_path / "empty.parquet"
    empty.write_bytes(b"")
    truncated = tmp_path / "cut.parquet"
    truncated.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    no_rows = tmp_path / "zero.parquet"
    pq.write_table(pa.table({"a": pa.array([], pa.float64())}), no_rows)
    with pytest.raises(FileNotFoundError, match="no such file"):
        read_columns(tmp_path / "missing.parquet", backend=CPU)
    with pytest.raises(DataFormatError, match="empty"):
        read_columns(empty, backend=CPU)
    with pytest.raises(DataFormatError, match="truncated or corrupt"):
        read_columns(truncated, backend=CPU)
    with pytest.raises(InvalidInputError, match="0 sample"):
        read_columns(no_rows, backend=CPU)
    with pytest.raises(DataFormatError, match="unsupported file type"):
        read_columns(tmp_path / "x.xlsx", backend=CPU)


def test_iter_device_batches_equals_the_whole_and_reads_ahead_boundedly(parquet_file,
                                                                        monkeypatch):
    path, frame = parquet_file
    parts = list(iter_device_batches(path, ["a", "b"], backend=CPU, dtype=np.float64,
                                     batch_rows=128))
    assert [first for first, _ in parts] == list(range(0, 1000, 128))[:len(parts)]
    np.testing.assert_array_equal(np.vstack([cols.X for _, cols in parts]),
                                  frame[["a", "b"]].to_numpy(np.float64))
    produced = []
    real = sources_module.iter_batches

    def counting(*args, **kwargs):
        for batch in real(*args, **kwargs):
            produced.append(1)
            yield batch

    monkeypatch.setattr(sources_module, "iter_batches", counting)
    stream = iter_device_batches(path, ["a"], backend=CPU, dtype=np.float64, batch_rows=50,
                                 max_in_flight=2)
    consumed = 0
    for _ in stream:
        consumed += 1
        time.sleep(0.01)
        # the reader is at most max_in_flight batches ahead, plus the one it holds
        assert len(produced) - consumed <= 3
        if consumed == 5:
            break
    stream.close()  # an early stop ends the reader thread
    time.sleep(0.3)
    assert not any(t.name == "gpumine-batch-reader" and t.is_alive()
                   for t in threading.enumerate())


def test_iter_device_batches_raises_the_readers_error(tmp_path):
    path = tmp_path / "n.parquet"
    pq.write_table(pa.table({"a": pa.array([1.0, None, 2.0])}), path)
    with pytest.raises(InvalidInputError, match="nulls"):
        list(iter_device_batches(path, ["a"], backend=CPU, dtype=np.float64))


# -- results -----------------------------------------------------------------------------


def test_labels_as_each_output():
    labels = np.array([2, 0, 1], dtype=np.int32)
    assert labels_as(labels).tolist() == [2, 0, 1]
    series = labels_as(labels, "pandas", index=pd.Index([10, 11, 12]))
    assert series.index.tolist() == [10, 11, 12] and series.name == "cluster"
    assert labels_as(labels, "arrow").to_pylist() == [2, 0, 1]
    kept = np.array([True, False, True, True])
    assert labels_as(labels, "arrow", kept_rows=kept).to_pylist() == [2, None, 0, 1]
    assert labels_as(labels, "pandas", kept_rows=kept).isna().tolist() == [
        False, True, False, False]
    assert labels_as(labels, kept_rows=kept).tolist() == [2, -1, 0, 1]
    with pytest.raises(ValueError, match="output must be one of"):
        labels_as(labels, "polars")


def test_table_as_each_output():
    from gpumine.adapters import table_as

    centres = np.arange(6.0).reshape(3, 2)
    assert table_as(centres).shape == (3, 2)
    frame = table_as(centres, "pandas", columns=["u", "v"])
    assert frame.columns.tolist() == ["u", "v"] and frame["v"].tolist() == [1, 3, 5]
    assert table_as(centres, "arrow").column_names == ["0", "1"]
    with pytest.raises(ValueError, match="1 column names for 2 columns"):
        table_as(centres, "arrow", columns=["a"])
    with pytest.raises(ValueError, match="must be 2-D"):
        table_as(np.ones(3), "arrow")


def test_write_labeled_streams_and_keeps_the_input(parquet_file, tmp_path):
    path, frame = parquet_file
    labels = np.arange(1000, dtype=np.int32) % 7
    out = tmp_path / "out.parquet"
    assert write_labeled(path, out, labels) == 1000
    written = pq.read_table(out)
    assert written.column_names == ["a", "b", "c", "name", "cluster"]
    assert written.column("cluster").to_pylist() == labels.tolist()
    assert written.column("name").to_pylist() == frame["name"].tolist()
    write_labeled(path, out, labels, labels_only=True, label_column="k")
    assert pq.read_table(out).column_names == ["k"]
    kept = np.ones(1000, bool)
    kept[::2] = False
    write_labeled(path, out, labels[:500], kept_rows=kept)
    assert pq.read_table(out).column("cluster").null_count == 500
    with pytest.raises(InvalidInputError, match="already has a column 'name'"):
        write_labeled(path, out, labels, label_column="name")


def test_a_failure_leaves_no_output_and_no_temporary(parquet_file, tmp_path):
    path, _ = parquet_file
    out = tmp_path / "out.parquet"

    def fails_on_the_second_batch(first_row, batch):
        if first_row:
            raise RuntimeError("disk full")
        return np.zeros(batch.num_rows, np.int32)

    with pytest.raises(RuntimeError, match="disk full"):
        write_labeled(path, out, fails_on_the_second_batch, batch_rows=300)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.parquet"]
    out.write_bytes(b"previous")
    with pytest.raises(InvalidInputError, match="999 labels for a batch of 1000"):
        write_labeled(path, out, np.zeros(999, np.int32))
    assert out.read_bytes() == b"previous"  # an existing file is only replaced when complete
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.parquet", "out.parquet"]


def test_atomic_output_gives_a_normal_file_mode(tmp_path):
    import os

    target = tmp_path / "x.csv"
    with atomic_output(target) as tmp:
        tmp.write_text("a\n1\n")
    mask = os.umask(0)
    os.umask(mask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~mask


def test_check_output_path(parquet_file, tmp_path):
    path, _ = parquet_file
    with pytest.raises(InvalidInputError, match="does not exist"):
        check_output_path(tmp_path / "nope" / "x.parquet")
    with pytest.raises(InvalidInputError, match="overwrite the input"):
        check_output_path(path, path)
    with pytest.raises(DataFormatError, match="unsupported file type"):
        check_output_path(tmp_path / "x.txt")
    assert check_output_path(tmp_path / "y.parquet", path) == tmp_path / "y.parquet"


def test_table_writer_arff_nominal_and_bin_rejects_strings(tmp_path):
    table = pa.table({"x": [1.0, 2.5], "class": ["a", "b"]})
    write_table(tmp_path / "t.arff", table)
    back = read_table(tmp_path / "t.arff")
    assert back.column("x").to_pylist() == [1.0, 2.5]
    assert back.column("class").to_pylist() == ["a", "b"]
    with pytest.raises(InvalidInputError, match="numbers only"):
        TableWriter(tmp_path / "t.bin", table.schema)
    assert [b.num_rows for b in iter_batches(tmp_path / "t.arff", batch_rows=1)] == [1, 1]


def test_columns_dataclass_rows():
    assert Columns(np.zeros((4, 2)), None).n_samples == 4


# -- GPU ---------------------------------------------------------------------------------


@pytest.mark.gpu
def test_columnar_input_goes_straight_to_the_device(rng):
    gpu = get_backend("gpu")
    cupy = gpu.xp
    frame = _frame(rng, 100_003)
    expected = frame.to_numpy(np.float64)
    for data in (frame, _chunked_table(frame, 4)):
        cols = as_columns(data, backend=gpu)
        assert isinstance(cols.X, cupy.ndarray)
        assert cols.X.flags.f_contiguous
        np.testing.assert_array_equal(cols.X.get(), expected)
        assert cols.host_bytes_copied == 0
        # each column's own bytes crossed once: float64 + int64 + float32
        assert cols.device_bytes == 100_003 * (8 + 8 + 4)
    dropped = as_columns(frame.assign(a=np.where(frame.index % 10 == 0, np.nan, frame.a)),
                         backend=gpu, nulls="drop")
    assert dropped.n_samples == 100_003 - 10_001
    device_input = cupy.asarray(expected)
    cols = as_columns(device_input, backend=gpu)
    np.testing.assert_array_equal(cols.X.get(), expected)
    assert cols.device_bytes == 0
    with pytest.raises(InvalidInputError, match="NaN or infinity"):
        as_columns(cupy.asarray([[1.0], [np.nan]]), backend=gpu)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gpu_columns_go_up_through_pinned_rows_and_are_checked_there(rng, dtype):
    """Columns of the output dtype (Arrow chunks too) are staged through one pinned buffer;
    NaN/inf are found on the device after the copy, and the host then names the column."""
    import pyarrow.dataset as ds

    gpu = get_backend("gpu")
    X = rng.normal(size=(300_001, 5)).astype(dtype)
    table = pa.Table.from_batches(  # three chunks a column
        [pa.record_batch({f"c{j}": X[a:b, j] for j in range(5)})
         for a, b in ((0, 100_000), (100_000, 250_000), (250_000, 300_001))])
    cols = as_columns(table, backend=gpu)
    np.testing.assert_array_equal(cols.X.get(), X)
    assert cols.device_bytes == X.nbytes
    np.testing.assert_allclose(cols.means.get(), X.astype(np.float64).mean(axis=0), rtol=1e-9,
                               atol=1e-12)
    for bad, message in ((np.nan, "column 'c3' has 1 NaN values"),
                         (np.inf, "column 'c3' has infinite values")):
        broken = X.copy()
        broken[299_999, 3] = bad
        frame = pd.DataFrame(broken, columns=[f"c{j}" for j in range(5)])
        with pytest.raises(InvalidInputError, match=message):
            as_columns(frame, backend=gpu)
        with pytest.raises(InvalidInputError, match=rf"batch 2 .*{message}"):
            GPUKMeans(2, device="gpu", batch_rows=100_000).fit(
                ds.dataset(pa.table({name: broken[:, j] for j, name in enumerate(frame)})))
    dropped = as_columns(pd.DataFrame({"a": [1.0, np.nan, 3.0]}), backend=gpu, nulls="drop")
    assert dropped.X.get().ravel().tolist() == [1.0, 3.0]
    # few long columns are cut into pieces (one host thread each): 3 pieces a column here,
    # into a new buffer and into a slice of a caller's wider one
    tall = rng.normal(size=(600_003, 2)).astype(dtype)
    tall_table = pa.table({"u": tall[:, 0], "v": tall[:, 1]})
    np.testing.assert_array_equal(as_columns(tall_table, backend=gpu).X.get(), tall)
    wider = gpu.xp.full((2, 700_000), -1, dtype=dtype)
    as_columns(tall_table, backend=gpu, out=wider[:, 50_000:650_003])
    np.testing.assert_array_equal(wider[:, 50_000:650_003].get().T, tall)
    assert (wider[:, :50_000] == -1).all() and (wider[:, 650_003:] == -1).all()


@pytest.mark.gpu
def test_gpu_estimators_fit_arrow_and_parquet_columns(rng, tmp_path):
    centres = np.array([[0, 0], [6, 6], [0, 6]], dtype=float)
    X = centres[rng.randint(0, 3, 3000)] + rng.normal(0, 0.4, (3000, 2))
    table = pa.table({"u": X[:, 0], "v": X[:, 1]})
    path = tmp_path / "g.parquet"
    pq.write_table(table, path, row_group_size=700)
    gpu = get_backend("gpu")
    cpu_model = GPUKMeans(3, init=X[:3], device="cpu").fit(table)
    for data in (table, read_columns(path, backend=gpu)):
        model = GPUKMeans(3, init=X[:3], device="gpu").fit(data)
        np.testing.assert_array_equal(model.labels_, cpu_model.labels_)
        assert model.feature_names_in_.tolist() == ["u", "v"]
    wave = WaveCluster(device="gpu").fit(read_columns(path, backend=gpu))
    np.testing.assert_array_equal(wave.labels_, WaveCluster(device="cpu").fit(table).labels_)


def test_the_adapters_give_the_backend_its_tiled_transpose():
    """Importing the adapters registers column_stats.column_major as the transpose of
    Backend.to_device_columns (the backend sits below the kernels' layer)."""
    from gpumine import backend
    from gpumine.adapters import column_stats

    assert backend._column_major is column_stats.column_major
