"""The seed papers' experiments, reproduced: ``gpumine bench EXPERIMENT``.

Each experiment writes ``<name>.csv`` (one row per measured cell, appended as it
goes, so an interrupted run resumes), ``<name>.json`` (parameters, device,
versions, commit, a summary and the rows) and PNG plots into the output
directory. ``quick=True`` shrinks every experiment to a CPU run of seconds (CI
runs each one so); the full sizes are the papers'. Each experiment is a
``measure`` step (fills the CSV) and a ``report`` step (summary and plots from the
recorded rows alone), so ``gpumine bench report`` redraws a record on any machine.

=================  ==========================================================
``update-vs-k``    seed 004 Figures 1-4: update phase (summation + normalization)
                   of every update strategy vs k, n in {5000, 50000}, d = 32
``update-vs-d``    seed 004 Figure 5: update phase vs d, k in {32, 256, 2048}
``corel``          seed 004 Figure 6: update phase vs k on Corel edge and color
``gpu-vs-hybrid``  seed 000 Figure 7: 50 forced Lloyd iterations including
                   transfers, each GPU-only update strategy against ``hybrid``
``gpu-vs-cpu``     seed 000 Figure 8, seed 002 Figure 11: whole fit against
                   scikit-learn (all cores) and gpumine's CPU path
``wavecluster``    seed 003 Table 1: WaveCluster per stage, CPU and GPU, and
                   the paper's aggregate speed-up
``peers``          per-iteration time against PyTorch, flash-kmeans, fastkmeans
                   with label agreement and time / floor, and the whole fit
                   (``GPUKMeans.fit`` from host and device data) against
                   scikit-learn's on every core
``wavecluster-     WaveCluster's defaults against DBSCAN (best eps) and HDBSCAN
quality``          by adjusted Rand index on labelled shape sets
                   (:mod:`gpumine.bench.quality`)

Every experiment records, beside its stage times, what users call: ``fit`` from
device data and from host data (rows ``fit from device data`` / ``fit from host
data``; the sweeps' and gpu-vs-hybrid's summaries give their medians).
=================  ==========================================================

Strategies are those the backend can run (every GPU update strategy on a GPU,
``numpy`` on the CPU). The reference of the speed-ups is seed 004's: a
shared-nothing kernel with a thread per cluster (``gm-ct``, KMCUDA's scheme) on
the GPU, ``numpy`` on the CPU; ``hybrid`` for ``gpu-vs-hybrid``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpumine import registry
from gpumine.bench.quality import report_quality, wavecluster_quality
from gpumine.bench.record import Results
from gpumine.bench.timing import copy_bandwidth, floor_seconds, gemm_rate, measure, summation
from gpumine.exceptions import InvalidParameterError

__all__ = ["EXPERIMENTS", "Experiment", "Run", "report_experiment", "run_experiment"]


@dataclass
class Run:
    """What an experiment needs: the backend, where to write, quick or full, the Corel home."""

    backend: object
    out_dir: Path
    quick: bool = False
    data_home: Path | None = None
    log: Callable[[str], None] = print
    #: A single update call slower than this is not repeated at larger sizes of a sweep.
    slow_seconds: float = 5.0


def _strategies(backend, kind="kmeans.update"):
    return [s for s in registry.list_strategies(kind, backend=backend.name)]


def _reference(rows, preferred=("gm-ct", "numpy")) -> str:
    """The reference strategy of a speed-up: the first of ``preferred`` that was measured."""
    measured = {r["strategy"] for r in rows}
    return next((name for name in preferred if name in measured), preferred[-1])


def _default(kind, backend):
    return registry.load_strategy(kind, registry.resolve_strategy(kind, "auto", backend.name).name)


def _device_data(run, host):
    return run.backend.to_device_columns(np.ascontiguousarray(host))


def _labels(run, X, centers):
    xp = run.backend.xp
    labels = xp.empty(X.shape[0], dtype=xp.int32)
    _default("kmeans.assign", run.backend)(X, centers, labels)
    return labels


def _update_phase(run, strategy, X, labels, k):
    """The timed unit of seed 004: summation (the strategy) + normalization."""
    from gpumine.kmeans.lloyd import average_centers

    step, sums, weights = summation(run.backend.xp, strategy.load(), X, labels, k)

    def phase():
        step()
        return average_centers(sums, weights, X.dtype, run.backend.xp)

    return phase


def _sweep_updates(run, results, cells, data_for):
    """Time every update strategy on each cell ``{..., "k": k}``; skip what is recorded."""
    too_slow = {}
    for cell in cells:
        X, labels, host, centers_host = data_for(cell)
        for label, seconds in _missing_user_fits(run, results, cell, host, centers_host):
            results.add({**cell, "strategy": label, "seconds": seconds, "repeats": 3,
                         "note": f"GPUKMeans.fit, {_USER_FIT_ITERATIONS} iterations"})
        for strategy in _strategies(run.backend):
            row = {**cell, "strategy": strategy.name}
            if results.has(row):
                continue
            sweep = tuple((key, value) for key, value in cell.items() if key not in ("d",))
            if (strategy.name, sweep) in too_slow:
                results.add({**row, "seconds": "", "repeats": 0,
                             "note": f"skipped: {too_slow[strategy.name, sweep]}"})
                continue
            m = measure(_update_phase(run, strategy, X, labels, cell["k"]), run.backend,
                        repeats=5, budget_seconds=1.0)
            results.add({**row, "seconds": m.seconds, "repeats": m.repeats, "note": ""})
            if m.seconds > run.slow_seconds and "d" in cell:
                too_slow[strategy.name, sweep] = (f"{m.seconds:.1f} s at d={cell['d']}, slower "
                                                  f"than {run.slow_seconds} s")
            run.log(f"{results.name} {row} {m.seconds * 1e3:.3f} ms")


#: Rows of an experiment's CSV that hold user-level ``fit`` times beside its stage times.
FIT_FROM_DEVICE = "fit from device data"
FIT_FROM_HOST = "fit from host data"
USER_LEVEL = (FIT_FROM_DEVICE, FIT_FROM_HOST)
_USER_FIT_ITERATIONS = 10


def user_level_fits(backend, host, centers_host, *, estimator=None) -> dict:
    """What a user waits for: ``fit`` from device data and from host data, seconds.

    ``estimator()`` builds the estimator (default: ``GPUKMeans`` from ``centers_host``,
    ten forced iterations, on ``backend``); each figure is the median of three fits
    after a warm-up. On the CPU both figures are the same call.
    """
    if estimator is None:
        estimator = _forced(backend, centers_host, _USER_FIT_ITERATIONS)
    device = (backend.xp.ascontiguousarray(backend.xp.asarray(host))
              if backend.is_gpu else host)
    out = {}
    for label, data in ((FIT_FROM_DEVICE, device), (FIT_FROM_HOST, host)):
        out[label] = measure(lambda data=data: estimator().fit(data), backend,
                             repeats=3).seconds
    return out


def _missing_user_fits(run, results, cell, host, centers_host):
    """The user-level fit rows of ``cell`` not yet recorded: (label, seconds) pairs."""
    if all(results.has({**cell, "strategy": label}) for label in USER_LEVEL):
        return []
    return list(user_level_fits(run.backend, host, centers_host).items())


def _speedups(rows, group_keys, reference):
    """Add ``speedup_vs_reference`` (reference seconds / seconds) within each group."""
    by_group = {}
    for row in rows:
        if row["strategy"] == reference and row["seconds"] not in ("", None):
            by_group[tuple(row[k] for k in group_keys)] = float(row["seconds"])
    out = []
    for row in rows:
        base = by_group.get(tuple(row[k] for k in group_keys))
        seconds = row["seconds"]
        speedup = (base / float(seconds) if base and seconds not in ("", None)
                   and row["strategy"] not in USER_LEVEL else None)
        out.append({**row, "speedup_vs_reference": speedup})
    return out


def _plot_lines(results, name, rows, *, panel, x, y, series, title, ylabel, logy=True):
    plt, path = results.figure(name)
    panels = sorted({r[panel] for r in rows}, key=str)
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.5), squeeze=False)
    for ax, value in zip(axes[0], panels, strict=True):
        for i, label in enumerate(sorted({r[series] for r in rows})):
            points = sorted((float(r[x]), float(r[y])) for r in rows
                            if r[panel] == value and r[series] == label
                            and r[y] not in ("", None))
            if points:  # ten colours, then the next ten dashed with squares, ...
                ax.plot(*zip(*points, strict=True), color=f"C{i % 10}",
                        linestyle=("-", "--", ":")[i // 10 % 3],
                        marker=("o", "s", "^")[i // 10 % 3], markersize=3, label=label)
        ax.set_xscale("log", base=2)
        if logy:
            ax.set_yscale("log")
        ax.set_xlabel(x)
        ax.set_ylabel(ylabel)
        ax.set_title(f"{title}, {panel} = {value}")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # off the data
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path.name


# -- seed 004 ---------------------------------------------------------------------------


def update_vs_k(run: Run) -> tuple[Results, dict]:
    """Seed 004 Figures 1-4: update-phase time of every strategy as k (contention) varies."""
    from gpumine.datasets import make_uniform

    sizes = (500,) if run.quick else (5000, 50000)
    d = 8 if run.quick else 32
    ks = (2, 8, 32) if run.quick else tuple(2 ** p for p in range(1, 16))
    params = {"n": list(sizes), "d": d, "k": list(ks), "data": "make_uniform, MT19937 seed 5489"}
    results = Results(run.out_dir, "update-vs-k", params, key=("n", "k", "strategy"))
    cache = {}

    def data_for(cell):
        n, k = cell["n"], cell["k"]
        if n not in cache:
            cache.clear()
            host = make_uniform(n, d, random_state=5489)
            cache[n] = (_device_data(run, host), host)
        X, host = cache[n]
        centers_host = make_uniform(k, d, random_state=k)
        return X, _labels(run, X, run.backend.to_device(centers_host)), host, centers_host

    _sweep_updates(run, results, [{"n": n, "d": d, "k": k} for n in sizes for k in ks],
                   data_for)
    return results, {}


def update_vs_d(run: Run) -> tuple[Results, dict]:
    """Seed 004 Figure 5: update-phase time as d grows, k in {32, 256, 2048}, n = 5000."""
    from gpumine.datasets import make_uniform

    n = 500 if run.quick else 5000
    ks = (4,) if run.quick else (32, 256, 2048)
    ds = (2, 4, 8) if run.quick else tuple(2 ** p for p in range(4, 14))
    params = {"n": n, "k": list(ks), "d": list(ds), "data": "make_uniform, MT19937 seed 5489"}
    results = Results(run.out_dir, "update-vs-d", params, key=("k", "d", "strategy"))

    def data_for(cell):
        host = make_uniform(n, cell["d"], random_state=5489)
        X = _device_data(run, host)
        centers_host = make_uniform(cell["k"], cell["d"], random_state=7)
        return X, _labels(run, X, run.backend.to_device(centers_host)), host, centers_host

    _sweep_updates(run, results, [{"k": k, "d": d} for k in ks for d in ds], data_for)
    return results, {}


def corel(run: Run) -> tuple[Results, dict]:
    """Seed 004 Figure 6: update-phase time vs k on the Corel edge and color features."""
    from gpumine.datasets import load_corel

    subsets = ("color",) if run.quick else ("edge", "color")
    ks = (2, 8) if run.quick else tuple(2 ** p for p in range(1, 13))
    rows_used = 2000 if run.quick else None
    params = {"subsets": list(subsets), "k": list(ks),
              "rows": "2000 generated (quick)" if run.quick else "all 17695"}
    results = Results(run.out_dir, "corel", params, key=("subset", "k", "strategy"))
    cache = {}

    def data_for(cell):
        subset = cell["subset"]
        if subset not in cache:
            host = (_quick_corel(run, subset) if run.quick
                    else load_corel(subset, data_home=run.data_home)[:rows_used])
            cache[subset] = (host, _device_data(run, host))
        host, X = cache[subset]
        picks = np.random.RandomState(cell["k"]).choice(len(host), cell["k"], replace=False)
        return X, _labels(run, X, run.backend.to_device(host[picks])), host, host[picks]

    _sweep_updates(run, results, [{"subset": s, "k": k} for s in subsets for k in ks],
                   data_for)
    return results, {}


def _quick_corel(run, subset):
    """Quick mode's stand-in for a Corel subset: a generated file of the same format.

    2,000 rows of uniform MT19937 data with the subset's width, written as MineBench
    raw binary and read back, so ``--quick`` needs no network and no Corel files.
    """
    from gpumine.datasets import (
        COREL_SUBSETS,
        make_uniform,
        read_minebench_bin,
        write_minebench_bin,
    )

    n_features = COREL_SUBSETS[subset][0]
    path = Path(run.out_dir) / f"quick-corel-{subset}.bin"
    write_minebench_bin(path, make_uniform(2000, n_features, random_state=5489))
    run.log(f"corel (quick): a generated 2,000 x {n_features} stand-in in the Corel file "
            f"format ({path.name}), not the Corel {subset} features")
    return read_minebench_bin(path)


def _sweep_report(name: str, panel: str, x: str, title: str, speedup_plot: bool = False):
    """The report of an update-phase sweep: seconds (and speed-ups) per strategy vs ``x``.

    One plot panel and one summary group per value of ``panel``; ``title`` may name
    the experiment's parameters (``"n = {n}"``). The reference is seed 004's.
    """
    def report(results, measured) -> dict:
        reference = _reference(results.rows)
        rows = _speedups(results.rows, (panel, x), reference)
        plots = [_plot_lines(results, name, rows, panel=panel, x=x, y="seconds",
                             series="strategy", title=title.format(**results.params),
                             ylabel="seconds")]
        if speedup_plot:
            plots.append(_plot_lines(results, f"{name}-speedup", rows, panel=panel, x=x,
                                     y="speedup_vs_reference", series="strategy",
                                     title=f"speed-up over {reference}", ylabel="speed-up"))
        return _summary(rows, (panel,), plots, reference)

    return report


def _summary(rows, group_keys, plots, reference) -> dict:
    """Per group: each strategy's median speed-up over ``reference``, and the plots."""
    summary = {"reference": reference, "plots": plots, "groups": {}}
    for group in sorted({tuple(r[k] for k in group_keys) for r in rows}, key=str):
        members = [r for r in rows if tuple(r[k] for k in group_keys) == group
                   and r["seconds"] not in ("", None)]
        medians = {}
        for name in sorted({r["strategy"] for r in members}):
            values = [r["speedup_vs_reference"] for r in members
                      if r["strategy"] == name and r["speedup_vs_reference"] is not None]
            if values:
                medians[name] = float(np.median(values))
        fits = {label: float(np.median([float(r["seconds"]) for r in members
                                         if r["strategy"] == label]))
                for label in USER_LEVEL if any(r["strategy"] == label for r in members)}
        summary["groups"]["/".join(map(str, group))] = {"median_speedup_vs_reference": medians,
                                                        "median_user_level_fit_seconds": fits}
    return summary


