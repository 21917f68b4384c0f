"""Seed 003 Table 1 on the GPU machine: WaveCluster per stage, CPU vs GPU.

Usage (repository root, a CUDA GPU with CuPy)::

    python benchmarks/wavecluster_timing.py --out benchmarks/results

2-D grids 256^2 ... 4096^2 with one point per cell on average (65,536 to 16,777,216
points: three quarters uniform MT19937 background, one quarter in 8 dense discs), haar,
one level, threshold four times the mean non-empty coarse density so that the discs are
the foreground components. Per stage (host->device, quantize, wavelet, threshold, label,
lookup) and end to end, on the CPU path and on the GPU, with cupyx.scipy.ndimage.label
on the same mask as a peer; every GPU time after a warm-up, between synchronizations.
"""

from __future__ import annotations

import argparse
import datetime
import json
import time
from pathlib import Path

import numpy as np


def _points(m, rng):
    n = m * m
    X = rng.random_sample((n, 2))
    centres = rng.random_sample((8, 2))
    k = n // 4  # a quarter of the points in 8 discs
    pick = rng.randint(0, 8, k)
    X[:k] = centres[pick] + rng.normal(0, 0.02, (k, 2))
    return np.clip(X, 0, 1)


#: Threshold as a multiple of the mean non-empty coarse density (engine's "auto" is 0.1).
THRESHOLD_OF_MEAN = 4.0


def _threshold(coarse):
    from gpumine.wavecluster import engine

    return THRESHOLD_OF_MEAN / engine.AUTO_THRESHOLD_FRACTION * engine.resolve_threshold(
        "auto", coarse)


def _clock(sync, fn):
    sync()
    start = time.perf_counter()
    out = fn()
    sync()
    return out, time.perf_counter() - start


def _gpu_round(cp, X, weight, shape, sync):
    """One GPU run of every stage; returns the stage times, point labels, component counts."""
    from cupyx.scipy import ndimage as cp_ndimage

    from gpumine.wavecluster import gpu

    timings = {}
    XT, timings["h2d"] = _clock(sync, lambda: cp.ascontiguousarray(cp.asarray(X).T))
    w = cp.asarray(weight)

    def quantize():
        return gpu.quantize_histogram(XT, w, gpu.bounds(XT), shape)

    (point_cell, hist), timings["quantize"] = _clock(sync, quantize)
    coarse, timings["wavelet"] = _clock(sync, lambda: gpu.lowpass(hist, "haar", 1))
    mask, timings["threshold"] = _clock(sync, lambda: coarse >= _threshold(coarse))
    (labels_uf, n_uf), timings["label_union_find_gpu"] = _clock(
        sync, lambda: gpu.label_union_find_gpu(mask, 2))
    (_, n_sw), timings["label_sliding_window"] = _clock(
        sync, lambda: gpu.label_sliding_window(mask, 2))
    (_, n_cupyx), timings["label_cupyx_ndimage"] = _clock(
        sync, lambda: cp_ndimage.label(mask, structure=cp.ones((3, 3))))
    labels, timings["lookup"] = _clock(sync, lambda: labels_uf[tuple(
        gpu.point_coarse_cells(point_cell, "haar", 1, shape).T)])
    counts = {"gpu_union_find": n_uf, "gpu_sliding_window": n_sw, "cupyx": int(n_cupyx)}
    return timings, labels, counts


def run(sizes, out_dir):
    from gpumine.backend import cupy_module
    from gpumine.wavecluster import engine, labeling, wavelet

    cp = cupy_module()
    sync = cp.cuda.get_current_stream().synchronize
    rng = np.random.RandomState(5489)
    rows = []
    for m in sizes:
        X = _points(m, rng)
        n = len(X)
        shape = (m, m)
        weight = np.ones(n)
        row = {"grid": m, "points": n}
        # CPU path, stage by stage
        t0 = time.perf_counter()
        bounds = np.stack([X.min(0), X.max(0)])
        cells, _ = engine.quantize(X, bounds, shape)
        grid = np.bincount(np.ravel_multi_index(tuple(cells.T), shape), weights=weight,
                           minlength=m * m).reshape(shape)
        t1 = time.perf_counter()
        coarse = wavelet.lowpass(grid, "haar", 1)
        t2 = time.perf_counter()
        mask = coarse >= _threshold(coarse)
        t3 = time.perf_counter()
        components, n_components = labeling.label_union_find(mask, 2)
        t4 = time.perf_counter()
        _, n_scipy = labeling.label_scipy(mask, 2)
        t4b = time.perf_counter()
        point = wavelet.coarse_cells(cells, "haar", 1, shape)
        cpu_labels = components[tuple(point.T)]
        t5 = time.perf_counter()
        row["cpu_s"] = {"quantize": t1 - t0, "wavelet": t2 - t1, "threshold": t3 - t2,
                        "label_union_find": t4 - t3, "label_scipy": t4b - t4,
                        "lookup": t5 - t4b, "total": (t5 - t0) - (t4b - t4)}
        # GPU path: the first round compiles the kernels, the second is timed
        _gpu_round(cp, X, weight, shape, sync)
        timings, gpu_labels, counts = _gpu_round(cp, X, weight, shape, sync)
        timings["total"] = sum(timings[k] for k in ("h2d", "quantize", "wavelet", "threshold",
                                                    "label_union_find_gpu", "lookup"))
        row["gpu_s"] = dict(timings)
        row["components"] = {"cpu_union_find": n_components, "cpu_scipy": n_scipy, **counts}
        row["labels_equal_cpu"] = bool(np.array_equal(cp.asnumpy(gpu_labels), cpu_labels))
        row["speedup_total"] = row["cpu_s"]["total"] / timings["total"]
        print(json.dumps(row), flush=True)
        rows.append(row)
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    record = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "device": name, "cupy": cp.__version__, "rows": rows}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"wavecluster-timing-{datetime.date.today().isoformat()}.json"
    path.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {path}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--sizes", type=int, nargs="*", default=[256, 512, 1024, 2048, 4096])
    args = parser.parse_args()
    run(args.sizes, args.out)


if __name__ == "__main__":
    main()
