"""The cluster job (gpumine.jobs) and Parquet directories and globs as one input."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from gpumine.adapters import parquet_parts, read_columns, read_schema, row_count
from gpumine.backend import get_backend
from gpumine.cli import app
from gpumine.exceptions import (
    DataFormatError,
    InvalidInputError,
    InvalidParameterError,
    UnknownStrategy,
)
from gpumine.jobs import StageTimer, cluster_file, make_model


@pytest.fixture
def partitioned(tmp_path):
    """Three Parquet files of one table in Hive-style folders, plus the files a writer leaves."""
    rng = np.random.default_rng(1)
    X = np.concatenate([rng.normal(0, 0.3, (700, 4)), rng.normal(6, 0.3, (500, 4))])
    rng.shuffle(X)
    table = pa.table({**{f"f{j}": X[:, j] for j in range(4)},
                      "id": [f"r{i}" for i in range(len(X))]})
    root = tmp_path / "events"
    bounds = [0, 100, 650, 1200]
    for part, (lo, hi) in enumerate(itertools.pairwise(bounds)):
        folder = root / f"day={part}"
        folder.mkdir(parents=True)
        pq.write_table(table.slice(lo, hi - lo), folder / f"part-{part}.parquet")
    (root / "_SUCCESS").write_text("")
    (root / "day=1" / ".part-9.parquet.tmp").write_text("a writer's temporary file")
    whole = tmp_path / "whole.parquet"
    pq.write_table(table, whole)
    return root, whole, table


def test_directory_and_glob_read_as_one_table_in_path_order(partitioned):
    root, whole, table = partitioned
    parts = parquet_parts(root)
    assert [p.name for p in parts] == ["part-0.parquet", "part-1.parquet", "part-2.parquet"]
    assert parquet_parts(f"{root}/*/part-*.parquet") == parts
    assert parquet_parts(f"{root}/**/*.parquet") == parts
    assert row_count(root) == 1200 and read_schema(root).equals(table.schema)
    cpu = get_backend("cpu")
    from_dir = read_columns(root, backend=cpu)
    from_file = read_columns(whole, backend=cpu)
    assert from_dir.feature_names == from_file.feature_names == ["f0", "f1", "f2", "f3"]
    assert np.array_equal(from_dir.X, from_file.X)


def test_a_data_set_needs_one_schema_and_some_parquet_files(partitioned, tmp_path):
    root, _, _ = partitioned
    pq.write_table(pa.table({"f0": [1.0], "f1": [2]}), root / "day=2" / "zz.parquet")
    with pytest.raises(DataFormatError, match=r"zz\.parquet: its columns .* differ from those of"):
        read_schema(root)
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no Parquet files"):
        read_schema(tmp_path / "empty")
    with pytest.raises(FileNotFoundError, match="no file matches"):
        read_schema(tmp_path / "nothing-*.parquet")
    (tmp_path / "empty" / "notes.csv").write_text("a\n1\n")
    with pytest.raises(DataFormatError, match=r"notes\.csv, which is not a Parquet file"):
        read_schema(tmp_path / "empty" / "*")


def test_cluster_file_on_a_directory_equals_the_single_file(partitioned, tmp_path):
    root, whole, table = partitioned
    out_dir, out_file = tmp_path / "from_dir.parquet", tmp_path / "from_file.parquet"
    notes = []
    a = cluster_file(root, params={"n_clusters": 2}, out=out_dir, device="cpu", note=notes.append)
    b = cluster_file(whole, params={"n_clusters": 2}, out=out_file, device="cpu",
                     note=lambda text: None)
    assert notes == ["leaving out non-numeric columns: id (string)"]
    for key in ("rows", "n_iter", "inertia", "cluster_sizes", "columns"):
        assert a[key] == b[key], key
    assert sorted(a["cluster_sizes"]) == [500, 700]
    written = pq.read_table(out_dir)
    assert written.column_names == [*table.column_names, "cluster"]
    assert written.column("id").equals(table.column("id"))
    assert written.column("cluster").equals(pq.read_table(out_file).column("cluster"))
    json.dumps(a)  # the summary is JSON as it is (an Airflow XCom value)
    assert set(a["seconds"]) == {"read", "fit", "write"}


def test_output_inside_the_input_is_refused_before_any_work(partitioned):
    root, _, _ = partitioned
    for out in (root / "labels.parquet", root / "day=0" / "labels.parquet"):
        with pytest.raises(InvalidInputError, match="is part of the input"):
            cluster_file(root, out=out, device="cpu")
        assert not out.exists()
    glob = f"{root}/*/*.parquet"
    with pytest.raises(InvalidInputError, match="is part of the input"):
        cluster_file(glob, out=root / "day=1" / "labels.parquet", device="cpu")
    # outside the glob's matches: fine
    summary = cluster_file(glob, out=root / "labels.parquet", device="cpu",
                           params={"n_clusters": 2})
    assert summary["rows"] == 1200


@pytest.mark.parametrize("algorithm, params, error, message", [
    ("kmeans", {"n_clusterz": 3}, InvalidParameterError, "GPUKMeans has no parameter 'n_clu"),
    ("kmeans", {"device": "gpu"}, InvalidParameterError, "give device as the job's 'device'"),
    ("kmeans", {"random_state": 1}, InvalidParameterError, "give random_state as the job's 's"),
    ("kmeans", {"n_clusters": 0}, InvalidParameterError, "n_clusters must be an integer >= 1"),
    ("kmeans", {"update": "nope"}, UnknownStrategy, "unknown kmeans.update strategy 'nope'"),
    ("wavecluster", {"wavelet": "db99"}, UnknownStrategy, "strategy 'db99'"),
    ("dbscan", {}, InvalidParameterError, "algorithm must be one of kmeans, wavecluster"),
])
def test_bad_parameters_fail_before_reading(algorithm, params, error, message, partitioned):
    root, _, _ = partitioned
    with pytest.raises(error, match=message):
        make_model(algorithm, params, device="cpu")
    with pytest.raises(error, match=message):
        cluster_file(root / "missing.parquet", algorithm=algorithm, params=params, device="cpu")


@pytest.mark.parametrize("kwargs, message", [
    ({"algorithm": "wavecluster"}, "several GPUs are for k-means"),
    ({"fit_sample": 100}, "several GPUs take no fit_sample or stream"),
    ({"stream": True}, "several GPUs take no fit_sample or stream"),
])
@pytest.mark.parametrize("device", ["gpu:all", [0, 1]])
def test_several_gpu_jobs_refuse_what_they_cannot_do_before_reading(device, kwargs, message,
                                                                     partitioned):
    """k-means only, in memory only: refused before any GPU is asked for or file read."""
    root, _, _ = partitioned
    with pytest.raises(InvalidParameterError, match=message):
        cluster_file(root / "missing.parquet", device=device, **kwargs)


def test_a_named_column_that_is_not_a_number_fails_before_reading(partitioned, tmp_path):
    root, _, _ = partitioned
    out = tmp_path / "never.parquet"
    with pytest.raises(InvalidInputError, match="column 'id' has type string, not a number"):
        cluster_file(root, columns=["f0", "id"], out=out, device="cpu")
    assert not out.exists()


def test_an_existing_label_column_fails_before_the_fit(tmp_path):
    path = tmp_path / "labelled.parquet"
    pq.write_table(pa.table({"x": [0.0, 1.0, 5.0, 6.0], "cluster": [0, 0, 1, 1]}), path)
    with pytest.raises(InvalidInputError, match="already has a column 'cluster'"):
        cluster_file(path, out=tmp_path / "again.parquet", params={"n_clusters": 2},
                     device="cpu", note=lambda text: None)
    notes = []
    summary = cluster_file(path, out=tmp_path / "again.parquet", labels_only=True,
                           params={"n_clusters": 2}, device="cpu", note=notes.append)
    assert summary["columns"] == ["x"]  # the old labels are left out of the features
    assert "leaving out column 'cluster', a label column" in notes[0]
    assert pq.read_table(tmp_path / "again.parquet").column_names == ["cluster"]


def test_stage_timer_reports_progress():
    seen = []
    timer = StageTimer(progress=lambda name, done, total: seen.append((name, done, total)))
    with timer.stage("read", total=10) as advance:
        advance(4)
        advance(10)
    assert seen == [("read", 4, 10), ("read", 10, 10)] and timer.seconds["read"] >= 0


def test_command_line_reads_a_directory_and_a_quoted_glob(partitioned, tmp_path):
    root, _, _ = partitioned
    runner = CliRunner()
    for source in (str(root), f"{root}/day=*/*.parquet"):
        result = runner.invoke(app, ["cluster", source, "-k", "2", "--json", "--device", "cpu",
                                     "--out", str(tmp_path / "labels.csv")])
        assert result.exit_code == 0, result.output
        summary = json.loads(result.stdout)
        assert summary["rows"] == 1200 and summary["input"] == source
        assert sorted(summary["cluster_sizes"]) == [500, 700]


def test_each_parquet_footer_is_read_once_per_job(partitioned, tmp_path, monkeypatch):
    """Schema, row count, the read and the write-back all use one parse of each footer."""
    from gpumine.adapters import sources

    root, whole, _ = partitioned
    sources._parquet_footer_cached.cache_clear()
    reads = []
    real = pq.read_metadata
    monkeypatch.setattr(pq, "read_metadata", lambda path, *a, **k: reads.append(path)
                        or real(path, *a, **k))
    cluster_file(whole, params={"n_clusters": 2}, out=tmp_path / "a.parquet", device="cpu",
                 note=lambda text: None)
    assert reads == [str(whole)]
    reads.clear()
    cluster_file(root, params={"n_clusters": 2}, out=tmp_path / "b.parquet", device="cpu",
                 note=lambda text: None)
    assert sorted(reads) == sorted(map(str, parquet_parts(root)))


def test_a_rewritten_file_is_read_anew(tmp_path):
    path = tmp_path / "x.parquet"
    pq.write_table(pa.table({"a": [1.0, 2.0]}), path)
    assert read_schema(path).names == ["a"]
    pq.write_table(pa.table({"a": [1.0, 2.0, 3.0], "b": [4.0, 5.0, 6.0]}), path)
    assert read_schema(path).names == ["a", "b"] and row_count(path) == 3


@pytest.mark.parametrize("algorithm", ["kmeans", "wavecluster"])
def test_a_streamed_job_labels_every_row_as_the_whole_read_does(algorithm, partitioned, tmp_path):
    """stream=True fits over the record batches (read again at every pass); the labels
    written equal those of the job that reads the input whole."""
    root, _, _ = partitioned
    params = {"n_clusters": 2} if algorithm == "kmeans" else {}
    whole, streamed = tmp_path / "whole.parquet", tmp_path / "streamed.parquet"
    a = cluster_file(root, algorithm=algorithm, params=params, out=whole, device="cpu")
    b = cluster_file(root, algorithm=algorithm, params=params, out=streamed, device="cpu",
                     stream=True)
    assert pq.read_table(streamed).column("cluster").equals(pq.read_table(whole).column("cluster"))
    assert a["cluster_sizes"] == b["cluster_sizes"] and b["rows"] == 1200


def test_stream_by_default_when_memory_is_short_and_its_limits(partitioned, tmp_path,
                                                                monkeypatch):
    import gpumine.jobs.cluster

    root, whole, _ = partitioned
    monkeypatch.setattr(gpumine.jobs.cluster, "_free_memory", lambda backend: 1000)
    notes = []
    summary = cluster_file(root, params={"n_clusters": 2}, device="cpu", note=notes.append)
    assert any(note.startswith("streaming the input") for note in notes), notes
    assert summary["clustered_rows"] == 1200
    csv = tmp_path / "rows.csv"
    csv.write_text("a,b\n1,2\n3,4\n5,6\n")
    with pytest.raises(InvalidParameterError, match="stream reads Parquet inputs, not csv"):
        cluster_file(csv, params={"n_clusters": 2}, device="cpu", stream=True)
    with pytest.raises(InvalidParameterError, match="nulls='error'"):
        cluster_file(whole, params={"n_clusters": 2}, device="cpu", stream=True, nulls="drop")
    result = CliRunner().invoke(app, ["cluster", str(root), "--stream", "--device", "cpu", "-q",
                                      "--json", "-k", "2"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output.splitlines()[-1])["clustered_rows"] == 1200
