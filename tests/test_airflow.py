"""The Airflow provider with real Airflow: operators run by ``dag.test()`` on a SQLite database.

Skipped only when the ``airflow`` extra is not installed (the ``dev`` extra installs
it, so CI runs these). Airflow runs in subprocesses (``tests/airflow_driver.py``) with
``AIRFLOW_HOME`` in a temporary folder: its import configures logging and makes a home
folder, which must touch neither this test process nor the user's ``~/airflow``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("airflow") is None,
                       reason="the airflow extra is not installed (pip install -e '.[dev]')"),
    pytest.mark.slow,
]

REPO_ROOT = Path(__file__).resolve().parents[1]
DRIVER = Path(__file__).with_name("airflow_driver.py")
DAY = "2026-11-23"

# DAGs of the operators' behaviours; paths come from GPUMINE_TEST_DATA (set by the fixture).
TEST_DAGS = textwrap.dedent('''
    import os

    import pendulum
    from airflow.sdk import DAG

    from gpumine.airflow import GpuMineBenchmarkOperator, GpuMineClusterOperator

    DATA = os.environ["GPUMINE_TEST_DATA"]
    START = pendulum.datetime(2026, 11, 1, tz="UTC")

    with DAG("gpumine_ops", schedule=None, start_date=START, catchup=False) as ops:
        GpuMineClusterOperator(
            task_id="kmeans_dir", input=DATA + "/events/{{ ds }}", columns="a,b,c",
            output=DATA + "/out/{{ ds }}/new/labels.parquet",
            centers_output=DATA + "/out/{{ ds }}/new/centers.parquet", n_clusters=2,
            estimator_params={"max_iter": 50, "tol": 0.0})
        GpuMineClusterOperator(
            task_id="wave_glob", input=DATA + "/events/{{ ds }}/part-*.parquet",
            algorithm="wavecluster", columns=["a", "b"], labels_only=True,
            output=DATA + "/out/{{ ds }}/wave.csv", estimator_params={"grid_size": 64})
        GpuMineClusterOperator(
            task_id="bad_columns", input=DATA + "/events/{{ ds }}", columns=["a", "name"],
            output=DATA + "/out/{{ ds }}/never/labels.parquet", n_clusters=2)

    with DAG("gpumine_kill", schedule=None, start_date=START, catchup=False) as kill:
        GpuMineClusterOperator(task_id="killed", input=DATA + "/events/{{ ds }}",
                               output=DATA + "/killed/labels.parquet", n_clusters=2)

    with DAG("gpumine_gate", schedule=None, start_date=START, catchup=False) as gate:
        GpuMineBenchmarkOperator(task_id="gate_pass", device="cpu", runs=1,
                                 baseline=DATA + "/baselines/generous.json")
        GpuMineBenchmarkOperator(task_id="gate_fail", device="cpu", runs=1,
                                 baseline=DATA + "/baselines/strict.json")
''')


def _json_rows(stdout):
    """The JSON list that ``airflow ... -o json`` prints (after any log lines)."""
    return json.loads(next(line for line in reversed(stdout.splitlines())
                           if line.startswith(("[{", "[]"))))


def _points(rng, n):
    return np.concatenate([rng.normal(0, 0.2, (n // 2, 3)), rng.normal(5, 0.2, (n - n // 2, 3))])


@pytest.fixture(scope="module")
def airflow(tmp_path_factory):
    """A migrated metadata database with the example and test DAGs serialized.

    Returns ``run(command, ...)`` for the ``airflow`` command line, ``dag(file, id)``
    for a ``dag.test()`` of one logical date, and the folders.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    from gpumine.backend import get_backend
    from gpumine.bench.gate import baseline_path

    home = tmp_path_factory.mktemp("airflow_home")
    dags, data = home / "dags", home / "data"
    (data / "events" / DAY).mkdir(parents=True)
    dags.mkdir()
    rng = np.random.default_rng(0)
    for part in range(2):  # one day's partition: two files with the same columns
        X = _points(rng, 600)
        pq.write_table(pa.table({"a": X[:, 0], "b": X[:, 1], "c": X[:, 2],
                                 "name": [f"p{part}-{i}" for i in range(len(X))]}),
                       data / "events" / DAY / f"part-{part}.parquet")
    (data / "events" / DAY / "_SUCCESS").write_text("")  # skipped, as pyarrow skips it
    (dags / "gpumine_daily_dag.py").write_text(
        (REPO_ROOT / "examples" / "gpumine_daily_dag.py").read_text())
    (dags / "gpumine_test_dags.py").write_text(TEST_DAGS)
    baseline = json.loads(baseline_path(get_backend("cpu")).read_text())
    (data / "baselines").mkdir()
    for name, factor in (("generous", 1000.0), ("strict", 1e-3)):
        scaled = {**baseline, "ratios": {k: v * factor for k, v in baseline["ratios"].items()}}
        (data / "baselines" / f"{name}.json").write_text(json.dumps(scaled))
    env = {**os.environ, "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
           "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "GPUMINE_TEST_DATA": str(data),
           "GPUMINE_EXAMPLE_DATA": str(data / "example")}

    def run(*command, check=True):
        result = subprocess.run([sys.executable, "-m", "airflow", *command], env=env,
                                capture_output=True, text=True, timeout=600)
        if check:
            assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        return result

    def dag(file, dag_id, *flags):
        result = subprocess.run([sys.executable, str(DRIVER), str(dags / file), dag_id, DAY,
                                 *flags], env=env, capture_output=True, text=True, timeout=600)
        log = result.stdout + result.stderr
        lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
        assert lines, log[-5000:]
        return json.loads(lines[-1][len("RESULT "):]), log

    run("db", "migrate")
    run("dags", "reserialize")
    listed = run("dags", "list", "-o", "json")
    ids = {row["dag_id"] for row in _json_rows(listed.stdout)}
    assert {"gpumine_daily", "gpumine_ops", "gpumine_kill", "gpumine_gate"} <= ids, ids
    return {"run": run, "dag": dag, "data": data, "env": env}


