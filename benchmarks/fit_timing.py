"""User-level timings of the GPU path: what ``fit`` and ``predict`` cost as users call them.

Usage (repository root, on a machine with a CUDA GPU and CuPy)::

    python benchmarks/fit_timing.py --out benchmarks/results [--sklearn] [--torch]

Measured in one process, each figure the median of several calls after a warm-up
(CUDA events around device-only work, a synchronized host clock around calls that
start from host data):

* k-means++ init, 4M x 8 float32 (uniform, MT19937 seed 5489), k = 200: the device
  strategy alone, and
  ``GPUKMeans(200, max_iter=1).fit`` from device data (the issue's measure);
* the whole default fit of the same data (k-means++, tol 1e-4) from host NumPy,
  and, with ``--sklearn``, scikit-learn's ``KMeans`` on the machine's CPUs from the
  same k-means++ centres (one run: it takes a minute);
* 17,695 x 18, k = 128 (Corel size): per Lloyd iteration ((T(60) - T(10)) over the
  difference in iterations, fits from one init with tol = 0, the longer one stopping at
  strict convergence), where a 10-iteration fit's host time goes (cProfile's top
  functions by own time), a 10-iteration fit with k-means++ from device
  data, and with ``--torch`` a plain PyTorch Lloyd (cdist argmin + index_add) per
  iteration;
* 4M x 8, k = 200: per Lloyd iteration the same way;
* WaveCluster on 16.7M 2-d points, grid 4096: ``fit`` from device and from host data
  (with a cProfile of the host-data fit), the device fit given the threshold that
  ``"auto"`` chose (what auto costs), and the host-to-device copy alone, pageable
  against the pinned staging.

Writes ``fit-timing-<date>-<commit>.json`` with the device, versions and commit.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
from pathlib import Path

import numpy as np
from gpu_check import device_time  # the script's folder is on sys.path

from gpumine.backend import get_backend
from gpumine.bench.record import commit, write_record
from gpumine.bench.timing import measure, timed


def wall(cp, fn, repeats=5, warmup=1):
    """Median seconds of ``fn()`` on a synchronized host clock (host data in, results out),
    and every call's seconds (``gpumine.bench.timing.measure``, the "host" clock)."""
    m = measure(fn, get_backend("gpu"), repeats=repeats, warmup=warmup, budget_seconds=None,
                clock="host")
    return m.seconds, m.times


def save(out, prefix: str, record: dict) -> Path:
    """``gpumine.bench.record.write_record``, and say where."""
    path = write_record(out, prefix, record)
    print(f"wrote {path}")
    return path


