"""gpumine bench: every experiment in quick mode, resuming, and the regression gate."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
from typer.testing import CliRunner

from gpumine.backend import get_backend
from gpumine.bench.experiments import (
    EXPERIMENTS,
    Run,
    irregular_reduction,
    peer_libraries,
    report_experiment,
    run_experiment,
    synchronization,
    wavelet,
)
from gpumine.bench.experiments import common as experiments_common
from gpumine.bench.gate import baseline_path, check, measure_ratios
from gpumine.cli import app

runner = CliRunner()

PLOTS = {"update-vs-k": ["update-vs-k.png", "update-vs-k-speedup.png"],
         "update-vs-d": ["update-vs-d.png"], "corel": ["corel.png"],
         "gpu-vs-hybrid": ["gpu-vs-hybrid.png"], "gpu-vs-cpu": ["gpu-vs-cpu.png"],
         "wavecluster": ["wavecluster.png"], "peers": ["peers.png"],
         "wavecluster-quality": ["wavecluster-quality.png"]}


@pytest.mark.parametrize("experiment", list(EXPERIMENTS))
def test_quick_experiment_writes_csv_json_and_plots(experiment, tmp_path, monkeypatch):
    import urllib.request

    def no_network(*args, **kwargs):
        raise AssertionError("--quick must not use the network")

    monkeypatch.setattr(urllib.request, "urlopen", no_network)
    monkeypatch.setenv("GPUMINE_DATA", str(tmp_path / "no-corel-here"))
    result = runner.invoke(app, ["bench", "run", experiment, "--quick", "--device", "cpu",
                                 "--out", str(tmp_path), "-q"])
    assert result.exit_code == 0, result.output
    with open(tmp_path / f"{experiment}.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert rows
    timed = [r for r in rows if r.get("seconds") or r.get("fit_seconds")
             or r.get("iteration_seconds") or r.get("total_seconds")]
    assert timed and all(float(next(v for k, v in r.items() if k.endswith("seconds") and v))
                         > 0 for r in timed)
    if experiment not in ("gpu-vs-cpu", "wavecluster-quality"):  # whole fits themselves
        user_level = [r for r in rows if any("fit from host data" in str(v) for v in r.values())]
        assert user_level, "the user-level fit time is missing beside the stages"
    record = json.loads((tmp_path / f"{experiment}.json").read_text())
    assert record["complete"] and record["device"] == "cpu" and record["commit"]
    assert record["parameters"] and len(record["rows"]) == len(rows)
    for png in PLOTS[experiment]:
        assert (tmp_path / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert record["summary"]["plots"] == PLOTS[experiment]


_EXPERIMENT_MODULES = (experiments_common, irregular_reduction, peer_libraries, synchronization,
                       wavelet)

def test_an_experiment_resumes_from_its_csv(tmp_path, monkeypatch):
    run = Run(get_backend("cpu"), tmp_path, quick=True, log=lambda line: None)
    run_experiment("update-vs-k", run)
    first = (tmp_path / "update-vs-k.csv").read_text()
    calls = []
    real = experiments_common.measure
    for module in _EXPERIMENT_MODULES:
        monkeypatch.setattr(module, "measure", lambda *a, **k: calls.append(1) or real(*a, **k))
    run_experiment("update-vs-k", run)
    assert calls == [] and (tmp_path / "update-vs-k.csv").read_text() == first
    # a cut-off run: drop the last row, and only that cell is measured again
    lines = first.splitlines(keepends=True)
    (tmp_path / "update-vs-k.csv").write_text("".join(lines[:-1]))
    run_experiment("update-vs-k", run)
    assert len(calls) == 1
    assert len((tmp_path / "update-vs-k.csv").read_text().splitlines()) == len(lines)


def test_report_rewrites_summary_and_plots_from_the_record_alone(tmp_path, monkeypatch):
    run = Run(get_backend("cpu"), tmp_path, quick=True, log=lambda line: None)
    run_experiment("update-vs-k", run)
    before = json.loads((tmp_path / "update-vs-k.json").read_text())
    for png in PLOTS["update-vs-k"]:
        (tmp_path / png).unlink()
    # no measurement may happen: the report reads the CSV and JSON only
    for module in _EXPERIMENT_MODULES:
        monkeypatch.setattr(module, "measure", lambda *a, **k: pytest.fail("measured"))
    result = runner.invoke(app, ["bench", "report", "all", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    after = json.loads((tmp_path / "update-vs-k.json").read_text())
    assert after["summary"] == before["summary"] and after["rows"] == before["rows"]
    assert after["commit"] == before["commit"] and after["date"] == before["date"]
    assert after["reported"]["commit"] and after["reported"]["date"]
    for png in PLOTS["update-vs-k"]:
        assert (tmp_path / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_keeps_what_the_run_measured_beside_the_rows(tmp_path):
    run_experiment("peers", Run(get_backend("cpu"), tmp_path, quick=True, log=lambda line: None))
    measured = json.loads((tmp_path / "peers.json").read_text())["measured"]
    assert measured["copy_bandwidth_bytes_per_s"] > 0 and measured["gemm_flops_per_s"] > 0
    report_experiment("peers", tmp_path)
    after = json.loads((tmp_path / "peers.json").read_text())
    assert after["measured"] == measured
    assert after["summary"]["gemm_flops_per_s"] == measured["gemm_flops_per_s"]


def test_report_without_a_record_fails_cleanly(tmp_path):
    result = runner.invoke(app, ["bench", "report", "corel", "--out", str(tmp_path)])
    assert result.exit_code == 1 and "run `gpumine bench run` first" in result.output
    result = runner.invoke(app, ["bench", "report", "all", "--out", str(tmp_path)])
    assert result.exit_code == 1 and "no recorded experiment" in result.output
    (tmp_path / "corel.json").write_text("[]")
    (tmp_path / "corel.csv").write_text("k\n1\n")
    result = runner.invoke(app, ["bench", "report", "corel", "--out", str(tmp_path)])
    assert result.exit_code == 1 and "not a gpumine bench record" in result.output
    assert runner.invoke(app, ["bench", "report", "nope"]).exit_code == 2


def test_unknown_experiment_is_a_usage_error():
    assert runner.invoke(app, ["bench", "run", "nope", "--quick"]).exit_code == 2


def test_committed_baseline_covers_every_ratio():
    backend = get_backend("cpu")
    baseline = json.loads(baseline_path(backend).read_text())
    assert set(baseline["ratios"]) == set(measure_ratios(backend, runs=1))
    assert baseline["tolerance"] == 1.6


def test_gate_passes_on_this_code_and_fails_on_an_injected_3x_slowdown(monkeypatch):
    # The baseline is measured here, on this machine, as --update-baseline records one:
    # the committed baseline belongs to the machine that measured it. The injected slowdown
    # is 3x against the 1.6x tolerance: a 2x one measured under the tolerance once on a
    # loaded 2-core CI machine, whose baseline had been measured slow.
    backend = get_backend("cpu")
    baseline = {"ratios": measure_ratios(backend), "tolerance": 1.6}
    measured = measure_ratios(backend)
    assert check(measured, baseline) == [], (measured, baseline)

    from gpumine.kmeans import reference

    real = reference.update_numpy

    def three_times_as_slow(*args, **kwargs):
        real(*args, **kwargs)
        real(*args, **kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(reference, "update_numpy", three_times_as_slow)
    measured = measure_ratios(backend)
    failures = check(measured, baseline)
    assert len(failures) == 1 and failures[0].startswith("update numpy / one pass over X"), \
        (failures, measured, baseline)


def test_gate_measures_at_least_once():
    with pytest.raises(ValueError, match="at least 1"):
        measure_ratios(get_backend("cpu"), runs=0)


def test_gate_reports_missing_ratios():
    assert check({}, {"ratios": {"x": 1.0}}) == ["x: not measured"]
    assert check({"x": 1.5}, {"ratios": {"x": 1.0}}, tolerance=1.6) == []


def test_gate_command(tmp_path):
    path = tmp_path / "base.json"
    result = runner.invoke(app, ["bench", "gate", "--device", "cpu", "--update-baseline",
                                 "--runs", "1", "--baseline", str(path)])
    assert result.exit_code == 0, result.output
    data = json.loads(path.read_text())
    data["ratios"] = {name: value / 4 for name, value in data["ratios"].items()}
    path.write_text(json.dumps(data))
    result = runner.invoke(app, ["bench", "gate", "--device", "cpu", "--runs", "1",
                                 "--baseline", str(path)])
    assert result.exit_code == 1 and "performance regression" in result.output
    assert runner.invoke(app, ["bench", "gate", "--runs", "0"]).exit_code == 2


@pytest.mark.gpu
def test_gpu_gate_against_its_baseline():
    backend = get_backend("gpu")
    path = baseline_path(backend)
    assert path.exists(), "record it on a GPU machine: gpumine bench gate --update-baseline"
    ratios = measure_ratios(backend)
    assert all(np.isfinite(list(ratios.values())))
    assert check(ratios, json.loads(path.read_text())) == []