# -- seed 000 / 002 ---------------------------------------------------------------------


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
    assign = _default("kmeans.assign", backend)
    too_slow = set()
    for k in ks:
        for d in ds:
            for n in ns:
                host = make_uniform(n, d, random_state=5489)
                centers_host = host[:k].copy()
                cell = {"k": k, "n": n, "d": d}
                if not all(results.has({**cell, "strategy": s}) for s in USER_LEVEL):
                    fits = user_level_fits(backend, host, centers_host, estimator=_forced(
                        backend, centers_host, iterations))
                    for label, seconds in fits.items():
                        results.add({**cell, "strategy": label, "transfer_seconds": "",
                                     "bind_seconds": "", "iteration_seconds": "",
                                     "iterations_timed": "", "total_seconds": seconds,
                                     "note": f"GPUKMeans.fit, {iterations} iterations"})
                for strategy in _strategies(backend):
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


def _report_gpu_vs_hybrid(results, measured) -> dict:
    d = max(results.params["d"])
    reference = _reference(results.rows, ("hybrid", "numpy"))
    rows = _speedups([{**r, "seconds": r.get("total_seconds", "")} for r in results.rows
                      if r["d"] == d], ("k", "n", "d"), reference)
    plots = [_plot_lines(results, "gpu-vs-hybrid", rows, panel="k", x="n",
                         y="speedup_vs_reference", series="strategy",
                         title=f"speed-up over {reference} "
                               f"({results.params['iterations']} iterations, d = {d})",
                         ylabel="speed-up")] if rows else []
    return _summary(rows, ("k",), plots, reference)


