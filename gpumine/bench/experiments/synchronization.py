"""Seed 004 (Nelson & Palmieri, "Don't Forget About Synchronization!", PMAM 2019), §6.

The update phase (summation + normalization) of every update strategy: against k
(Figures 1-4), against d (Figure 5), and on the Corel features (Figure 6).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gpumine.bench.experiments.common import (
    USER_FIT_ITERATIONS,
    Run,
    device_data,
    labels_of,
    missing_user_fits,
    plot_lines,
    reference_of,
    speedups_of,
    strategies_of,
    summary_of,
    update_phase,
)
from gpumine.bench.record import Results
from gpumine.bench.timing import measure


def _sweep_updates(run, results, cells, data_for):
    """Time every update strategy on each cell ``{..., "k": k}``; skip what is recorded."""
    too_slow = {}
    for cell in cells:
        X, labels, host, centers_host = data_for(cell)
        for label, seconds in missing_user_fits(run, results, cell, host, centers_host):
            results.add({**cell, "strategy": label, "seconds": seconds, "repeats": 3,
                         "note": f"GPUKMeans.fit, {USER_FIT_ITERATIONS} iterations"})
        for strategy in strategies_of(run.backend):
            row = {**cell, "strategy": strategy.name}
            if results.has(row):
                continue
            sweep = tuple((key, value) for key, value in cell.items() if key not in ("d",))
            if (strategy.name, sweep) in too_slow:
                results.add({**row, "seconds": "", "repeats": 0,
                             "note": f"skipped: {too_slow[strategy.name, sweep]}"})
                continue
            m = measure(update_phase(run, strategy, X, labels, cell["k"]), run.backend,
                        repeats=5, budget_seconds=1.0)
            results.add({**row, "seconds": m.seconds, "repeats": m.repeats, "note": ""})
            if m.seconds > run.slow_seconds and "d" in cell:
                too_slow[strategy.name, sweep] = (f"{m.seconds:.1f} s at d={cell['d']}, slower "
                                                  f"than {run.slow_seconds} s")
            run.log(f"{results.name} {row} {m.seconds * 1e3:.3f} ms")


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
            cache[n] = (device_data(run, host), host)
        X, host = cache[n]
        centers_host = make_uniform(k, d, random_state=k)
        return X, labels_of(run, X, run.backend.to_device(centers_host)), host, centers_host

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
        X = device_data(run, host)
        centers_host = make_uniform(cell["k"], cell["d"], random_state=7)
        return X, labels_of(run, X, run.backend.to_device(centers_host)), host, centers_host

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
            cache[subset] = (host, device_data(run, host))
        host, X = cache[subset]
        picks = np.random.RandomState(cell["k"]).choice(len(host), cell["k"], replace=False)
        return X, labels_of(run, X, run.backend.to_device(host[picks])), host, host[picks]

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


def sweep_report(name: str, panel: str, x: str, title: str, speedup_plot: bool = False):
    """The report of an update-phase sweep: seconds (and speed-ups) per strategy vs ``x``.

    One plot panel and one summary group per value of ``panel``; ``title`` may name
    the experiment's parameters (``"n = {n}"``). The reference is seed 004's.
    """
    def report(results, measured) -> dict:
        reference = reference_of(results.rows)
        rows = speedups_of(results.rows, (panel, x), reference)
        plots = [plot_lines(results, name, rows, panel=panel, x=x, y="seconds",
                             series="strategy", title=title.format(**results.params),
                             ylabel="seconds")]
        if speedup_plot:
            plots.append(plot_lines(results, f"{name}-speedup", rows, panel=panel, x=x,
                                     y="speedup_vs_reference", series="strategy",
                                     title=f"speed-up over {reference}", ylabel="speed-up"))
        return summary_of(rows, (panel,), plots, reference)

    return report
