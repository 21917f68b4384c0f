"""Run every GPU check on a GPU machine and write benchmarks/results/gpu-check-<date>.json.

Usage (from the repository root, on a machine with a CUDA GPU and CuPy)::

    python benchmarks/gpu_check.py --out benchmarks/results

The record holds the device, driver, CuPy version, commit, each GPU test's outcome,
the per-Lloyd-iteration time of every update strategy on n = 1M, d = 8,
k in {10, 100, 400} (the default assign), and the default path against a plain
PyTorch GEMM + argmin + index_add Lloyd measured in the same process, with the
share of labels equal to an FP64 assignment for both.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]


def read_junit(paths) -> dict:
    """Outcome of every test case in pytest JUnit XML reports."""
    outcomes = {}
    for path in paths:
        for case in ET.parse(path).getroot().iter("testcase"):
            name = f"{case.get('classname')}::{case.get('name')}"
            status = "passed"
            for tag in ("failure", "error", "skipped"):
                if case.find(tag) is not None:
                    status = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
            outcomes[name] = status
    counts = {s: sum(v == s for v in outcomes.values())
              for s in ("passed", "failed", "error", "skipped")}
    ok = counts["failed"] == counts["error"] == 0 and counts["passed"] > 0
    return {"exit_code": 0 if ok else 1, "outcomes": outcomes, "counts": counts}


def run_gpu_tests(extra_args) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        junit = Path(tmp) / "junit.xml"
        proc = subprocess.run([sys.executable, "-m", "pytest", "-m", "gpu", "-p",
                               "no:cacheprovider", f"--junitxml={junit}", "-q", *extra_args],
                              cwd=REPO, capture_output=True, text=True)
        sys.stdout.write(proc.stdout[-6000:])
        sys.stderr.write(proc.stderr[-3000:])
        result = read_junit([junit]) if junit.exists() else {"outcomes": {}, "counts": {}}
    result["exit_code"] = proc.returncode
    return result


def device_time(cp, fn, repeats=10):
    """Seconds per call of ``fn``, issued back to back between two CUDA events (after a
    warm-up call): the device time of a call, without single-call launch gaps."""
    from gpumine.backend import get_backend
    from gpumine.bench.timing import measure

    # warm-up (includes NVRTC compilation), then the "batch" clock
    return measure(fn, get_backend("gpu"), repeats=repeats, budget_seconds=None,
                   clock="batch").seconds


def timings(cp) -> dict:
    from gpumine import registry
    from gpumine.backend import get_backend
    from gpumine.bench.peers import fp64_labels, gpumine_step, torch_step
    from gpumine.datasets import make_uniform

    backend = get_backend("gpu")

    result = {"update_per_iteration_s": {}, "peers": []}
    assign = registry.load_strategy("kmeans.assign", registry.resolve_strategy(
        "kmeans.assign", "auto", "gpu").name)
    n, d = 1_000_000, 8
    X = cp.ascontiguousarray(cp.asarray(make_uniform(n, d, random_state=5489)).T).T
    for k in (10, 100, 400):
        centers = X[:k].copy()
        row = {}
        for strategy in registry.list_strategies("kmeans.update", backend="gpu"):
            step, _ = gpumine_step(backend, X, centers, assign, strategy.load())
            repeats = 2 if strategy.name in ("gm-ct", "sm-ct", "masked-tree") else 5
            row[strategy.name] = device_time(cp, step, repeats)
            print(f"update {strategy.name:20s} k={k:4d}: {row[strategy.name] * 1e3:9.3f} ms",
                  flush=True)
        result["update_per_iteration_s"][str(k)] = row
    try:
        import torch
    except ImportError as exc:
        result["peers_skipped"] = f"torch not importable: {exc}"
        return result
    auto_update = registry.load_strategy("kmeans.update", registry.resolve_strategy(
        "kmeans.update", "auto", "gpu").name)
    for n, d, k in ((1_000_000, 4, 400), (4_000_000, 8, 200), (50_000, 32, 2048)):
        host = make_uniform(n, d, random_state=5489)
        X = cp.ascontiguousarray(cp.asarray(host).T).T
        centers = X[:k].copy()
        ours, labels = gpumine_step(backend, X, centers, assign, auto_update)
        ours_s = device_time(cp, ours, 20)
        X_rows = torch.as_tensor(host, device="cuda")
        theirs = torch_step(torch, X_rows, torch.as_tensor(host[:k], device="cuda"))
        theirs_s = device_time(cp, theirs, 20)
        reference = fp64_labels(cp, X, centers)
        ours()
        theirs()
        torch.cuda.synchronize()
        torch_labels = cp.asarray(theirs.labels.to(torch.int32))
        entry = {"n": n, "d": d, "k": k, "gpumine_s": ours_s, "torch_s": theirs_s,
                 "speedup_vs_torch": theirs_s / ours_s,
                 "gpumine_labels_equal_fp64": float((labels == reference).mean()),
                 "torch_labels_equal_fp64": float((torch_labels == reference).mean())}
        print(entry, flush=True)
        result["peers"].append(entry)
    return result


def _nvidia_driver() -> str:
    """The NVIDIA driver version as nvidia-smi reports it."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, check=True).stdout
        return out.strip().splitlines()[0]
    except (OSError, subprocess.CalledProcessError, IndexError):
        return "unknown"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--commit", default=os.environ.get("GPUMINE_COMMIT"))
    parser.add_argument("--junit", nargs="*", default=None,
                        help="use these JUnit reports of `pytest -m gpu` runs on this machine "
                             "kind instead of running the tests now (runs split across calls)")
    parser.add_argument("pytest_args", nargs="*")
    args = parser.parse_args()
    from gpumine.backend import cupy_module

    cp = cupy_module()
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    commit = args.commit
    if not commit:
        try:
            commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True,
                                    text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            commit = "unknown"
    record = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": props["name"].decode() if isinstance(props["name"], bytes) else props["name"],
        "driver": _nvidia_driver(),
        "cuda_driver_api": cp.cuda.runtime.driverGetVersion(),
        "cuda_runtime": cp.cuda.runtime.runtimeGetVersion(),
        "cupy": cp.__version__, "numpy": np.__version__, "commit": commit,
    }
    if args.junit:
        record["tests"] = read_junit(args.junit)
        record["tests"]["from_reports"] = [Path(p).name for p in args.junit]
    else:
        record["tests"] = run_gpu_tests(args.pytest_args)
    record["timings"] = timings(cp)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"gpu-check-{datetime.date.today().isoformat()}.json"
    path.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {path}")
    tests = record.get("tests", {"exit_code": 0})
    return 0 if tests["exit_code"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
