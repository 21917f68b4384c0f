"""The gpumine command line: typer's CliRunner, and the installed executable."""

from __future__ import annotations

import json
import shutil
import subprocess

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

    expected = ("gpu", "tiled") if gpu_available() else ("cpu", "numpy")
    assert (summary["device"], summary["assign"]) == expected
    assert summary["iterations"] >= 1 and summary["inertia"] > 0


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


def test_cluster_arff(shared_datasets):
    result = runner.invoke(app, ["cluster", str(shared_datasets / "shapes" / "hepta.arff"),
                                 "-k", "7"])
    assert result.exit_code == 0, result.output
    assert "iterations" in result.stdout


@pytest.mark.parametrize(("args", "message"), [
    (["cluster", "missing.parquet"], "no such file"),
    (["cluster", "--demo", "--assign", "nope"], "unknown kmeans.assign strategy 'nope'"),
    (["cluster", "--demo", "-k", "200000"], "should be >= n_clusters"),
    (["strategies", "--kind", "nope"], "unknown strategy kind"),
])
def test_user_errors_are_one_line(args, message):
    result = runner.invoke(app, args)
    assert result.exit_code == 1
    assert message in result.output
    assert "Traceback" not in result.output


def test_corrupt_bin_and_unsupported_type(tmp_path):
    bad = tmp_path / "bad.bin"
    bad.write_bytes(np.array([10, 3], "<i4").tobytes() + b"\0" * 12)
    result = runner.invoke(app, ["cluster", str(bad)])
    assert result.exit_code == 1 and "truncated" in result.output
    other = tmp_path / "x.xlsx"
    other.write_bytes(b"x")
    result = runner.invoke(app, ["cluster", str(other)])
    assert result.exit_code == 1 and "unsupported file type" in result.output


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