def _forced(backend, centers_host, iterations):
    """A ``GPUKMeans`` factory from ``centers_host`` with ``tol = 0``: ``iterations``
    Lloyd iterations, fewer only if no label changes (strict convergence)."""
    from gpumine import GPUKMeans

    return lambda: GPUKMeans(len(centers_host), init=centers_host, max_iter=iterations,
                             tol=0.0, device=backend.name)


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
    backend.synchronize()
    start = time.perf_counter()
    step, sums, weights = summation(xp, update, X, labels, centers.shape[0])  # binds
    backend.synchronize()
    bind_seconds = time.perf_counter() - start
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

    from gpumine import GPUKMeans
    from gpumine.backend import get_backend
    from gpumine.datasets import make_uniform

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
                        run.backend.synchronize()
                        start = time.perf_counter()
                        model = make(data, X[:k]).fit(data)
                        run.backend.synchronize()
                        seconds = time.perf_counter() - start
                    results.add({**row, "fit_seconds": seconds, "n_iter": int(model.n_iter_),
                                 "iteration_seconds": seconds / max(1, model.n_iter_),
                                 "note": ""})
                    run.log(f"gpu-vs-cpu {row} {seconds:.4f} s")
    return results, {}


def _report_gpu_vs_cpu(results, measured) -> dict:
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
    plots = [_plot_lines(results, "gpu-vs-cpu", [{**r, "series": f"{r['over']}, k={r['k']}"}
                                                 for r in rows],
                         panel="d", x="n", y="speedup", series="series",
                         title=f"{mine} whole-fit speed-up", ylabel="speed-up")] if rows else []
    return {"plots": plots, "speedups": rows}


