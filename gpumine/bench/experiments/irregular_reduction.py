"""Seed 000 (Dhanasekaran & Rubin, irregular reductions, GPGPU-4 2011), §8, and seed 002's
whole-fit comparison (Bisht et al. 2010, Figure 11).

``gpu-vs-hybrid``: 50 forced Lloyd iterations with transfers, each GPU update strategy
against the hybrid (host update) baseline (seed 000 Figure 7); ``gpu-vs-cpu``: the whole
fit against scikit-learn and gpumine's CPU path (seed 000 Figure 8, seed 002 Figure 11).
"""

from __future__ import annotations

from functools import partial

import numpy as np

from gpumine.bench.experiments.common import (
    USER_LEVEL,
    Run,
    default_of,
    forced_fit_factory,
    plot_lines,
    reference_of,
    speedups_of,
    strategies_of,
    summary_of,
    user_level_fits,
)
from gpumine.bench.record import Results
from gpumine.bench.timing import gemm_rate, measure, summation, timed


def gpu_vs_hybrid(run: Run) -> tuple[Results, dict]:
    """Seed 000 Figure 7: 50 forced iterations with transfers, each update strategy vs hybrid."""
    from gpumine.datasets import make_uniform

    backend, xp = run.backend, run.backend.xp
    iterations = 5 if run.quick else 50
    ks = (4,) if run.quick else (10, 100, 400)
    ns = (2000,) if run.quick else (1_000_000, 2_000_000, 4_000_000)
    ds = (2,) if run.quick else (2, 4, 6, 8)
    params = {"k": list(ks), "n": list(ns), "d": list(ds), "iterations": iterations}
    results = Results(run.out_dir, "gpu-vs-hybrid", params, key=("k", "n", "d", "strategy"))
    assign = default_of("kmeans.assign", backend)
    too_slow = set()
    for k in ks:
        for d in ds:
            for n in ns:
                host = make_uniform(n, d, random_state=5489)
                centers_host = host[:k].copy()
                cell = {"k": k, "n": n, "d": d}
                if not all(results.has({**cell, "strategy": s}) for s in USER_LEVEL):
                    estimator = forced_fit_factory(backend, centers_host, iterations)
                    fits = user_level_fits(backend, host, centers_host, estimator=estimator)
                    for label, seconds in fits.items():
                        results.add({**cell, "strategy": label, "transfer_seconds": "",
                                     "bind_seconds": "", "iteration_seconds": "",
                                     "iterations_timed": "", "total_seconds": seconds,
                                     "note": f"GPUKMeans.fit, {iterations} iterations"})
                for strategy in strategies_of(backend):
                    row = {"k": k, "n": n, "d": d, "strategy": strategy.name}
                    if results.has(row):
                        continue
                    if (strategy.name, k, d) in too_slow:
                        results.add({**row, "note": "skipped: > 1 s per iteration at a "
                                     "smaller n"})
                        continue
                    row.update(_forced_fit(backend, xp, host, centers_host, assign,
                                           strategy.load(), iterations))
                    if row["iteration_seconds"] > 1.0:
                        too_slow.add((strategy.name, k, d))
                    results.add({**row, "note": ""})
                    run.log(f"gpu-vs-hybrid {row}")
    return results, {}


def report_gpu_vs_hybrid(results, measured) -> dict:
    d = max(results.params["d"])
    reference = reference_of(results.rows, ("hybrid", "numpy"))
    rows = speedups_of([{**r, "seconds": r.get("total_seconds", "")} for r in results.rows
                      if r["d"] == d], ("k", "n", "d"), reference)
    plots = [plot_lines(results, "gpu-vs-hybrid", rows, panel="k", x="n",
                         y="speedup_vs_reference", series="strategy",
                         title=f"speed-up over {reference} "
                               f"({results.params['iterations']} iterations, d = {d})",
                         ylabel="speed-up")] if rows else []
    return summary_of(rows, ("k",), plots, reference)


def _forced_fit(backend, xp, host, centers_host, assign, update, iterations) -> dict:
    """Transfers + ``iterations`` Lloyd iterations, with no convergence test (the paper's)."""
    from gpumine.kmeans.lloyd import average_centers

    def transfers():
        X = backend.to_device_columns(host)
        centers = backend.to_device(centers_host)
        backend.to_host(xp.empty(len(host), dtype=xp.int32))
        return X, centers

    transfer = measure(transfers, backend, repeats=3)
    X, centers = transfers()
    labels = xp.empty(X.shape[0], dtype=xp.int32)
    (step, sums, weights), bind_seconds = timed(  # binds
        lambda: summation(xp, update, X, labels, centers.shape[0]), backend)
    state = {"centers": centers}

    def iteration():
        assign(X, state["centers"], labels)
        step()
        state["centers"] = average_centers(sums, weights, X.dtype, xp)

    # a slow strategy is timed on fewer iterations (at least one), scaled to ``iterations``
    m = measure(iteration, backend, repeats=iterations, budget_seconds=2.0)
    total = transfer.seconds + bind_seconds + iterations * m.seconds
    return {"transfer_seconds": transfer.seconds, "bind_seconds": bind_seconds,
            "iteration_seconds": m.seconds, "iterations_timed": m.repeats,
            "total_seconds": total}


