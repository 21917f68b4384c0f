"""No seed paper: gpumine against the libraries users would otherwise reach for.

Per Lloyd iteration against PyTorch, flash-kmeans and fastkmeans (label agreement, time
over the measured floor), and the whole fit against scikit-learn on every core.
"""

from __future__ import annotations

import numpy as np

from gpumine.bench.experiments.common import (
    FIT_FROM_HOST,
    Run,
    default_of,
    device_data,
    forced_fit_factory,
    user_level_fits,
)
from gpumine.bench.record import Results
from gpumine.bench.timing import copy_bandwidth, floor_seconds, gemm_rate, measure, timed


def peers(run: Run) -> tuple[Results, dict]:
    """Per-Lloyd-iteration time against PyTorch, flash-kmeans and fastkmeans, with floors."""
    from gpumine.backend import get_backend
    from gpumine.bench.peers import fp64_labels, gpumine_step, peer_steps
    from gpumine.datasets import load_corel, make_uniform

    backend, xp = run.backend, run.backend.xp
    shapes = ([(2000, 4, 8), (5000, 8, 32)] if run.quick else
              [(1_000_000, 4, 400), (4_000_000, 8, 200), (50_000, 32, 32),
               (50_000, 32, 2048), (1_000_000, 128, 1024), (10_000_000, 32, 1024),
               ("corel-edge", 18, 128)])
    params = {"shapes": [list(s) for s in shapes], "dtype": "float32"}
    results = Results(run.out_dir, "peers", params, key=("shape", "impl"))
    bandwidth = copy_bandwidth(backend, 1 << 26 if run.quick else 1 << 30)
    rate = gemm_rate(backend, 1024 if run.quick else 8192)
    run.log(f"peers: copy {bandwidth / 1e9:.0f} GB/s, float32 GEMM {rate / 1e12:.1f} TFLOP/s")
    assign, update = default_of("kmeans.assign", backend), default_of("kmeans.update", backend)
    cpu_rate = gemm_rate(get_backend("cpu"), 1024, np.float32)
    skipped_all = {}
    for n, d, k in shapes:
        host = (load_corel("edge", data_home=run.data_home) if n == "corel-edge"
                else make_uniform(n, d, random_state=5489))
        n_rows = len(host)
        shape = f"{n_rows}/{d}/{k}" if n != "corel-edge" else f"corel-edge/{d}/{k}"
        X = device_data(run, host)
        centers_host = host[np.random.RandomState(0).choice(n_rows, k, replace=False)]
        centers = backend.to_device(centers_host)
        reference = fp64_labels(xp, X, centers)
        # bytes: X read by assign and by update, labels written and read; flops: 2 n d k
        floor = floor_seconds(2 * host.nbytes + 8 * n_rows, 2.0 * n_rows * d * k,
                              bandwidth, rate)
        step, labels = gpumine_step(backend, X, centers, assign, update)
        candidates = {"gpumine": (step, lambda labels=labels: labels)}
        steps, skipped = peer_steps(host, centers_host, "cuda" if backend.is_gpu else "cpu")
        skipped_all.update(skipped)
        for name, peer in steps.items():
            candidates[name] = (peer, lambda peer=peer: xp.asarray(
                np.asarray(peer.labels.cpu()) if hasattr(peer.labels, "cpu")
                else np.asarray(peer.labels)).astype(xp.int32))
        for name, (fn, get_labels) in candidates.items():
            row = {"shape": shape, "impl": name}
            if results.has(row):
                continue
            try:
                m = measure(fn, backend, repeats=10, budget_seconds=3.0)
                _torch_cuda("synchronize")
                agree = float((get_labels() == reference).mean())
            except (RuntimeError, MemoryError) as exc:  # e.g. a peer's dense n x k distances
                reason = str(exc).split(".")[0][:160]
                results.add({**row, "n": n_rows, "d": d, "k": k, "iteration_seconds": "",
                             "floor_seconds": floor, "time_over_floor": "",
                             "labels_equal_fp64": "", "note": f"failed: {reason}"})
                run.log(f"peers {shape} {name}: failed: {reason}")
                _torch_cuda("empty_cache")
                continue
            results.add({**row, "n": n_rows, "d": d, "k": k, "iteration_seconds": m.seconds,
                         "floor_seconds": floor, "time_over_floor": m.seconds / floor,
                         "labels_equal_fp64": agree, "note": ""})
            run.log(f"peers {shape} {name}: {m.seconds * 1e3:.3f} ms, "
                    f"{m.seconds / floor:.1f}x floor, labels {agree:.6f}")
        del X, reference
        _whole_fits(run, results, shape, host, centers_host, floor, cpu_rate)
    for name, reason in skipped_all.items():
        run.log(f"peers: {name} skipped: {reason}")
    return results, {"copy_bandwidth_bytes_per_s": bandwidth, "gemm_flops_per_s": rate,
                     "skipped": skipped_all}