def test_provider_info_and_entry_point():
    from importlib.metadata import entry_points

    from gpumine.airflow.get_provider_info import get_provider_info

    info = get_provider_info()
    assert info["package-name"] == "gpumine" and info["versions"]
    modules = info["operators"][0]["python-modules"]
    assert {importlib.util.find_spec(m) is not None for m in modules} == {True}
    (entry,) = [e for e in entry_points(group="apache_airflow_provider")
                if e.value.startswith("gpumine.")]
    assert entry.load() is get_provider_info


def test_airflow_lists_the_provider(airflow):
    listed = airflow["run"]("providers", "list", "-o", "json")
    (row,) = [r for r in _json_rows(listed.stdout) if r["package_name"] == "gpumine"]
    from gpumine import __version__

    assert row["version"] == __version__


def test_bad_arguments_fail_when_the_dag_is_parsed_and_docstrings_run(airflow):
    script = textwrap.dedent('''
        import doctest, json
        from gpumine.airflow import GpuMineBenchmarkOperator, GpuMineClusterOperator
        import gpumine.airflow.operators.benchmark as benchmark
        import gpumine.airflow.operators.cluster as cluster
        errors = []
        for kwargs in ({"algorithm": "dbscan"}, {"device": "tpu"}, {"nulls": "skip"},
                       {"algorithm": "wavecluster", "n_clusters": 3},
                       {"algorithm": "wavecluster", "centers_output": "c.parquet"},
                       {"labels_only": True}, {"estimator_params": [1, 2]},
                       {"device": [0, 0]}, {"device": "gpu:all", "algorithm": "wavecluster"}):
            try:
                GpuMineClusterOperator(task_id="t", input="x.parquet", **kwargs)
                errors.append(None)
            except ValueError as exc:
                errors.append(str(exc))
        # several GPUs: the forms are accepted when the DAG is parsed (no GPU asked for)
        several = [GpuMineClusterOperator(task_id=f"s{i}", input="x.parquet", device=device
                                          ).device for i, device in enumerate(("gpu:all", [1, 0]))]
        try:
            GpuMineBenchmarkOperator(task_id="g", runs=0)
            errors.append(None)
        except ValueError as exc:
            errors.append(str(exc))
        failed = sum(doctest.testmod(m).failed for m in (cluster, benchmark))
        # progress of a long stage: one log line per PROGRESS_EVERY_S, not one per batch
        lines, clock = [], [0.0]
        class Log:
            def info(self, *args):
                lines.append(args[0] % args[1:])
        cluster.time.monotonic = lambda: clock[0]
        progress = cluster._ProgressLog(Log())
        for step in range(1, 101):  # 100 batches over 100 s
            clock[0] = float(step)
            progress("read", step * 1000, 100_000)
        print("RESULT " + json.dumps({"errors": errors, "doctest_failed": failed,
                                      "several": several,
                                      "progress": lines}))
    ''')
    result = subprocess.run([sys.executable, "-c", script], env=airflow["env"],
                            capture_output=True, text=True, timeout=300)
    line = [x for x in result.stdout.splitlines() if x.startswith("RESULT ")]
    assert line, result.stdout[-3000:] + result.stderr[-3000:]
    outcome = json.loads(line[-1][len("RESULT "):])
    assert outcome["doctest_failed"] == 0
    assert outcome["progress"] == ["gpumine: read: 31,000 rows of 100,000",
                                   "gpumine: read: 61,000 rows of 100,000",
                                   "gpumine: read: 91,000 rows of 100,000"]
    errors = outcome["errors"]
    assert None not in errors, errors
    assert "algorithm must be one of kmeans, wavecluster, got 'dbscan'" in errors[0]
    assert "device" in errors[1] and "nulls" in errors[2]
    assert "n_clusters is for k-means" in errors[3] and "centers_output" in errors[4]
    assert "labels_only needs an output" in errors[5] and "estimator_params" in errors[6]
    assert "t: device lists a GPU twice" in errors[7]
    assert "several GPUs are for k-means" in errors[8]
    assert "runs must be an integer >= 1" in errors[9]
    assert outcome["several"] == ["gpu:all", [1, 0]]


