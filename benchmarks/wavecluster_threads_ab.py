"""WaveCluster's ``threshold="auto"`` on the CPU: the coarser levels on the host's threads.

Usage (repository root)::

    python benchmarks/wavecluster_threads_ab.py --out benchmarks/results [--repeats 15]

The CPU takes the rule of each of the wavelet's coarser levels on the host pool, beside the
coarse grid's own (``engine.AUTO_COARSER_THREADS``; the compiled steps release the GIL), or
one after another in the calling thread. On the sets of ``wavecluster_auto_cost.py`` at 1x,
10x and 40x: the median of whole ``fit`` calls each way and given the threshold that auto
chose (one level: no coarser levels), taken in turns in one process so that drift touches
all alike (``--block B``: B fits of a way back to back each turn, as a user's loop calls
them); the two autos' labels and thresholds are checked equal. Threads are taken from
``engine.AUTO_COARSER_THREAD_CELLS`` coarse cells (``--thread-cells``). Writes
``wavecluster-threads-ab-<date>-<commit>.json`` (with the host's CPU count).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import numpy as np
from fit_timing import save  # the script's folder is on sys.path
from wavecluster_auto_cost import SCALES, SETS  # the same sets and sizes

from gpumine.bench.record import commit


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--scales", type=float, nargs="*", default=SCALES)
    parser.add_argument("--block", type=int, default=1,
                        help="fits of one way back to back in each turn")
    parser.add_argument("--thread-cells", type=int, default=None,
                        help="override engine.AUTO_COARSER_THREAD_CELLS (0: threads on "
                             "every grid)")
    args = parser.parse_args()
    import numba

    from gpumine import WaveCluster
    from gpumine.backend import host_pool_threads
    from gpumine.datasets import make_shape_sets
    from gpumine.wavecluster import engine

    if args.thread_cells is not None:
        engine.AUTO_COARSER_THREAD_CELLS = args.thread_cells
    rows = []
    for scale in args.scales:
        drawn = make_shape_sets(scale=scale, random_state=0)
        for name in SETS:
            X, _ = drawn[name]
            threshold = WaveCluster(device="cpu").fit(X).threshold_  # warm-up too
            ways = {"threads": (True, "auto"), "one_thread": (False, "auto"),
                    "fixed": (True, threshold)}
            times = {way: [] for way in ways}
            models = {}
            for _ in range(args.repeats):
                for way, (threads, chosen) in ways.items():
                    engine.AUTO_COARSER_THREADS = threads
                    for _ in range(args.block):  # a user's fits back to back
                        start = time.perf_counter()
                        models[way] = WaveCluster(device="cpu", threshold=chosen).fit(X)
                        times[way].append(time.perf_counter() - start)
            engine.AUTO_COARSER_THREADS = True
            same = bool(np.array_equal(models["threads"].labels_, models["one_thread"].labels_)
                        and models["threads"].threshold_ == models["one_thread"].threshold_)
            med = {way: statistics.median(t) for way, t in times.items()}
            row = {"set": name, "scale": scale, "n": len(X), "d": X.shape[1],
                   "threads_s": med["threads"], "one_thread_s": med["one_thread"],
                   "fixed_s": med["fixed"],
                   "threads_over_fixed": med["threads"] / med["fixed"],
                   "one_thread_over_fixed": med["one_thread"] / med["fixed"],
                   "threads_over_one_thread": med["threads"] / med["one_thread"],
                   "same_labels": same}
            print({k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()},
                  flush=True)
            rows.append(row)
    record = {"device": f"cpu ({platform.processor() or platform.machine()})",
              "cpus": os.cpu_count(), "pool_threads": host_pool_threads(),
              "commit": commit(), "repeats": args.repeats, "block": args.block,
              "thread_cells": engine.AUTO_COARSER_THREAD_CELLS,
              "versions": {"numpy": np.__version__, "numba": numba.__version__,
                           "python": platform.python_version()},
              "rows": rows}
    save(args.out, "wavecluster-threads-ab", record)


if __name__ == "__main__":
    main()
