"""The gpumine command line: typer's CliRunner, and the installed executable."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from gpumine.cli import app
from gpumine.datasets import make_uniform, write_minebench_bin

runner = CliRunner()


def test_demo_summary():
    result = runner.invoke(app, ["cluster", "--demo", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["rows"] == 100_000 and summary["features"] == 8
    assert summary["n_clusters"] == 8 and sum(summary["cluster_sizes"]) == 100_000
    from gpumine.backend import gpu_available
    from gpumine.kmeans.cpu_fast import available

    expected = (("gpu", "tiled") if gpu_available()
                else ("cpu", "numba" if available() else "numpy"))
    assert (summary["device"], summary["assign"]) == expected
    assert summary["n_iter"] >= 1 and summary["inertia"] > 0


@pytest.mark.parametrize("suffix", [".bin", ".parquet", ".csv"])
def test_cluster_files(tmp_path, suffix):
    import pandas as pd

    X = make_uniform(500, 3, random_state=1, dtype=np.float64)
    path = tmp_path / f"data{suffix}"
    if suffix == ".bin":
        write_minebench_bin(path, X)
    else:
        frame = pd.DataFrame(X, columns=["a", "b", "c"]).assign(name="text")
        frame.to_parquet(path) if suffix == ".parquet" else frame.to_csv(path, index=False)
    result = runner.invoke(app, ["cluster", str(path), "-k", "4", "--json", "--device", "cpu"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert (summary["rows"], summary["features"], summary["n_clusters"]) == (500, 3, 4)


def test_cluster_arff(labelled_arff):
    result = runner.invoke(app, ["cluster", str(labelled_arff), "-k", "4"])
    assert result.exit_code == 0, result.output
    assert "n iter" in result.stdout


@pytest.fixture
def data_dir(tmp_path):
    """A directory with good and bad inputs, as the bad-input table names them."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    X = make_uniform(400, 3, random_state=2, dtype=np.float64)
    table = pa.table({"a": X[:, 0], "b": X[:, 1], "c": X[:, 2],
                      "name": [f"p{i}" for i in range(400)]})
    pq.write_table(table, tmp_path / "good.parquet", row_group_size=150)
    (tmp_path / "empty.parquet").write_bytes(b"")
    good = (tmp_path / "good.parquet").read_bytes()
    (tmp_path / "truncated.parquet").write_bytes(good[: len(good) // 2])
    pq.write_table(table.slice(0, 0), tmp_path / "zero.parquet")
    nan = table.set_column(0, "a", pa.array(np.where(np.arange(400) == 7, np.nan, X[:, 0])))
    pq.write_table(nan, tmp_path / "nan.parquet")
    (tmp_path / "bad.bin").write_bytes(np.array([10, 3], "<i4").tobytes() + b"\0" * 12)
    return tmp_path


@pytest.mark.parametrize(("args", "message"), [
    (["cluster", "{d}/missing.parquet"], "no such file"),
    (["cluster", "{d}/empty.parquet"], "the file is empty"),
    (["cluster", "{d}/zero.parquet"], "0 sample(s)"),
    (["cluster", "{d}/truncated.parquet"], "truncated or corrupt"),
    (["cluster", "{d}/good.parquet", "--columns", "a,name"], "column 'name' has type"),
    (["cluster", "{d}/good.parquet", "--columns", "a,nope"], "no column 'nope'"),
    (["cluster", "{d}/good.parquet", "--exclude", "nope"], "no column 'nope'"),
    (["cluster", "{d}/nan.parquet"], "column 'a' has 1 NaN values"),
    (["cluster", "{d}/good.parquet", "-k", "401"], "should be >= n_clusters"),
    (["cluster", "{d}/good.parquet", "--out", "{d}/no/dir/out.parquet"], "does not exist"),
    (["cluster", "{d}/good.parquet", "--out", "{d}/good.parquet"], "overwrite the input"),
    (["cluster", "{d}/good.parquet", "--out", "{d}/out.txt"], "unsupported file type"),
    (["cluster", "{d}/good.parquet", "--out", "{d}/o.parquet", "--centers-out",
      "{d}/o.parquet"], "name the same file"),
    (["cluster", "{d}/bad.bin"], "truncated"),
    (["cluster", "{d}/x.xlsx"], "unsupported file type"),
    (["datasets", "convert", "{d}/good.parquet", "{d}/good.parquet"], "overwrite the input"),
    (["datasets", "convert", "{d}/good.parquet", "{d}/x.bin", "--columns", "name"],
     "numbers only"),
    (["datasets", "corel", "nope", "{d}/c.parquet"], "nope"),
])
def test_bad_input_is_one_line_exit_1_and_no_output(data_dir, args, message):
    before = sorted(p.name for p in data_dir.iterdir())
    result = runner.invoke(app, [a.format(d=data_dir) for a in args])
    assert result.exit_code == 1, result.output
    assert message in result.output
    assert "Traceback" not in result.output
    assert sorted(p.name for p in data_dir.iterdir()) == before  # nothing written, no temp


def test_gpu_without_a_gpu_is_one_line(data_dir, monkeypatch):
    from gpumine import backend

    reason = 'CuPy is not installed (test); pip install "gpumine[cuda12]"'
    monkeypatch.setattr(backend, "_probe_gpu", lambda: (None, reason))
    result = runner.invoke(app, ["cluster", str(data_dir / "good.parquet"), "--device", "gpu"])
    assert result.exit_code == 1
    assert "CuPy is not installed" in result.output and "Traceback" not in result.output
    assert 'pip install "gpumine[cuda12]"' in result.output  # brackets are not rich markup


def test_debug_shows_the_traceback(data_dir):
    result = runner.invoke(app, ["--debug", "cluster", str(data_dir / "nan.parquet")])
    assert result.exit_code == 1 and isinstance(result.exception, ValueError)


@pytest.mark.parametrize("args", [
    ["cluster", "--demo", "--labels-only"],
    ["cluster", "--demo", "--algorithm", "wavecluster", "--centers-out", "c.parquet"],
    ["cluster", "--demo", "--algorithm", "wavecluster", "-k", "3"],
    ["cluster", "--demo", "--levels", "2"],
    ["cluster", "--demo", "--fit-sample", "10"],
    ["cluster", "--demo", "--algorithm", "dbscan"],
    ["cluster", "--demo", "--algorithm", "wavecluster", "--grid-size", "a,b"],
    ["cluster", "--demo", "--algorithm", "wavecluster", "--threshold", "high"],
    ["cluster", "--demo", "--columns", "a,,b"],
    ["datasets", "make-uniform", "0", "2", "x.parquet"],
])
def test_conflicting_or_bad_options_are_usage_errors(args):
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output


@pytest.mark.parametrize(("args", "message"), [
    (["cluster", "--demo", "--update", "nope"], "unknown kmeans.update strategy 'nope'"),
    (["cluster", "--demo", "--init", "nope"], "unknown kmeans.init strategy 'nope'"),
    (["cluster", "--demo", "--algorithm", "wavecluster", "--wavelet", "db4"],
     "unknown wavecluster.wavelet strategy 'db4'"),
    (["cluster", "--demo", "--device", "tpu"], "--device must be one of auto, cpu, gpu, gpu:all"),
    (["cluster", "--demo", "--device", "0,0"], "device lists a GPU twice"),
    (["cluster", "--demo", "--device", "0,-1"], "must hold GPU ids (integers >= 0)"),
    (["strategies", "--kind", "nope"], "unknown strategy kind 'nope'"),
])
def test_unknown_names_are_usage_errors_naming_the_option(args, message):
    """A wrong name in an option is a usage error (exit 2), found before any work."""
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    output = " ".join(result.output.split())
    assert message in output and "Traceback" not in output


def test_out_keeps_columns_and_adds_labels(data_dir):
    import pyarrow.parquet as pq

    out, centers = data_dir / "out.parquet", data_dir / "centres.csv"
    result = runner.invoke(app, ["cluster", str(data_dir / "good.parquet"), "-k", "3",
                                 "--device", "cpu", "--out", str(out), "--centers-out",
                                 str(centers), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["columns"] == ["a", "b", "c"] and summary["output"] == str(out)
    assert set(summary["seconds"]) == {"read", "fit", "write"}
    written = pq.read_table(out)
    assert written.column_names == ["a", "b", "c", "name", "cluster"]
    assert np.bincount(written.column("cluster").to_numpy()).tolist() == \
        summary["cluster_sizes"]
    import pandas as pd

    assert pd.read_csv(centers).shape == (3, 3)
    result = runner.invoke(app, ["cluster", str(data_dir / "good.parquet"), "--columns", "a,b",
                                 "--out", str(data_dir / "l.csv"), "--labels-only",
                                 "--label-column", "k", "--device", "cpu", "--json"])
    assert result.exit_code == 0, result.output
    assert pd.read_csv(data_dir / "l.csv").columns.tolist() == ["k"]


def test_nulls_drop_gives_null_labels(data_dir):
    import pyarrow.parquet as pq

    out = data_dir / "out.parquet"
    result = runner.invoke(app, ["cluster", str(data_dir / "nan.parquet"), "--nulls", "drop",
                                 "--out", str(out), "--json", "--device", "cpu"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert (summary["rows"], summary["clustered_rows"]) == (400, 399)
    labels = pq.read_table(out).column("cluster")
    assert labels.null_count == 1 and labels[7].as_py() is None


def test_fit_sample_labels_every_row_streaming(data_dir):
    import pyarrow.parquet as pq

    out = data_dir / "out.parquet"
    args = ["cluster", str(data_dir / "good.parquet"), "-k", "3", "--fit-sample", "100",
            "--device", "cpu", "--json"]
    result = runner.invoke(app, [*args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["fit_rows"] == 100 and "inertia_of_fit_rows" in summary
    assert summary["clustered_rows"] == 400 and "label" in summary["seconds"]
    labels = pq.read_table(out).column("cluster").to_numpy()
    assert np.bincount(labels).tolist() == summary["cluster_sizes"]
    streamed = json.loads(runner.invoke(app, args).stdout)  # no --out: streamed count only
    assert streamed["cluster_sizes"] == summary["cluster_sizes"]


def test_wavecluster_on_a_file(labelled_arff, tmp_path):
    import pyarrow.parquet as pq

    out = tmp_path / "t4.parquet"
    result = runner.invoke(app, ["cluster", str(labelled_arff),
                                 "--algorithm", "wavecluster", "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["n_clusters"] == 4 and summary["noise"] > 0
    table = pq.read_table(out)
    assert "CLASS" in table.column_names  # the ARFF class column is kept, not clustered
    assert summary["columns"] == ["x", "y"]


def test_demo_wavecluster():
    result = runner.invoke(app, ["cluster", "--demo", "--algorithm", "wavecluster", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["n_clusters"] == 4 and 0 < summary["noise"] < 0.1 * summary["rows"]


def test_datasets_make_uniform_is_bit_for_bit(tmp_path):
    import pyarrow.parquet as pq

    from gpumine.datasets import read_minebench_bin

    for name in ("u.parquet", "u.bin", "u.csv"):
        result = runner.invoke(app, ["datasets", "make-uniform", "3000", "5",
                                     str(tmp_path / name), "--seed", "11", "-q"])
        assert result.exit_code == 0, result.output
    expected = make_uniform(3000, 5, random_state=11)
    np.testing.assert_array_equal(pq.read_table(tmp_path / "u.parquet").to_pandas().to_numpy(),
                                  expected)
    np.testing.assert_array_equal(read_minebench_bin(tmp_path / "u.bin"), expected)
    result = runner.invoke(app, ["datasets", "make-uniform", "10", "2", str(tmp_path / "d.csv"),
                                 "--dtype", "float64", "-q"])
    assert result.exit_code == 0
    # NumPy's parser rounds correctly; pandas' default one before 3.0 may be 1 ulp off
    np.testing.assert_array_equal(np.loadtxt(tmp_path / "d.csv", delimiter=",", skiprows=1),
                                  make_uniform(10, 2, random_state=5489, dtype=np.float64))


def test_datasets_convert_between_every_format(tmp_path, labelled_arff):
    from gpumine.adapters import read_table

    source = labelled_arff
    steps = ["j.parquet", "j.arff"]
    previous = source
    for name in steps:
        result = runner.invoke(app, ["datasets", "convert", str(previous), str(tmp_path / name)])
        assert result.exit_code == 0, result.output
        previous = tmp_path / name
    first, last = read_table(source), read_table(previous)
    assert first.column_names == last.column_names
    np.testing.assert_allclose(last.column("x").to_numpy(), first.column("x").to_numpy())
    assert last.column("CLASS").to_pylist() == first.column("CLASS").to_pylist()
    result = runner.invoke(app, ["datasets", "convert", str(tmp_path / "j.parquet"),
                                 str(tmp_path / "j.csv"), "--columns", "x,y"])
    assert result.exit_code == 0, result.output
    np.testing.assert_allclose(read_table(tmp_path / "j.csv").column("y").to_numpy(),
                               first.column("y").to_numpy())
    result = runner.invoke(app, ["datasets", "convert", str(previous), str(tmp_path / "j.bin")])
    assert result.exit_code == 0, result.output
    from gpumine.datasets import read_minebench_bin

    assert read_minebench_bin(tmp_path / "j.bin").shape == (first.num_rows, 2)


def test_datasets_corel(small_corel, tmp_path):
    import pyarrow.parquet as pq

    path, X = small_corel
    out = tmp_path / "color.parquet"
    result = runner.invoke(app, ["datasets", "corel", "color", str(out), "--data-home",
                                 str(path.parent)])
    assert result.exit_code == 0, result.output
    table = pq.read_table(out)
    assert table.num_rows == 300 and table.num_columns == 9
    np.testing.assert_array_equal(table.to_pandas().to_numpy(), X)


def test_peak_memory_stays_under_three_times_the_data(tmp_path):
    """The whole `gpumine cluster FILE --out` run, beyond the imports, needs < 3x the data."""
    n_rows, n_features = 3_000_000, 8
    path = tmp_path / "big.parquet"
    result = runner.invoke(app, ["datasets", "make-uniform", str(n_rows), str(n_features),
                                 str(path), "--dtype", "float64", "-q"])
    assert result.exit_code == 0, result.output
    script = (
        "import resource, sys\n"
        "import gpumine.adapters, gpumine.kmeans.lloyd, pyarrow.parquet\n"
        "from gpumine.cli import app\n"
        "base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "app(sys.argv[1:], standalone_mode=False)\n"
        "peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "print('RSS', base, peak, file=sys.stderr)\n")
    done = subprocess.run([sys.executable, "-c", script, "cluster", str(path), "--device", "cpu",
                           "--max-iter", "5", "--out", str(tmp_path / "o.parquet"), "-q",
                           "--json"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    base, peak = (int(v) * 1024 for v in done.stderr.split("RSS")[1].split())
    data_bytes = n_rows * n_features * 8
    assert peak - base < 3 * data_bytes, (peak - base) / data_bytes


def test_usage_errors_exit_2():
    assert runner.invoke(app, ["cluster"]).exit_code == 2
    assert runner.invoke(app, ["cluster", "--demo", "x.parquet"]).exit_code == 2
    assert runner.invoke(app, ["cluster", "--demo", "-k", "0"]).exit_code == 2


def test_strategies_and_info():
    result = runner.invoke(app, ["strategies", "--json", "--kind", "kmeans.update"])
    assert result.exit_code == 0
    rows = json.loads(result.stdout)
    numpy_row = next(r for r in rows if r["name"] == "numpy")
    assert numpy_row["available"] and numpy_row["backend"] == "cpu"
    atomic_row = next(r for r in rows if r["name"] == "atomic")
    assert atomic_row["available"] == (not atomic_row["why_not"])
    assert {"gm-cl", "sm-dl", "irregular-reduction", "masked-tree", "sort"} <= {
        r["name"] for r in rows}
    result = runner.invoke(app, ["info"])
    assert result.exit_code == 0 and "backend (auto)" in result.stdout


def test_installed_executable(tmp_path):
    exe = shutil.which("gpumine")
    assert exe
    path = tmp_path / "x.bin"
    write_minebench_bin(path, make_uniform(300, 2, random_state=0))
    done = subprocess.run([exe, "cluster", str(path), "-k", "3", "--json"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["rows"] == 300
    failed = subprocess.run([exe, "cluster", str(tmp_path / "none.bin")], capture_output=True,
                            text=True, timeout=300)
    assert failed.returncode == 1 and "Traceback" not in failed.stderr


def test_python_dash_m_runs_the_same_command_line(tmp_path):
    path = tmp_path / "x.bin"
    write_minebench_bin(path, make_uniform(200, 2, random_state=1))
    done = subprocess.run([sys.executable, "-m", "gpumine", "cluster", str(path), "-k", "2",
                           "--json"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["rows"] == 200
    usage = subprocess.run([sys.executable, "-m", "gpumine", "bench", "run", "nope"],
                           capture_output=True, text=True, timeout=300)
    assert usage.returncode == 2


def test_help_keeps_every_default():
    """Rich markup ate the '[default: ...]' of options whose default is documented in text."""
    result = runner.invoke(app, ["cluster", "--help"])
    assert result.exit_code == 0
    output = " ".join(result.output.split())  # wrapped lines joined
    for text in ("[default: 8]", "[default: every numeric column]", "[default: k-means++]",
                 "[default: 300]", "[default: 1e-4]", "[default: haar]", "[default: 1]"):
        assert text in output, text
    assert output.count("[default: auto]") >= 4  # device, assign, update, grid size, threshold


@pytest.mark.parametrize(("algorithm", "suffix"), [("kmeans", ".parquet"),
                                                   ("wavecluster", ".csv")])
def test_fit_sample_with_dropped_nulls_writes_null_labels(tmp_path, algorithm, suffix):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    a, b = rng.normal(size=1000), rng.normal(size=1000)
    a[5] = np.nan
    pq.write_table(pa.table({"a": a, "b": b}), tmp_path / "in.parquet")
    out = tmp_path / f"out{suffix}"
    result = runner.invoke(app, ["cluster", str(tmp_path / "in.parquet"), "--fit-sample", "500",
                                 "--nulls", "drop", "--out", str(out), "--algorithm", algorithm,
                                 "--quiet"])
    assert result.exit_code == 0, result.output
    if suffix == ".parquet":
        labels = pq.read_table(out).column("cluster")
    else:
        import pyarrow.csv as pacsv

        labels = pacsv.read_csv(out).column("cluster")
    assert len(labels) == 1000 and labels.null_count == 1 and labels[5].as_py() is None


def test_sigterm_while_writing_leaves_no_temporary_file(tmp_path):
    """SIGTERM is handled like SIGINT: the partial output is removed, the target never made."""
    import signal
    import time

    source = tmp_path / "big.parquet"
    made = runner.invoke(app, ["datasets", "make-uniform", "3000000", "8", str(source)])
    assert made.exit_code == 0, made.output
    out = tmp_path / "out.parquet"
    proc = subprocess.Popen([sys.executable, "-m", "gpumine", "cluster", str(source),
                             "--fit-sample", "2000", "--device", "cpu", "--out", str(out),
                             "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob(".out.parquet.*.tmp")):
        assert proc.poll() is None, "finished before the test could interrupt it"
        assert time.monotonic() < deadline, "no temporary output appeared"
        time.sleep(0.005)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 128 + signal.SIGTERM
    assert not out.exists()
    assert list(tmp_path.iterdir()) == [source]


def test_unwritable_output_directory_is_found_before_the_fit(data_dir, monkeypatch):
    """The probe runs first and the message names the user's path, not a temporary file."""
    import tempfile

    import gpumine.adapters.sinks as sinks
    from gpumine import GPUKMeans

    locked = data_dir / "locked"
    locked.mkdir()
    real = tempfile.mkstemp

    def mkstemp(*args, dir=None, **kwargs):
        if dir is not None and Path(dir) == locked:
            raise PermissionError(13, "Permission denied")
        return real(*args, dir=dir, **kwargs)

    real_unnamed = tempfile.TemporaryFile

    def unnamed(*args, dir=None, **kwargs):  # the probe (an unnamed file where possible)
        if dir is not None and Path(dir) == locked:
            raise PermissionError(13, "Permission denied")
        return real_unnamed(*args, dir=dir, **kwargs)

    fits = []
    monkeypatch.setattr(sinks.tempfile, "mkstemp", mkstemp)
    monkeypatch.setattr(sinks.tempfile, "TemporaryFile", unnamed)
    monkeypatch.setattr(GPUKMeans, "fit", lambda self, *a, **k: fits.append(1))
    out = locked / "out.parquet"
    result = runner.invoke(app, ["cluster", str(data_dir / "good.parquet"), "--out", str(out)])
    assert result.exit_code == 1 and fits == []
    message = " ".join(result.output.split())
    assert f"{out}: cannot write in {locked} (Permission denied)" in message
    assert ".tmp" not in message


@pytest.mark.parametrize(("command", "target"), [("cluster", "x.csv"), ("convert", "n.arff"),
                                                 ("convert", "n.csv")])
def test_a_nested_column_the_output_cannot_hold_is_named_before_any_work(tmp_path, command,
                                                                         target):
    import pyarrow as pa
    import pyarrow.parquet as pq

    source = tmp_path / "nested.parquet"
    pq.write_table(pa.table({"a": np.arange(50.0), "b": np.arange(50.0) ** 2,
                             "l": pa.array([[i] for i in range(50)])}), source)
    args = (["cluster", str(source), "-k", "2", "--out", str(tmp_path / target)]
            if command == "cluster" else ["datasets", "convert", str(source),
                                          str(tmp_path / target)])
    result = runner.invoke(app, args)
    assert result.exit_code == 1
    message = " ".join(result.output.split())
    assert f"{tmp_path / target}: column 'l'" in message and "Traceback" not in message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nested.parquet"]


def _long_csv(path, tail):
    """120,000 rows (past pyarrow's first 1 MiB block) of integers; the last 5 of column a
    are ``tail``."""
    n = 120_000
    rows = [f"{i * 1000003},{i % 7},{i * 7919}" for i in range(n - 5)]
    rows += [f"{tail},{i % 7},{i * 7919}" for i in range(n - 5, n)]
    path.write_text("a,b,c\n" + "\n".join(rows) + "\n")
    return path


def test_csv_types_come_from_the_whole_file(tmp_path):
    source = _long_csv(tmp_path / "mixed.csv", "1.5")
    result = runner.invoke(app, ["cluster", str(source), "-k", "2", "--json", "--quiet"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["columns"] == ["a", "b", "c"]  # a widened to float


def test_a_column_left_out_is_named(tmp_path):
    source = _long_csv(tmp_path / "text.csv", "-")
    result = runner.invoke(app, ["cluster", str(source), "-k", "2", "--json", "--quiet"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["columns"] == ["b", "c"]
    assert "leaving out non-numeric columns: a (string)" in " ".join(result.stderr.split())


def test_a_repeated_csv_header_is_one_line(tmp_path):
    source = tmp_path / "dup.csv"
    source.write_text("a,a\n1,2\n3,4\n")
    result = runner.invoke(app, ["cluster", str(source), "-k", "1"])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "names column 'a' more than once" in " ".join(result.output.split())


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.DataConversionWarning")
def test_labels_and_booleans_of_a_labelled_file(tmp_path):
    """Re-clustering a file gpumine labelled leaves its label column out, with a note; a
    boolean column is a feature, cast with a one-line warning."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    source = tmp_path / "labelled.parquet"
    pq.write_table(pa.table({"a": np.arange(50.0), "flag": np.arange(50) % 2 == 0,
                             "cluster": np.zeros(50, np.int32)}), source)
    result = runner.invoke(app, ["cluster", str(source), "-k", "2", "--json", "--quiet"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["columns"] == ["a", "flag"]
    notes = " ".join(result.stderr.split())
    assert "leaving out column 'cluster'" in notes
    chosen = runner.invoke(app, ["cluster", str(source), "-k", "2", "--json", "--quiet",
                                 "--columns", "a,cluster"])
    assert json.loads(chosen.stdout)["columns"] == ["a", "cluster"]


def test_warnings_are_one_line_in_the_command_line(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    source = tmp_path / "flags.parquet"
    pq.write_table(pa.table({"a": np.arange(50.0), "flag": np.arange(50) % 2 == 0}), source)
    result = subprocess.run([sys.executable, "-m", "gpumine", "cluster", str(source), "-k", "2",
                             "--json", "--quiet"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "warning: column 'flag' is boolean: cast to float64" in result.stderr
    assert "warnings.warn" not in result.stderr and ".py:" not in result.stderr


def test_the_command_line_starts_without_the_heavy_libraries():
    """`gpumine --help` imports neither scikit-learn, SciPy, pandas nor pyarrow (they cost
    seconds at start-up); commands import them when they run."""
    code = ("import sys, gpumine, gpumine.cli.app; "
            "print(sorted(m for m in ('sklearn', 'scipy', 'pandas', 'pyarrow') "
            "if m in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True).stdout.strip()
    assert loaded == "[]"
    result = subprocess.run([sys.executable, "-m", "gpumine", "cluster", "--help"],
                            capture_output=True, text=True)
    assert result.returncode == 0 and "--n-clusters" in result.stdout


def test_several_gpus_on_the_command_line():
    """``--device gpu:all`` / ``0,1`` reach the job as "gpu:all" / [0, 1]: WaveCluster is
    refused in one line before any GPU is asked for; k-means runs on every GPU, or, on a
    machine without one, says what is missing."""
    from gpumine.backend import gpu_available

    result = runner.invoke(app, ["cluster", "--demo", "--device", "0,1", "--algorithm",
                                 "wavecluster"])
    output = " ".join(result.output.split())
    assert result.exit_code == 1 and "several GPUs are for k-means" in output, output
    result = runner.invoke(app, ["cluster", "--demo", "--device", "gpu:all", "--json",
                                 "--quiet"])
    output = " ".join(result.output.split())
    if gpu_available():
        assert result.exit_code == 0, output
        assert json.loads(result.output.splitlines()[-1])["device_ids"][0] == 0
    else:
        assert result.exit_code == 1 and "not available" in output, output
    assert "Traceback" not in output