# -- seed 003 ---------------------------------------------------------------------------


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
    from gpumine import WaveCluster
    from gpumine.backend import get_backend

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


def _report_wavecluster(results, measured) -> dict:
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
    plots = [_plot_lines(results, "wavecluster", plot_rows, panel="side", x="grid", y="seconds",
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
    point_cells, grid = stages.histogram(data, None, bounds, shape)
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


# -- peers ------------------------------------------------------------------------------


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
    assign, update = _default("kmeans.assign", backend), _default("kmeans.update", backend)
    cpu_rate = gemm_rate(get_backend("cpu"), 1024, np.float32)
    skipped_all = {}
    for n, d, k in shapes:
        host = (load_corel("edge", data_home=run.data_home) if n == "corel-edge"
                else make_uniform(n, d, random_state=5489))
        n_rows = len(host)
        shape = f"{n_rows}/{d}/{k}" if n != "corel-edge" else f"corel-edge/{d}/{k}"
        X = _device_data(run, host)
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
            estimator=_forced(run.backend, centers_host, iterations)).items()}
    sklearn_name = f"scikit-learn fit ({os.cpu_count()} CPUs)"
    if not results.has({"shape": shape, "impl": sklearn_name}):
        estimate = 3 * iterations * 2.0 * host.shape[0] * host.shape[1] * k / cpu_rate
        if estimate > _SKLEARN_BUDGET_SECONDS:
            results.add({"shape": shape, "impl": sklearn_name, "note":
                         f"skipped: about {estimate:.0f} s estimated, over "
                         f"{_SKLEARN_BUDGET_SECONDS:.0f} s"})
        else:
            model = KMeans(k, init=centers_host, n_init=1, max_iter=iterations, tol=0.0)
            start = time.perf_counter()
            model.fit(host)
            fits[sklearn_name] = time.perf_counter() - start
    for name, seconds in fits.items():
        per_iteration = seconds / iterations
        results.add({"shape": shape, "impl": name, "n": host.shape[0], "d": host.shape[1],
                     "k": k, "iteration_seconds": per_iteration, "floor_seconds": floor,
                     "time_over_floor": per_iteration / floor, "labels_equal_fp64": "",
                     "note": f"whole fit, {iterations} iterations: {seconds:.4f} s"})
        run.log(f"peers {shape} {name}: {seconds:.4f} s for {iterations} iterations")