def gpu_vs_cpu(run: Run) -> tuple[Results, dict]:
    """Seed 000 Figure 8 / seed 002 Figure 11: whole fit against scikit-learn and the CPU path."""
    import warnings

    from sklearn.cluster import KMeans
    from sklearn.exceptions import ConvergenceWarning

    from gpumine.backend import get_backend
    from gpumine.datasets import make_uniform
    from gpumine.kmeans import GPUKMeans

    ns = (500, 5000) if run.quick else (500, 5000, 50000, 500000, 4_000_000)
    ds = (2,) if run.quick else (2, 20, 200)
    ks = (10,) if run.quick else (10, 100)
    max_iter = 5 if run.quick else 20
    cpu_budget = 60.0 if run.quick else 240.0
    params = {"n": list(ns), "d": list(ds), "k": list(ks), "max_iter": max_iter, "tol": 0.0,
              "init": "the first k points", "cpu_budget_seconds": cpu_budget}
    results = Results(run.out_dir, "gpu-vs-cpu", params, key=("n", "d", "k", "impl"))
    cpu = get_backend("cpu")
    flop_rate = gemm_rate(cpu, 1024, np.float64)
    implementations = {"gpumine-" + run.backend.name: lambda X, init: GPUKMeans(
        init.shape[0], init=init, max_iter=max_iter, tol=0.0, device=run.backend.name)}
    if run.backend.is_gpu:  # the same fit with X already on the device (CuPy in, CuPy out)
        implementations["gpumine-gpu-device-data"] = implementations["gpumine-gpu"]
    if run.backend.is_gpu:
        implementations["gpumine-cpu"] = lambda X, init: GPUKMeans(
            init.shape[0], init=init, max_iter=max_iter, tol=0.0, device="cpu")
    implementations["sklearn"] = lambda X, init: KMeans(
        init.shape[0], init=init, n_init=1, max_iter=max_iter, tol=0.0, algorithm="lloyd")
    for n in ns:
        for d in ds:
            X = make_uniform(n, d, random_state=5489)
            for k in ks:
                if k > n:
                    continue
                for name, make in implementations.items():
                    row = {"n": n, "d": d, "k": k, "impl": name}
                    if results.has(row):
                        continue
                    estimate = 3 * max_iter * 2.0 * n * d * k / flop_rate
                    if "gpu" not in name and estimate > cpu_budget:
                        results.add({**row, "note": f"skipped: about {estimate:.0f} s "
                                     f"estimated on the CPU, over {cpu_budget:.0f} s"})
                        continue
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore", ConvergenceWarning)
                        # Warm-up: kernels compiled, threads and memory pools started. The
                        # CPU paths warm up on a slice: a second full fit adds minutes at 4M
                        # rows and starts nothing the slice does not.
                        on_gpu = "gpu" in name
                        data = (run.backend.xp.asarray(X) if name.endswith("device-data")
                                else X)
                        warm = data if on_gpu else X[:max(k, min(n, 65536))]
                        make(warm, X[:k]).fit(warm)
                        fit = make(data, X[:k]).fit  # returns the model
                        model, seconds = timed(partial(fit, data), run.backend)
                    results.add({**row, "fit_seconds": seconds, "n_iter": int(model.n_iter_),
                                 "iteration_seconds": seconds / max(1, model.n_iter_),
                                 "note": ""})
                    run.log(f"gpu-vs-cpu {row} {seconds:.4f} s")
    return results, {}


def report_gpu_vs_cpu(results, measured) -> dict:
    impls = list(dict.fromkeys(r["impl"] for r in results.rows))
    mine = "gpumine-gpu" if "gpumine-gpu" in impls else "gpumine-cpu"
    rows = []
    for row in results.rows:
        if row["impl"] != mine or row.get("fit_seconds") in ("", None):
            continue
        for peer in impls:
            if peer == mine:
                continue
            other = next((r for r in results.rows if r["impl"] == peer and
                          (r["n"], r["d"], r["k"]) == (row["n"], row["d"], row["k"]) and
                          r.get("fit_seconds") not in ("", None)), None)
            if other:
                rows.append({"n": row["n"], "d": row["d"], "k": row["k"], "over": peer,
                             "speedup": float(other["fit_seconds"]) / float(row["fit_seconds"])})
    plots = [plot_lines(results, "gpu-vs-cpu", [{**r, "series": f"{r['over']}, k={r['k']}"}
                                                 for r in rows],
                         panel="d", x="n", y="speedup", series="series",
                         title=f"{mine} whole-fit speed-up", ylabel="speed-up")] if rows else []
    return {"plots": plots, "speedups": rows}