def test_example_dag_end_to_end_and_rerun_replaces_its_output(airflow):
    import pyarrow.parquet as pq

    outcome, log = airflow["dag"]("gpumine_daily_dag.py", "gpumine_daily")
    assert outcome["state"] == "success", log[-5000:]
    assert set(outcome["tasks"].values()) == {"success"}
    root = airflow["data"] / "example"
    labels = pq.read_table(root / "labels" / f"{DAY}.parquet")
    events = pq.read_table(root / "events" / DAY / "part-0.parquet")
    assert labels.column_names == [*events.column_names, "cluster"]
    assert labels.num_rows == events.num_rows == 10_000
    assert labels.column("event_id").to_pylist() == events.column("event_id").to_pylist()
    assert sorted(np.bincount(labels.column("cluster").to_numpy())) == [2500] * 4
    assert pq.read_table(root / "centers" / f"{DAY}.parquet").shape == (4, 6)
    summary = outcome["xcom"]["cluster"]
    assert {"rows", "algorithm", "device", "inertia", "n_iter"} <= set(summary)
    assert summary["rows"] == 10_000 and summary["algorithm"] == "kmeans"
    assert summary["device"] in ("cpu", "gpu") and summary["inertia"] > 0
    assert summary["columns"] == [f"x{j}" for j in range(6)]  # event_id left out, with a note
    assert "leaving out non-numeric columns: event_id" in log
    report = outcome["xcom"]["report"]
    assert report == {"date": DAY, "rows": 10_000, "device": summary["device"],
                      "n_iter": summary["n_iter"], "inertia": summary["inertia"],
                      "smallest_cluster": 2500, "largest_cluster": 2500}
    from gpumine.backend import gpu_available

    if not gpu_available():
        assert "device='auto' and no GPU on this worker" in log and "running on the CPU" in log

    first = (root / "labels" / f"{DAY}.parquet").stat()
    again, log = airflow["dag"]("gpumine_daily_dag.py", "gpumine_daily")
    assert again["state"] == "success", log[-5000:]
    second = (root / "labels" / f"{DAY}.parquet").stat()
    assert second.st_ino != first.st_ino  # a new file renamed over the old one, not appended
    assert pq.read_table(root / "labels" / f"{DAY}.parquet").equals(labels)
    assert again["xcom"]["cluster"]["inertia"] == summary["inertia"]
    assert not [p for p in (root / "labels").iterdir() if p.name.startswith(".")]


def test_operator_tasks_directory_glob_and_a_failing_input(airflow):
    import pyarrow.parquet as pq

    outcome, log = airflow["dag"]("gpumine_test_dags.py", "gpumine_ops")
    assert outcome["tasks"] == {"kmeans_dir": "success", "wave_glob": "success",
                                "bad_columns": "failed"}, log[-5000:]
    assert outcome["state"] == "failed"
    out = airflow["data"] / "out" / DAY
    labels = pq.read_table(out / "new" / "labels.parquet")  # its folder made by the task
    assert labels.num_rows == 1200 and labels.column_names[-1] == "cluster"
    assert sorted(np.bincount(labels.column("cluster").to_numpy())) == [600, 600]
    kmeans = outcome["xcom"]["kmeans_dir"]
    assert kmeans["rows"] == 1200 and kmeans["columns"] == ["a", "b", "c"]
    assert kmeans["n_iter"] >= 1 and kmeans["inertia"] > 0
    assert pq.read_table(out / "new" / "centers.parquet").column_names == ["a", "b", "c"]
    wave = outcome["xcom"]["wave_glob"]
    assert wave["algorithm"] == "wavecluster" and wave["rows"] == 1200
    assert wave["grid"] == [64, 64] and "noise" in wave and "inertia" not in wave
    assert (out / "wave.csv").read_text().splitlines()[0] == '"cluster"'
    # the bad input: a failed task, one line saying why, no output and no folder left behind
    assert not (out / "never").exists()
    assert "gpumine: column 'name'" in log
    assert "During handling of the above exception" not in log
    assert outcome["xcom"].get("bad_columns") is None


def test_killed_task_leaves_the_previous_output_whole(airflow):
    target = airflow["data"] / "killed" / "labels.parquet"
    target.parent.mkdir()
    target.write_bytes(b"yesterday's complete output")
    outcome, log = airflow["dag"]("gpumine_test_dags.py", "gpumine_kill", "--sigterm-on-write")
    assert outcome["tasks"] == {"killed": "failed"}, log[-5000:]
    assert "killed (SIGTERM); no output written" in log
    assert target.read_bytes() == b"yesterday's complete output"
    assert [p.name for p in target.parent.iterdir()] == ["labels.parquet"]  # no temporary file


def test_benchmark_operator_passes_and_fails_on_a_regression(airflow):
    outcome, log = airflow["dag"]("gpumine_test_dags.py", "gpumine_gate")
    assert outcome["tasks"] == {"gate_pass": "success", "gate_fail": "failed"}, log[-5000:]
    passed = outcome["xcom"]["gate_pass"]
    assert passed["passed"] is True and passed["device"] == "cpu"
    assert set(passed["ratios"]) == set(passed["baseline_ratios"])
    assert "gpumine: performance regression:" in log
