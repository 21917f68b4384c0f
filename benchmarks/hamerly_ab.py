"""Whole ``hamerly`` fits of this tree against an older version of its bounds kernels or
grids, in turns in one process.

Usage (repository root, on a GPU machine)::

    GPUMINE_COMMIT=<hash> python benchmarks/hamerly_ab.py --out $OUT [--old-grid] \\
        [--old-source kmeans_bounds_old.cu] [--old-tc-source kmeans_assign_tc_old.cu] \\
        [--only 10000000,32,1024 1000000,128,1024] [--data uniform blobs:64] [--repeats 5] \\
        [--tag NAME]

The "old" arm: with ``--old-grid``, the strided kernels (the filter, the SIMT scan and the
tensor scan's moves) on the fixed eight blocks per multiprocessor they had before one wave
of resident blocks (``gpumine.kernels.stride_grid``); with ``--old-source``, the bounds
kernels from that file of ``kernels/`` (e.g. a copy of an earlier commit's
``kmeans_bounds.cu``); with ``--old-tc-source``, the tensor-core kernels (the scan of the
queue past 32 features or at many centres: ``tensor_cores._SOURCE``) from that file.

For each shape and data (``fit_vs_flash.py``'s: the first k rows as centres, ``tol=0``):
``GPUKMeans(k, init=C, max_iter=m, tol=0, assign="hamerly", update="atomic-fixed")`` from
device data for m = 20 and 100, each fit ``--repeats`` times with the new arm and the old
one in turns; a steady iteration is ``(t(100) - t(20)) / 80`` of the medians. Both arms'
labels and centres must be equal (``fits_equal``; exact labels, exact sums). Writes
``hamerly-ab-<date>-<commit>[-tag].json``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import cupy as cp
import numpy as np
from fit_timing import save  # the script's folder is on sys.path
from fit_vs_flash import _data

from gpumine import GPUKMeans
from gpumine.backend import get_backend
from gpumine.bench.record import context
from gpumine.kernels import device_attribute
from gpumine.kmeans import bounds, tensor_cores

_NEW = bounds.stride_grid
_SOURCE = bounds._SOURCE
_TC_SOURCE = tensor_cores._SOURCE


def _old(kernel, block, count, shared_mem=0):
    """The grid before: eight blocks per multiprocessor, whatever fits."""
    return max(1, min(-(-int(count) // block), device_attribute("MultiProcessorCount") * 8))


def _fit(X, C, k, iterations, arm):
    bounds.stride_grid, bounds._SOURCE, tensor_cores._SOURCE = arm
    cp.cuda.Device().synchronize()
    start = time.perf_counter()
    model = GPUKMeans(k, init=C, n_init=1, max_iter=iterations, tol=0.0, assign="hamerly",
                      update="atomic-fixed", device="gpu").fit(X)
    cp.cuda.Device().synchronize()
    return time.perf_counter() - start, model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--only", nargs="+",
                        default=["10000000,32,1024", "1000000,128,1024", "4000000,8,200"])
    parser.add_argument("--data", nargs="+", default=["uniform"])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--old-grid", action="store_true")
    parser.add_argument("--old-source", default=None)
    parser.add_argument("--old-tc-source", default=None)
    parser.add_argument("--tag", default="")
    args = parser.parse_args()
    new = (_NEW, _SOURCE, _TC_SOURCE)
    old = (_old if args.old_grid else _NEW, args.old_source or _SOURCE,
           args.old_tc_source or _TC_SOURCE)
    rows = []
    for shape in args.only:
        n, d, k = map(int, shape.split(","))
        for data in args.data:
            X = cp.asarray(_data(n, d, data))
            C = X[:k].copy()
            seconds = {(name, m): [] for name in ("new", "old") for m in (20, 100)}
            equal = True
            for iterations in (20, 100):
                _fit(X, C, k, iterations, new)  # warm-up: compiles, binds
                _fit(X, C, k, iterations, old)
                for _ in range(args.repeats):
                    t_new, a = _fit(X, C, k, iterations, new)
                    t_old, b = _fit(X, C, k, iterations, old)
                    seconds["new", iterations].append(t_new)
                    seconds["old", iterations].append(t_old)
                    equal = equal and bool(cp.array_equal(a.labels_, b.labels_)) and bool(
                        cp.array_equal(a.cluster_centers_, b.cluster_centers_))
            median = {key: statistics.median(v) for key, v in seconds.items()}
            steady = {name: (median[name, 100] - median[name, 20]) / 80 for name in ("new", "old")}
            row = {"n": n, "d": d, "k": k, "data": data,
                   "seconds": {f"{name}/{m}": v for (name, m), v in median.items()},
                   "steady_iteration_s": steady,
                   "new_over_old_steady": steady["new"] / steady["old"],
                   "new_over_old_20": median["new", 20] / median["old", 20],
                   "fits_equal": equal}
            print(row, flush=True)
            rows.append(row)
            del X, C
            cp.get_default_memory_pool().free_all_blocks()
    bounds.stride_grid, bounds._SOURCE, tensor_cores._SOURCE = new
    record = {**context(get_backend("gpu")), "old_grid": args.old_grid,
              "old_source": args.old_source, "old_tc_source": args.old_tc_source,
              "repeats": args.repeats, "rows": rows,
              "numpy": np.__version__}
    save(args.out, "hamerly-ab" + (f"-{args.tag}" if args.tag else ""), record)


if __name__ == "__main__":
    main()
