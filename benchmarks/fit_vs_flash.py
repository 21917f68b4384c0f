"""Fits of m Lloyd iterations from one init: gpumine's assignments against flash-kmeans.

Usage (repository root, on a machine with a CUDA GPU, CuPy and PyTorch; flash-kmeans when
importable)::

    python benchmarks/fit_vs_flash.py --out benchmarks/results [--iterations 20 100] \
        [--data uniform blobs:64 blobs:1024] [--only 10000000,32,1024] \
        [--names tc-exact tc-exact+atomic-fixed auto]

For each shape of the issue "Exact labels at tensor-core speed" (``--data``: uniform data,
MT19937 seed 5489, or ``blobs:C``, rows around C centres drawn in [-10, 10]^d with unit
normal noise, seed 0; the first k points as centres), in one process: ``GPUKMeans(k, init=C,
max_iter=m, tol=0).fit(X)`` from device data with ``assign`` = tiled / tc-exact / hamerly
(where it takes d) and ``"auto"``, and flash-kmeans' ``batch_kmeans_Euclid`` for m
iterations from the same centres (TF32, not exact); the host-timed wall time of each, the
share of final labels (of the first million rows) equal to an FP64 assignment to each fit's
own final centres, and
what ``"auto"`` picked and why (on a large fit it races the exact assignments on the data:
:mod:`gpumine.kmeans.measured`). One iteration from the init, brute force, is in
``tc_assign.py``; this measures what a user waits for over a fit, where Hamerly's bounds
pay in the later iterations.

With two or more ``--iterations`` (m1 < m2: the first and the last), each fit's
steady-state iteration is ``(t(m2) - t(m1)) / (m2 - m1)``: the iterations past m1, the
fit's fixed costs (upload of the init, binding, k-means' final labels) cancelled -- where
both fits ran all their iterations (``n_iter``), else left out. One call of each fit
differs from the next by up to a millisecond, which moves a steady iteration of 0.1 ms by
a tenth: ``--repeats r`` times each fit r times, the median. Beside it the floors of a
brute-force iteration: ``2 n d k`` flops at the issue's exact-FP32 and TF32 rates (51.2 and
412 TFLOP/s, an H100 PCIe's) and at this device's FP32 rate (its SMs x 128 lanes x 2 flops
x its clock; a bound-based assignment skips distances, so it may go below them).

Writes ``fit-vs-flash-<date>-<commit>.json``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from fit_timing import save  # the script's folder is on sys.path
from tc_assign import FP32_RATE, TF32_RATE  # the rates (an H100 PCIe's)

#: Rows whose labels are checked against an FP64 assignment (the first ones; all of X at
#: 10M x 1024 centres would take longer in float64 than the fits).
_CHECKED = 1_000_000
SHAPES = [(1_000_000, 4, 400), (4_000_000, 8, 200), (4_000_000, 2, 100), (50_000, 32, 2048),
          (10_000_000, 32, 1024), (1_000_000, 128, 1024)]


def _wall(cp, run) -> tuple[float, object]:
    cp.cuda.Device().synchronize()
    start = time.perf_counter()
    result = run()
    cp.cuda.Device().synchronize()
    return time.perf_counter() - start, result


def _timed(cp, run, repeats) -> tuple[float, object]:
    """The median wall time of ``repeats`` calls, and the last call's result."""
    times, result = [], None
    for _ in range(repeats):
        seconds, result = _wall(cp, run)
        times.append(seconds)
    return float(np.median(times)), result


def _data(n, d, data):
    from gpumine.datasets import make_uniform

    if data == "uniform":
        return make_uniform(n, d, random_state=5489).astype(np.float32)
    centres = int(data.split(":")[1])
    rng = np.random.default_rng(0)
    middle = rng.uniform(-10, 10, size=(centres, d)).astype(np.float32)
    return middle[rng.integers(0, centres, n)] + rng.standard_normal((n, d), np.float32)