#: Iterations of the whole-fit comparison in ``peers`` (forced: tol = 0).
_WHOLE_FIT_ITERATIONS = 20


#: scikit-learn fits estimated longer than this are not run (the row says so).
_SKLEARN_BUDGET_SECONDS = 120.0


def _whole_fits(run, results, shape, host, centers_host, floor, cpu_rate):
    """``GPUKMeans.fit`` from host and device data against scikit-learn's ``KMeans.fit``.

    Both from the same centres for the same number of forced iterations, as users call
    them; scikit-learn uses every core of the machine (its default).
    """
    import os

    from sklearn.cluster import KMeans

    k = len(centers_host)
    iterations = _WHOLE_FIT_ITERATIONS
    fits = {}
    if not results.has({"shape": shape, "impl": "gpumine " + FIT_FROM_HOST}):
        fits = {"gpumine " + label: seconds for label, seconds in user_level_fits(
            run.backend, host, centers_host,
            estimator=forced_fit_factory(run.backend, centers_host, iterations)).items()}
    sklearn_name = f"scikit-learn fit ({os.cpu_count()} CPUs)"
    if not results.has({"shape": shape, "impl": sklearn_name}):
        estimate = 3 * iterations * 2.0 * host.shape[0] * host.shape[1] * k / cpu_rate
        if estimate > _SKLEARN_BUDGET_SECONDS:
            results.add({"shape": shape, "impl": sklearn_name, "note":
                         f"skipped: about {estimate:.0f} s estimated, over "
                         f"{_SKLEARN_BUDGET_SECONDS:.0f} s"})
        else:
            model = KMeans(k, init=centers_host, n_init=1, max_iter=iterations, tol=0.0)
            fits[sklearn_name] = timed(lambda: model.fit(host))[1]
    for name, seconds in fits.items():
        per_iteration = seconds / iterations
        results.add({"shape": shape, "impl": name, "n": host.shape[0], "d": host.shape[1],
                     "k": k, "iteration_seconds": per_iteration, "floor_seconds": floor,
                     "time_over_floor": per_iteration / floor, "labels_equal_fp64": "",
                     "note": f"whole fit, {iterations} iterations: {seconds:.4f} s"})
        run.log(f"peers {shape} {name}: {seconds:.4f} s for {iterations} iterations")


def report_peers(results, measured) -> dict:
    speedups = []
    for row in results.rows:
        if row["impl"] == "gpumine":
            continue
        mine = next((r for r in results.rows if r["impl"] == "gpumine" and
                     r["shape"] == row["shape"]), None)
        if mine and row["iteration_seconds"] not in ("", None):
            speedups.append({"shape": row["shape"], "over": row["impl"],
                             "speedup": float(row["iteration_seconds"]) /
                             float(mine["iteration_seconds"])})
    return {**measured, "speedups": speedups,
            "plots": [_plot_bars(results, "peers", results.rows)]}


def _plot_bars(results, name, rows):
    """Per shape: each implementation's per-iteration time over the measured floor."""
    plt, path = results.figure(name)
    shapes = list(dict.fromkeys(r["shape"] for r in rows))
    impls = list(dict.fromkeys(r["impl"] for r in rows))
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(shapes)), 4.5))
    width = 0.8 / max(1, len(impls))
    for i, impl in enumerate(impls):
        values = [next((float(r["time_over_floor"]) for r in rows
                        if r["shape"] == shape and r["impl"] == impl
                        and r["time_over_floor"] not in ("", None)), np.nan)
                  for shape in shapes]
        ax.bar(np.arange(len(shapes)) + i * width, values, width, label=impl)
    ax.set_xticks(np.arange(len(shapes)) + 0.4 - width / 2, shapes, rotation=20, fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("time per Lloyd iteration / floor")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.legend()
    ax.grid(True, axis="y", which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name


def _torch_cuda(action: str) -> None:
    """``torch.cuda.<action>()`` when PyTorch and a CUDA device are there (peers' work)."""
    try:
        import torch
    except ImportError:
        return
    if torch.cuda.is_available():
        getattr(torch.cuda, action)()
