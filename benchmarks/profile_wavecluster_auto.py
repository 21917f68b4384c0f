"""Where the GPU time of WaveCluster's ``threshold="auto"`` goes: each level's pieces
(foreground mask, labelling by each GPU strategy, component weights) on the coarse grid
of fit_timing's 16.7M-point set, timed with CUDA events.

Usage (repository root, GPU machine): ``python benchmarks/profile_wavecluster_auto.py``
"""

from __future__ import annotations

import json

import numpy as np


def event_ms(cp, fn, repeats=5):
    """Milliseconds per call, back to back between CUDA events (gpu_check's timer)."""
    from gpu_check import device_time  # benchmarks/ is on sys.path when run as a script

    return device_time(cp, fn, repeats) * 1e3


def main():
    import cupy as cp

    from gpumine.wavecluster import gpu
    from gpumine.wavecluster.engine import AUTO_THRESHOLD_LEVELS

    rng = np.random.default_rng(3)
    n = 4096 * 4096
    uniform = rng.uniform(0, 1, size=(n - n // 4, 2))
    discs = rng.uniform(0.1, 0.9, size=(8, 2))[rng.integers(0, 8, n // 4)]
    discs += rng.normal(scale=0.02, size=discs.shape)
    X = cp.asarray(np.concatenate([uniform, discs]))
    XT = cp.ascontiguousarray(X.T)
    bounds = np.array([X.min(0).get(), X.max(0).get()])
    point_cell, grid, _ = gpu.quantize_histogram(XT, None, bounds, (4096, 4096))
    from gpumine import WaveCluster

    wavelet = WaveCluster().wavelet
    coarse = gpu.lowpass(grid, wavelet, 1)
    mass = float(coarse.sum())
    unit = mass / float(grid.sum())
    out = {"coarse_shape": list(coarse.shape), "wavelet": wavelet}
    for level in AUTO_THRESHOLD_LEVELS[:6]:
        value = (level - 0.5) * unit
        row = {"mask_ms": event_ms(cp, lambda value=value: coarse >= value)}
        mask = coarse >= value
        row["foreground_cells"] = int(mask.sum())
        for name, fn in (("union-find-gpu", gpu.label_union_find_gpu),
                         ("sliding-window", gpu.label_sliding_window)):
            row[f"{name}_ms"] = event_ms(cp, lambda fn=fn, mask=mask: fn(mask, 1), repeats=2)
        components, count = gpu.label_union_find_gpu(mask, 1)
        row["components"] = count
        row["components_dtype"] = str(components.dtype)
        row["cupy_bincount_ms"] = event_ms(cp, lambda c=components, m=count: cp.bincount(
            c.ravel(), weights=coarse.ravel(), minlength=m + 1))
        values = components.ravel().astype(cp.int64)
        row["weighted_bincount_ms"] = event_ms(cp, lambda v=values, m=count: gpu.weighted_bincount(
            v, coarse.ravel(), m + 1))
        ids = gpu._ids(mask)
        row["compact_ms"] = event_ms(cp, lambda ids=ids, mask=mask: gpu._compact(ids, mask))
        out[f"level_{level}"] = row
        print(level, row, flush=True)
    # The fixed-threshold pipeline's stages (fit_wavecluster's steps, one at a time).
    from gpumine.wavecluster.engine import cluster_ids
    stages = {}
    stages["quantize_histogram_ms"] = event_ms(
        cp, lambda: gpu.quantize_histogram(XT, None, bounds, (4096, 4096)))
    stages["lowpass_ms"] = event_ms(cp, lambda: gpu.lowpass(grid, wavelet, 1))
    mask = coarse >= 3.5 * unit
    stages["label_ms"] = event_ms(cp, lambda: gpu.label_union_find_gpu(mask, 1))
    components, count = gpu.label_union_find_gpu(mask, 1)
    stages["point_components_ms"] = event_ms(cp, lambda: gpu.point_components(
        point_cell, components, wavelet, 1, (4096, 4096)))
    point_component = gpu.point_components(point_cell, components, wavelet, 1, (4096, 4096))
    stages["sizes_ms"] = event_ms(cp, lambda: gpu.weighted_bincount(point_component, None,
                                                                     count + 1))
    remap = cp.asarray(cluster_ids(gpu.weighted_bincount(point_component, None,
                                                         count + 1).get(), 1e5))
    stages["remap_points_ms"] = event_ms(cp, lambda: remap[point_component])
    stages["grid_labels_to_host_ms"] = event_ms(cp, lambda: cp.asnumpy(remap[components]))
    out["fixed_pipeline"] = stages
    print("fixed pipeline:", stages, flush=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