def _report_peers(results, measured) -> dict:
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


@dataclass(frozen=True)
class Experiment:
    """One experiment: ``measure`` fills the CSV, ``report`` derives the summary and plots.

    ``measure(run)`` returns the :class:`Results` and what it measured beside the rows
    (peers' copy bandwidth and GEMM rate); ``report(results, measured)`` reads only
    those, so a recorded experiment can be re-reported on any machine.
    """

    measure: Callable[[Run], tuple[Results, dict]]
    report: Callable[[Results, dict], dict]


EXPERIMENTS: dict[str, Experiment] = {
    "update-vs-k": Experiment(update_vs_k, _sweep_report("update-vs-k", "n", "k", "update phase",
                                                          speedup_plot=True)),
    "update-vs-d": Experiment(update_vs_d, _sweep_report("update-vs-d", "k", "d",
                                                          "update phase, n = {n}")),
    "corel": Experiment(corel, _sweep_report("corel", "subset", "k", "Corel, update phase")),
    "gpu-vs-hybrid": Experiment(gpu_vs_hybrid, _report_gpu_vs_hybrid),
    "gpu-vs-cpu": Experiment(gpu_vs_cpu, _report_gpu_vs_cpu),
    "wavecluster": Experiment(wavecluster, _report_wavecluster),
    "peers": Experiment(peers, _report_peers),
    "wavecluster-quality": Experiment(wavecluster_quality, report_quality),
}


