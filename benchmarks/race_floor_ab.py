"""``auto``'s race with and without ``tiled``'s floor, beside ``tc-exact`` alone and flash-kmeans.

Usage (repository root, on a machine with a CUDA GPU, CuPy and PyTorch; flash-kmeans when
importable)::

    python benchmarks/race_floor_ab.py --out benchmarks/results [--repeats 5] \
        [--iterations 1 20 100]

On wide data (more than 32 features) ``assign="auto"`` races ``tc-exact`` and ``tiled`` on
every 8th row beside the first iteration (:mod:`gpumine.kmeans.measured`); ``tiled`` is left
out where its floor (:func:`gpumine.kmeans.gpu.tiled_floor_seconds`) is no faster than
``tc-exact``'s measured call. For each shape, in one process and in turns (round by round,
the median of ``--repeats`` rounds): ``GPUKMeans(k, init=C, max_iter=m, tol=0).fit(X)`` from
device data with ``"auto"`` (the floor on), ``"auto"`` with the floor taken off (the race as
before it), ``"tc-exact"`` and flash-kmeans' ``batch_kmeans_Euclid`` from the same centres.
Host wall times; whether the exact fits' labels are equal bit for bit; what ``auto``
picked and why.

Writes ``race-floor-ab-<date>-<commit>.json``.
"""

from __future__ import annotations

import argparse

import numpy as np
from fit_timing import save  # the script's folder is on sys.path
from fit_vs_flash import _data, _wall

SHAPES = [(1_000_000, 128, 1024, "uniform"), (1_000_000, 128, 1024, "blobs:64"),
          (1_000_000, 64, 1024, "uniform"), (600_000, 48, 512, "uniform"),
          (2_000_000, 40, 128, "blobs:64")]


def measure(cp, n, d, k, data, iterations, repeats) -> dict:
    import torch

    from gpumine import GPUKMeans
    from gpumine.kmeans import gpu

    host = _data(n, d, data)
    X = cp.asarray(host)
    C = X[:k].copy()
    floor = gpu.assign_tiled.floor_seconds
    try:
        import flash_kmeans
    except ImportError:
        flash_kmeans = None
    X_rows = torch.as_tensor(host, device="cuda")
    C_rows = torch.as_tensor(cp.asnumpy(C), device="cuda")
    row = {"n": n, "d": d, "k": k, "data": data, "repeats": repeats, "seconds": {},
           "reasons": {}, "labels_equal": {}, "floor_s": floor(n, d, k)}

    def fit(assign, m, floored):
        if floored:
            gpu.assign_tiled.floor_seconds = floor
        else:
            del gpu.assign_tiled.floor_seconds
        try:
            return GPUKMeans(k, init=C, max_iter=m, tol=0.0, assign=assign,
                             device="gpu").fit(X)
        finally:
            gpu.assign_tiled.floor_seconds = floor

    for m in iterations:
        runs = {"auto": lambda m=m: fit("auto", m, True),
                "auto-no-floor": lambda m=m: fit("auto", m, False),
                "tc-exact": lambda m=m: fit("tc-exact", m, True)}
        if flash_kmeans is not None:
            runs["flash-kmeans"] = lambda m=m: flash_kmeans.batch_kmeans_Euclid(
                X_rows[None], k, max_iters=m, tol=-1.0, init_centroids=C_rows[None])
        models = {name: run() for name, run in runs.items()}  # compile and warm
        times = {name: [] for name in runs}
        for _ in range(repeats):
            for name, run in runs.items():
                seconds, models[name] = _wall(cp, run)
                times[name].append(seconds)
        for name in runs:
            row["seconds"][f"{name}/{m}"] = float(np.median(times[name]))
        for name in ("auto", "auto-no-floor"):
            row["reasons"][f"{name}/{m}"] = models[name].strategy_reasons_["assign"]
            row["labels_equal"][f"{name}/{m}"] = bool(
                (models[name].labels_ == models["tc-exact"].labels_).all())
        print(n, d, k, data, m, {name: f"{1e3 * row['seconds'][f'{name}/{m}']:.2f} ms"
                                  for name in runs}, flush=True)
        print("   ", row["reasons"][f"auto/{m}"], flush=True)
    return row


def main() -> int:
    from gpumine.backend import get_backend
    from gpumine.bench.peers import peer_versions
    from gpumine.bench.record import context

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--iterations", type=int, nargs="+", default=[1, 20, 100])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    backend = get_backend("gpu")
    cp = backend.xp
    record = {**context(backend), **peer_versions(), "iterations": args.iterations,
              "shapes": []}
    for n, d, k, data in SHAPES:
        record["shapes"].append(measure(cp, n, d, k, data, args.iterations, args.repeats))
        cp.get_default_memory_pool().free_all_blocks()
    save(args.out, "race-floor-ab", record)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