def measure(cp, n, d, k, iterations, data="uniform", names=None, repeats=1) -> dict:
    import torch

    from gpumine import GPUKMeans
    from gpumine.bench.peers import fp64_labels

    host = _data(n, d, data)
    X = cp.asarray(host)
    C = X[:k].copy()
    row = {"n": n, "d": d, "k": k, "data": data, "repeats": repeats, "seconds": {},
           "labels_equal_fp64": {},
           "auto": None, "auto_reason": None}
    if names is None:
        names = ["tiled", "tc-exact", "auto"] + (["hamerly"] if d <= 32 else [])
    try:
        import flash_kmeans
    except ImportError as exc:
        flash_kmeans = None
        row["flash_skipped"] = str(exc)
    X_rows = torch.as_tensor(host, device="cuda")
    C_rows = torch.as_tensor(cp.asnumpy(C), device="cuda")
    for m in iterations:
        for name in names:
            assign, _, update = name.partition("+")  # "assign" or "assign+update"

            def run(assign=assign, update=update or "auto", m=m):
                return GPUKMeans(k, init=C, n_init=1, max_iter=m, tol=0.0, assign=assign,
                                 update=update, device="gpu").fit(X)
            run()  # compile and warm
            seconds, model = _timed(cp, run, repeats)
            row["seconds"][f"{name}/{m}"] = seconds
            # a fit with tol=0 stops where no label changed (flash-kmeans, tol=-1, never does):
            # per-iteration differences between m's mean something only where both ran all
            row.setdefault("n_iter", {})[f"{name}/{m}"] = int(model.n_iter_)
            reference = fp64_labels(cp, X[:_CHECKED], model.cluster_centers_)
            row["labels_equal_fp64"][f"{name}/{m}"] = float(
                (model.labels_[:_CHECKED] == reference).mean())
            row.setdefault("update", {})[f"{name}/{m}"] = model.strategies_["update"]
            if name == "auto":
                row["auto"] = model.strategies_["assign"]
                row["auto_reason"] = model.strategy_reasons_["assign"]
            print(n, d, k, name, m, f"{seconds:.4f}", flush=True)
        if flash_kmeans is None:
            continue

        def flash(m=m):
            return flash_kmeans.batch_kmeans_Euclid(X_rows[None], k, max_iters=m, tol=-1.0,
                                                    init_centroids=C_rows[None])
        flash()
        seconds, (labels, centres, _) = _timed(cp, flash, repeats)
        row["seconds"][f"flash-kmeans/{m}"] = seconds
        reference = fp64_labels(cp, X[:_CHECKED], cp.asarray(centres[0].float().contiguous()))
        got = cp.asarray(labels[0][:_CHECKED].to(dtype=torch.int32).contiguous())
        row["labels_equal_fp64"][f"flash-kmeans/{m}"] = float((got == reference).mean())
        print(n, d, k, "flash-kmeans", m, f"{seconds:.4f}", flush=True)
    for m in iterations:
        flash = row["seconds"].get(f"flash-kmeans/{m}")
        for name in names:
            if flash and f"{name}/{m}" in row["seconds"]:
                row[f"{name}_over_flash/{m}"] = row["seconds"][f"{name}/{m}"] / flash
    row.update(steady_state(row, [*names, "flash-kmeans"], iterations, n * d * k, cp))
    return row


def device_fp32_rate(cp) -> float:
    """This GPU's peak FP32 rate: SMs x 128 lanes x 2 flops (an FMA) x the SM clock."""
    attributes = cp.cuda.Device().attributes
    return attributes["MultiProcessorCount"] * 128 * 2 * attributes["ClockRate"] * 1e3


def steady_state(row, names, iterations, ndk, cp) -> dict:
    """Each name's steady-state iteration (module docstring) and the floors beside it."""
    first, last = min(iterations), max(iterations)
    floors = {"floor_fp32_s": 2 * ndk / FP32_RATE, "floor_tf32_s": 2 * ndk / TF32_RATE,
              "floor_device_fp32_s": 2 * ndk / device_fp32_rate(cp)}
    out = {"steady_iteration_s": {}, **floors}
    if first == last:
        return out
    for name in names:
        times = [row["seconds"].get(f"{name}/{m}") for m in (first, last)]
        ran = [row.get("n_iter", {}).get(f"{name}/{m}", m) == m for m in (first, last)]
        if None not in times and all(ran):
            out["steady_iteration_s"][name] = (times[1] - times[0]) / (last - first)
    flash = out["steady_iteration_s"].get("flash-kmeans")
    for name, seconds in out["steady_iteration_s"].items():
        print(row["n"], row["d"], row["k"], name, "steady", f"{seconds * 1e3:.3f} ms",
              " ".join(f"{key[6:-2]} {seconds / floor:.2f}x" for key, floor in floors.items()),
              f"flash {seconds / flash:.2f}x" if flash else "", flush=True)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--iterations", type=int, nargs="+", default=[20, 100])
    parser.add_argument("--shapes", type=int, default=len(SHAPES),
                        help="the first N shapes only")
    parser.add_argument("--only", nargs="+", default=None,
                        help="these shapes (n,d,k) instead of the issue's")
    parser.add_argument("--data", nargs="+", default=["uniform"],
                        help="uniform and/or blobs:C (rows around C centres)")
    parser.add_argument("--repeats", type=int, default=1,
                        help="time each fit this many times (after one warm call), the median")
    parser.add_argument("--names", nargs="+", default=None,
                        help="fits to time: assign or assign+update (default: tiled, tc-exact, "
                             "auto, and hamerly up to 32 features; update auto)")
    args = parser.parse_args()
    from gpumine.backend import get_backend
    from gpumine.bench.peers import peer_versions
    from gpumine.bench.record import context

    backend = get_backend("gpu")
    cp = backend.xp
    record = {**context(backend), **peer_versions(), "iterations": args.iterations,
              "shapes": []}
    shapes = ([tuple(int(v) for v in shape.split(",")) for shape in args.only] if args.only
              else SHAPES[:args.shapes])
    for data in args.data:
        for n, d, k in shapes:
            record["shapes"].append(measure(cp, n, d, k, args.iterations, data, args.names,
                                            args.repeats))
            cp.get_default_memory_pool().free_all_blocks()
    save(args.out, "fit-vs-flash", record)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
