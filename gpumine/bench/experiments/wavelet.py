"""Seed 003 (Yildirim & Ozdogan, parallel wavelet-based clustering, WCIT 2010), Table 1.

WaveCluster per stage on the CPU and the GPU, the paper's aggregate speed-up, and
``WaveCluster.fit`` as users call it.
"""

from __future__ import annotations

import numpy as np

from gpumine import registry
from gpumine.bench.experiments.common import (
    FIT_FROM_DEVICE,
    FIT_FROM_HOST,
    Run,
    plot_lines,
    user_level_fits,
)
from gpumine.bench.record import Results
from gpumine.bench.timing import measure


def _wave_points(m, rng):
    """m*m points: three quarters uniform background, a quarter in 8 dense discs."""
    n = m * m
    X = rng.random_sample((n, 2))
    centres = rng.random_sample((8, 2))
    k = n // 4
    X[:k] = centres[rng.randint(0, 8, k)] + rng.normal(0, 0.02, (k, 2))
    return np.clip(X, 0, 1)


def wavecluster(run: Run) -> tuple[Results, dict]:
    """Seed 003 Table 1: per-stage WaveCluster times, CPU and GPU, and the aggregate speed-up.

    Beside the stages: ``WaveCluster(grid_size=m).fit`` as users call it, from host data
    and (GPU) from device data, with the default threshold (the stages use four times
    it, as before).
    """
    from gpumine.backend import get_backend
    from gpumine.wavecluster import WaveCluster

    grids = (64, 128) if run.quick else (256, 512, 1024, 2048, 4096)
    params = {"grids": list(grids), "points": "one per cell: 3/4 uniform, 1/4 in 8 discs",
              "wavelet": "haar", "levels": 1, "threshold": "4x mean non-empty coarse density"}
    results = Results(run.out_dir, "wavecluster", params, key=("grid", "side", "stage"))
    cpu = get_backend("cpu")
    rng = np.random.RandomState(5489)
    for m in grids:
        X = _wave_points(m, rng)
        shape = (m, m)
        if not results.has({"grid": m, "side": "cpu", "stage": "total"}):
            for stage, seconds in _wave_stages(cpu, X, shape).items():
                results.add({"grid": m, "points": m * m, "side": "cpu", "stage": stage,
                             "seconds": seconds})
        if run.backend.is_gpu and not results.has({"grid": m, "side": "gpu", "stage": "total"}):
            for stage, seconds in _wave_stages(run.backend, X, shape).items():
                results.add({"grid": m, "points": m * m, "side": "gpu", "stage": stage,
                             "seconds": seconds})
        for side, backend in (("cpu", cpu), ("gpu", run.backend if run.backend.is_gpu else None)):
            if backend is None or results.has({"grid": m, "side": side,
                                               "stage": FIT_FROM_HOST}):
                continue
            fits = user_level_fits(backend, X, None, estimator=lambda backend=backend, m=m: (
                WaveCluster(grid_size=m, device=backend.name)))
            for stage, seconds in fits.items():
                if side == "cpu" and stage == FIT_FROM_DEVICE:
                    continue  # the same call as from host data on the CPU
                results.add({"grid": m, "points": m * m, "side": side, "stage": stage,
                             "seconds": seconds})
        run.log(f"wavecluster grid {m} done")
    return results, {}


def report_wavecluster(results, measured) -> dict:
    table = []
    for m in results.params["grids"]:
        if not any(r["grid"] == m for r in results.rows):
            continue
        times = {(r["side"], r["stage"]): float(r["seconds"]) for r in results.rows
                 if r["grid"] == m}
        entry = {"grid": m, "cpu_total_seconds": times.get(("cpu", "total")),
                 "cpu_fit_seconds": times.get(("cpu", FIT_FROM_HOST)),
                 "gpu_fit_from_host_seconds": times.get(("gpu", FIT_FROM_HOST)),
                 "gpu_fit_from_device_seconds": times.get(("gpu", FIT_FROM_DEVICE))}
        if ("gpu", "total") in times:
            kernels = times[("gpu", "total")] - times[("gpu", "transfer")]
            entry.update(gpu_transfer_seconds=times[("gpu", "transfer")],
                         gpu_kernel_seconds=kernels,
                         wavelet_kernel_speedup=times[("cpu", "wavelet")] / times[("gpu",
                                                                                   "wavelet")],
                         label_kernel_speedup=times[("cpu", "label")] / times[("gpu", "label")],
                         aggregate_speedup=times[("cpu", "total")] / times[("gpu", "total")])
        table.append(entry)
    plot_rows = [{**r, "series": f"{r['side']} {r['stage']}"} for r in results.rows]
    plots = [plot_lines(results, "wavecluster", plot_rows, panel="side", x="grid", y="seconds",
                         series="series", title="WaveCluster stages", ylabel="seconds")]
    return {"plots": plots, "table": table,
            "aggregate_speedup_formula": "CPU time / (transfer time + GPU kernel time), "
                                         "seed 003 equation (1)"}


def _wave_stages(backend, X, shape) -> dict:
    """Seed 003 Table 1's stages on ``backend``, each timed alone: the pipeline's own steps
    (:mod:`gpumine.wavecluster.pipeline`), with the seed's threshold (four times the mean
    occupied density) and union-find labelling; on the GPU, the copy of X in first."""
    from gpumine.wavecluster import engine, pipeline

    stages = pipeline.stages_for(backend)
    label = registry.load_strategy("wavecluster.label",
                                   "union-find-gpu" if backend.is_gpu else "union-find")
    bounds = np.stack([X.min(0), X.max(0)])
    times = {}
    if backend.is_gpu:
        times["transfer"] = measure(lambda: backend.to_device_columns(X), backend,
                                    repeats=3).seconds
    data = backend.to_device_columns(X)
    times["quantize"] = measure(lambda: stages.histogram(data, None, bounds, shape), backend,
                                repeats=3).seconds
    point_cells, grid, _ = stages.histogram(data, None, bounds, shape)
    times["wavelet"] = measure(lambda: stages.lowpass(grid, "haar", 1), backend,
                               repeats=3).seconds
    coarse = stages.lowpass(grid, "haar", 1)
    threshold = 4.0 * engine.mean_occupied_density(coarse, xp=stages.xp)
    times["threshold"] = measure(lambda: coarse >= threshold, backend, repeats=3).seconds
    mask = coarse >= threshold
    times["label"] = measure(lambda: label(mask, 2), backend, repeats=3).seconds
    components, _ = label(mask, 2)
    times["lookup"] = measure(lambda: stages.point_components(point_cells, components, "haar",
                                                              1, shape), backend,
                              repeats=3).seconds
    times["total"] = sum(times.values())
    return times
