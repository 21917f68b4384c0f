"""The exact tensor-core assignment alone (``assign="tc-exact"``), per call, on issue 13's shapes.

Usage (repository root, on a machine with a CUDA GPU)::

    python benchmarks/tc_recheck_ab.py --out benchmarks/results [--tag=-baseline-...]

For each shape (uniform data, MT19937 seed 5489, the first k points as centres; and, for
1M x 32 x 1024, 64 Gaussian blobs, where many rows are near-ties): the device time of one
tc-exact assignment (CUDA events around back-to-back calls, each from the labels the last
one left: late Lloyd iterations), the same from labels of -1 (a fit's first iteration), the
rows it re-checked (from labels 0), and ``tiled``'s time beside it. Run it once per
installed version, in one call of the device, to compare versions of the re-check.
Writes ``tc-recheck-ab-<date>-<commit>.json``.
"""

from __future__ import annotations

import argparse
import platform

from fit_timing import save  # the script's folder is on sys.path
from gpu_check import device_time

SHAPES = [(1_000_000, 128, 1024, "uniform"), (1_000_000, 64, 1024, "uniform"),
          (10_000_000, 32, 1024, "uniform"),
          (1_000_000, 32, 1024, "blobs"), (50_000, 32, 2048, "uniform"),
          (4_000_000, 8, 200, "uniform")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--tag", default="", help="appended to the record's name")
    args = parser.parse_args()
    import cupy as cp
    import numpy as np

    from gpumine import registry
    from gpumine.bench.record import commit
    from gpumine.datasets import make_uniform
    from gpumine.kmeans.tensor_cores import queued_rows

    rows = []
    for n, d, k, kind in SHAPES:
        if kind == "uniform":
            host = make_uniform(n, d, random_state=5489)
        else:
            rng = np.random.RandomState(5489)
            means = rng.uniform(-10, 10, size=(64, d))
            host = (means[rng.randint(0, 64, size=n)] + rng.normal(size=(n, d))).astype(
                np.float32)
        X = cp.ascontiguousarray(cp.asarray(host).T).T
        centers = X[:k].copy()
        row = {"n": n, "d": d, "k": k, "data": kind,
               "rows_rechecked": queued_rows(X, centers)}
        for name in ("tc-exact", "tc-fast", "tiled"):
            assign = registry.load_strategy("kmeans.assign", name)
            labels = cp.zeros(n, dtype=cp.int32)
            row[f"{name}_ms"] = device_time(
                cp, lambda a=assign, lb=labels, x=X, c=centers: a(x, c, lb), 10) * 1e3
        # from no previous labels (each call after filling them with -1), as a fit's first
        # iteration; the calls above start from their own last labels, as late iterations
        exact_assign = registry.load_strategy("kmeans.assign", "tc-exact")
        scratch = cp.empty(n, dtype=cp.int32)

        def unlabelled(a=exact_assign, lb=scratch, x=X, c=centers):
            lb.fill(-1)
            a(x, c, lb)

        row["tc-exact_unlabelled_ms"] = device_time(cp, unlabelled, 10) * 1e3
        print(row, flush=True)
        rows.append(row)
        del X, centers
        cp.get_default_memory_pool().free_all_blocks()
    record = {"device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
              "commit": commit(), "rows": rows,
              "versions": {"cupy": cp.__version__, "python": platform.python_version()}}
    save(args.out, "tc-recheck-ab" + args.tag, record)


if __name__ == "__main__":
    main()