def _experiment(name: str) -> Experiment:
    if name not in EXPERIMENTS:
        raise InvalidParameterError(f"unknown experiment {name!r}; choose one of "
                                    f"{', '.join(EXPERIMENTS)}")
    return EXPERIMENTS[name]


def run_experiment(name: str, run: Run) -> Path:
    """Run one experiment (resuming from its CSV) and write its JSON; returns the JSON path."""
    experiment = _experiment(name)
    results, measured = experiment.measure(run)
    return results.finish(run.backend, experiment.report(results, measured), measured)


def report_experiment(name: str, out_dir) -> Path:
    """Re-derive the summary and plots of a recorded experiment from its CSV and JSON.

    Nothing is measured and no device is needed: the rows, parameters, context
    (device, versions, commit) and run-level measurements stay as recorded; the
    summary and the PNG files are rewritten by the current code.

    Parameters
    ----------
    name : str
        One of :data:`EXPERIMENTS`.
    out_dir : path-like
        The directory ``gpumine bench run`` wrote.

    Returns
    -------
    pathlib.Path
        The rewritten JSON.

    Examples
    --------
    >>> import tempfile
    >>> from gpumine.backend import get_backend
    >>> out = tempfile.mkdtemp()
    >>> _ = run_experiment("update-vs-d", Run(get_backend("cpu"), out, quick=True,
    ...                                       log=lambda line: None))
    >>> report_experiment("update-vs-d", out).name
    'update-vs-d.json'
    """
    experiment = _experiment(name)
    results = Results.read(out_dir, name)
    return results.rewrite_summary(experiment.report(results, results.measured))