def scale_parser(description: str):
    """The several-GPU benchmarks' arguments: ``--out``, the data's ``--n`` x ``--d``, the
    clusters ``--k`` and the timed ``--iters`` (100M x 32, k = 1024, 10: the issue's shape)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--n", type=int, default=100_000_000)
    parser.add_argument("--d", type=int, default=32)
    parser.add_argument("--k", type=int, default=1024)
    parser.add_argument("--iters", type=int, default=10)
    return parser


def blobs(n, d, centres, seed, offset=0.0):
    rng = np.random.default_rng(seed)
    middle = rng.uniform(-10, 10, size=(centres, d))
    return (middle[rng.integers(0, centres, n)] + rng.normal(size=(n, d))
            + offset).astype(np.float32)


def kmeans_section(cp, args) -> dict:
    from gpumine import GPUKMeans
    from gpumine.datasets import make_uniform
    from gpumine.kmeans import gpu

    out = {}
    X_host = make_uniform(4_000_000, 8, random_state=5489)  # the data: MT19937 uniform
    X = cp.ascontiguousarray(cp.asarray(X_host).T).T
    ones = cp.ones(len(X_host), cp.float32)

    def init():
        gpu.kmeans_plusplus(X, 200, sample_weight=ones, random_state=np.random.RandomState(0))

    out["kmeanspp_4M_8_200_strategy_s"], _ = wall(cp, init)
    out["fit_max_iter_1_4M_8_200_device_s"], _ = wall(
        cp, lambda: GPUKMeans(200, max_iter=1, random_state=0, device="gpu").fit(X))

    model = GPUKMeans(200, random_state=0, device="gpu")
    out["fit_default_4M_8_200_host_s"], runs = wall(cp, lambda: model.fit(X_host), repeats=3)
    out["fit_default_4M_8_200_host_runs_s"] = runs
    out["fit_default_4M_8_200_n_iter"] = int(model.n_iter_)
    out["fit_default_4M_8_200_inertia"] = float(model.inertia_)
    out["fit_default_4M_8_200_device_s"], _ = wall(
        cp, lambda: GPUKMeans(200, random_state=0, device="gpu").fit(X), repeats=3)

    init_centres = cp.asnumpy(gpu.kmeans_plusplus(X, 200, sample_weight=ones,
                                                  random_state=np.random.RandomState(0)))
    t5, _ = wall(cp, lambda: GPUKMeans(200, init=init_centres, max_iter=5, tol=0,
                                       device="gpu").fit(X), repeats=3)
    t25, _ = wall(cp, lambda: GPUKMeans(200, init=init_centres, max_iter=25, tol=0,
                                        device="gpu").fit(X), repeats=3)
    out["lloyd_iteration_4M_8_200_s"] = (t25 - t5) / 20
    if args.sklearn:
        from sklearn.cluster import KMeans

        ref, out["sklearn_fit_4M_8_200_s"] = timed(
            lambda: KMeans(200, init=init_centres, n_init=1).fit(X_host))
        out["sklearn_fit_4M_8_200_n_iter"] = int(ref.n_iter_)
        out["sklearn_threads"] = os.cpu_count()

    # Corel size
    C_host = blobs(17_695, 18, 128, seed=1)
    C = cp.ascontiguousarray(cp.asarray(C_host).T).T
    start_centres = C_host[np.random.RandomState(0).choice(len(C_host), 128, replace=False)]
    fits = {}
    for iters in (10, 60):
        def fit(iters=iters):
            m = GPUKMeans(128, init=start_centres, max_iter=iters, tol=0, device="gpu").fit(C)
            fits[iters] = m.n_iter_
        # 31 repeats: the per-iteration figure is a difference of two ~1.5 ms medians, and
        # with 7 it moved 21-30 us between runs on one machine
        out[f"corel_fit_{iters}_iter_device_s"], _ = wall(cp, fit, repeats=31)
    out["corel_n_iter"] = fits
    out["corel_lloyd_iteration_s"] = ((out["corel_fit_60_iter_device_s"]
                                       - out["corel_fit_10_iter_device_s"])
                                      / (fits[60] - fits[10]))
    out["corel_lloyd_iteration_device_s"] = corel_fused_iteration(cp, C, start_centres)
    out["corel_fit_profile"] = profile(lambda: GPUKMeans(128, init=start_centres, max_iter=10,
                                                         tol=0, device="gpu").fit(C))
    out["corel_fit_10_iter_kmeanspp_device_s"], _ = wall(
        cp, lambda: GPUKMeans(128, max_iter=10, random_state=0, device="gpu").fit(C), repeats=7)
    out["corel_step_breakdown"] = corel_step_breakdown(cp, C, start_centres)
    fitted = GPUKMeans(128, init=start_centres, max_iter=1, device="gpu").fit(C)
    out["corel_predict_device_s"], _ = wall(cp, lambda: fitted.predict(C), repeats=7)
    if args.torch:
        out.update(torch_corel(C_host, start_centres))
    return out


def profile(fn, calls=20, top=15) -> list:
    """cProfile of ``calls`` calls of ``fn``: the functions of most own time, in ms per call."""
    import cProfile
    import pstats

    fn()
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        fn()
    profiler.disable()
    stats = pstats.Stats(profiler).stats
    rows = sorted(stats.items(), key=lambda item: -item[1][2])[:top]
    return [{"function": f"{path.rsplit('/', 1)[-1]}:{line}({name})",
             "calls_per_fit": ncalls / calls, "own_ms_per_fit": 1e3 * tottime / calls,
             "cumulative_ms_per_fit": 1e3 * cumtime / calls}
            for (path, line, name), (_, ncalls, tottime, cumtime, _) in rows]


def events(cp, fn, repeats=50) -> float:
    """Median seconds of ``fn`` between CUDA events (device time, launches included)."""
    return measure(fn, get_backend("gpu"), repeats=repeats, budget_seconds=None).seconds


def corel_fused_iteration(cp, C, start_centres, repeats=15) -> float:
    """Device seconds per Lloyd iteration of a small fit (the fused loop, one launch per fit):
    CUDA events around one launch of 10 and one of 30 iterations from the same start (and its
    status readback), medians of ``repeats``, the difference over 20. The fits' difference
    above measures the same through two ~1.5 ms host medians; this has no host in it."""
    from gpumine.kmeans import gpu

    ones = cp.ones(C.shape[0], C.dtype)
    centres = cp.asarray(start_centres)

    def seconds(iterations):
        times = []
        for _ in range(repeats):
            loop = gpu.FusedLoop(C, ones, centres)
            start, end = cp.cuda.Event(), cp.cuda.Event()
            start.record()
            status = loop.run(0, iterations, 0.0)
            end.record()
            end.synchronize()  # sync: the timed launch
            assert status.done == iterations and status.finished  # no early convergence
            times.append(cp.cuda.get_elapsed_time(start, end) / 1e3)
        return float(np.median(times))

    seconds(10)  # warm-up
    return (seconds(30) - seconds(10)) / 20


def corel_step_breakdown(cp, C, start_centres) -> dict:
    """One Corel-size Lloyd iteration taken apart: each launch, and the readback."""
    from gpumine import registry
    from gpumine.kmeans import gpu

    k, d = start_centres.shape
    centers = cp.asarray(start_centres)
    centers_new = cp.empty_like(centers)
    labels = cp.zeros(C.shape[0], dtype=cp.int32)
    ones = cp.ones(C.shape[0], dtype=C.dtype)
    sums, weights = cp.zeros((k, d)), cp.zeros(k)
    buffers = gpu.LoopBuffers()
    assign = registry.load_strategy("kmeans.assign", "tiled")
    update = registry.resolve_strategy("kmeans.update", "auto", "gpu", n_samples=C.shape[0],
                                       n_features=d, n_clusters=k)
    atomic = registry.load_strategy("kmeans.update", "atomic")
    steps = {
        "assign": lambda: assign(C, centers, labels, changed=buffers.changed),
        "update": lambda: update.load()(C, labels, ones, sums, weights),
        "update_atomic": lambda: atomic(C, labels, ones, sums, weights),
        "finish": lambda: gpu.finish_centers(sums, weights, centers, centers_new, buffers),
    }
    out = {"update_strategy": update.name}
    out.update({f"{name}_s": events(cp, step) for name, step in steps.items()})
    out.update({f"{name}_device_s": device_time(cp, step, repeats=200)
                for name, step in steps.items()})

    out["status_readback_s"] = wall(cp, lambda: buffers.read_status(), repeats=50)[0]
    return out


def wavecluster_host_breakdown(cp, X_host) -> dict:
    """The host-data WaveCluster fit taken apart, each step synchronized."""
    from gpumine import WaveCluster
    from gpumine.adapters import validate_input
    from gpumine.backend import get_backend
    from gpumine.wavecluster import gpu

    backend = get_backend("gpu")
    model = WaveCluster(grid_size=4096, device="gpu")
    out = {}
    out["validate_and_copy_s"], _ = wall(cp, lambda: validate_input(
        model, X_host, reset=True, backend=backend, dtype=np.float64), repeats=3)
    X = validate_input(model, X_host, reset=True, backend=backend, dtype=np.float64).X
    out["bounds_s"], _ = wall(cp, lambda: gpu.bounds(X.T), repeats=3)
    out["fit_from_validated_device_columns_s"], _ = wall(cp, lambda: model.fit(X), repeats=3)
    return out


def torch_corel(X_host, start_centres) -> dict:
    """A plain PyTorch Lloyd iteration (cdist, argmin, index_add_) on the Corel-size data."""
    import torch

    X = torch.from_numpy(X_host).cuda()
    centres = torch.from_numpy(start_centres).cuda()
    k = centres.shape[0]

    def step(c):
        labels = torch.cdist(X, c).argmin(1)
        sums = torch.zeros_like(c).index_add_(0, labels, X)
        counts = torch.zeros(k, device=X.device).index_add_(0, labels, torch.ones_like(X[:, 0]))
        return sums / counts.clamp(min=1)[:, None]

    state = {"centres": centres}

    def iteration():
        state["centres"] = step(state["centres"])

    # PyTorch and CuPy both issue to the legacy default stream here, so CuPy's events
    # bracket PyTorch's work.
    seconds = measure(iteration, get_backend("gpu"), repeats=50, warmup=5, budget_seconds=None,
                      clock="batch").seconds
    return {"torch_corel_lloyd_iteration_s": seconds, "torch_version": torch.__version__}


def wavecluster_section(cp) -> dict:
    from gpumine import WaveCluster

    rng = np.random.default_rng(3)
    n = 4096 * 4096
    uniform = rng.uniform(0, 1, size=(n - n // 4, 2))
    discs = rng.uniform(0.1, 0.9, size=(8, 2))[rng.integers(0, 8, n // 4)]
    discs += rng.normal(scale=0.02, size=discs.shape)
    X_host = np.concatenate([uniform, discs])
    X = cp.asarray(X_host)
    out = {"wavecluster_points": n}
    from gpumine.backend import get_backend

    backend = get_backend("gpu")
    out["transfer_pageable_s"], _ = wall(cp, lambda: cp.asarray(X_host))
    out["transfer_staged_columns_s"], _ = wall(cp, lambda: backend.to_device_columns(X_host))
    out["transfer_bytes"] = int(X_host.nbytes)
    model = WaveCluster(grid_size=4096, device="gpu")
    out["wavecluster_4096_device_s"], _ = wall(cp, lambda: model.fit(X))
    out["wavecluster_4096_clusters"] = int(model.n_clusters_)
    # What threshold="auto" costs: the same fit given the threshold it chose.
    fixed = WaveCluster(grid_size=4096, device="gpu", threshold=model.threshold_)
    out["wavecluster_4096_fixed_threshold_device_s"], _ = wall(cp, lambda: fixed.fit(X))
    out["wavecluster_4096_auto_over_fixed"] = (out["wavecluster_4096_device_s"]
                                               / out["wavecluster_4096_fixed_threshold_device_s"])
    out["wavecluster_4096_host_s"], _ = wall(cp, lambda: model.fit(X_host))
    out["wavecluster_4096_host_profile"] = profile(lambda: model.fit(X_host), calls=3)
    out["wavecluster_4096_host_breakdown"] = wavecluster_host_breakdown(cp, X_host)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--sklearn", action="store_true")
    parser.add_argument("--torch", action="store_true")
    parser.add_argument("--only", choices=["kmeans", "wavecluster"], default=None)
    args = parser.parse_args()
    import cupy as cp
    import sklearn

    props = cp.cuda.runtime.getDeviceProperties(0)
    record = {
        "device": props["name"].decode() if isinstance(props["name"], bytes) else props["name"],
        "date": datetime.date.today().isoformat(), "commit": commit(),
        "versions": {"cupy": cp.__version__, "numpy": np.__version__,
                     "sklearn": sklearn.__version__, "python": platform.python_version(),
                     "cuda_runtime": cp.cuda.runtime.runtimeGetVersion()},
        "cpu_count": os.cpu_count(),
    }
    if args.only in (None, "kmeans"):
        record["kmeans"] = kmeans_section(cp, args)
    if args.only in (None, "wavecluster"):
        record["wavecluster"] = wavecluster_section(cp)
    save(args.out, "fit-timing", record)
    print(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
