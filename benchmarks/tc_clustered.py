"""tc-exact's assignment on clustered and uniform data: rows queued and time of a call.

Usage (repository root, on a machine with a CUDA GPU and CuPy)::

    python benchmarks/tc_clustered.py --out benchmarks/results [--tag base]
        [--dtype float64] [--only 1000000,128,1024,blobs:64 ...]

The bound of ``assign="tc-exact"`` scales with the rows' and centres' norms after the
shift, the top-2 margins with the clusters' spread, so clustered data queues many more rows
for the re-check than the uniform data of the per-iteration benchmark (``tc_assign.py``).
For each shape and data set (``uniform``: MT19937 seed 5489; ``blobs:C``: rows around C
centres drawn in [-10, 10]^d with unit normal noise, seed 0, as ``fit_vs_flash.py``'s), from
two sets of centres -- the first k rows (``init``) and those of 10 ``tiled`` Lloyd
iterations from them (``iter10``, saved under ``--centres`` so that versions installed
apart and run in turns use the same ones) -- the rows the bound queues, the device time of
one assignment (5 calls after a warm-up) and whether its labels equal ``tiled``'s on every
row (poisoned labels in); ``--dtype float64`` takes the same rows and centres in float64,
``--only`` some of the cases. Writes ``tc-clustered[-tag]-<date>-<commit>.json``. The A/B
records ``tc-recheck-pruned-ab-h100-2026-11-27-*`` ran this measurement (as a scratch
script then) for each installed version in turns.
"""

from __future__ import annotations

import argparse
import os
from functools import partial

import numpy as np
from fit_timing import save  # the script's folder is on sys.path
from fit_vs_flash import _data  # the same uniform and blob data as the fits
from gpu_check import device_time

CASES = [(1_000_000, 128, 1024, "blobs:64"), (1_000_000, 128, 1024, "uniform"),
         (10_000_000, 32, 1024, "blobs:64"), (10_000_000, 32, 1024, "uniform"),
         (1_000_000, 64, 1024, "blobs:64"), (1_000_000, 128, 1024, "blobs:1024"),
         (50_000, 32, 2048, "uniform"), (4_000_000, 8, 200, "uniform"),
         (1_000_000, 4, 400, "blobs:64"), (1_000_000, 128, 2048, "blobs:64"),
         (1_000_000, 128, 4096, "blobs:64")]


def _centres(cp, X, k, stage, path):
    from gpumine import GPUKMeans

    if stage == "init":
        return X[:k].copy()
    if os.path.exists(path):
        return cp.asarray(np.load(path), dtype=X.dtype)
    fit = GPUKMeans(k, init=cp.asnumpy(X[:k]), n_init=1, max_iter=10, tol=0, assign="tiled",
                    device="gpu").fit(X)
    centres = cp.asarray(fit.cluster_centers_, dtype=cp.float32)
    np.save(path, cp.asnumpy(centres))
    return centres.astype(X.dtype)


def staged_cases(cp, cases, centres_dir):
    """For each ``(n, d, k, kind)`` and each stage (``init``, ``iter10``): ``(n, d, k, kind,
    stage, X, centres, expected)``, X column-major on the device, ``expected`` tiled's labels
    for those centres; each case's memory freed before the next."""
    from gpumine import registry

    tiled = registry.load_strategy("kmeans.assign", "tiled")
    for n, d, k, kind in cases:
        X = cp.ascontiguousarray(cp.asarray(_data(n, d, kind)).T).T
        for stage in ("init", "iter10"):
            centres = _centres(cp, X, k, stage, os.path.join(
                centres_dir, f"centres-{n}-{d}-{k}-{kind}-{stage}.npy"))
            expected = cp.zeros(n, dtype=cp.int32)
            tiled(X, centres, expected)
            yield n, d, k, kind, stage, X, centres, expected
        del X
        cp.get_default_memory_pool().free_all_blocks()


def measure(cp, n, d, k, kind, centres_dir, dtype="float32") -> list[dict]:
    from gpumine import registry
    from gpumine.kmeans.tensor_cores import queued_rows

    assign = registry.load_strategy("kmeans.assign", "tc-exact")
    tiled = registry.load_strategy("kmeans.assign", "tiled")
    X = cp.ascontiguousarray(cp.asarray(_data(n, d, kind), dtype=dtype).T).T
    rows = []
    for stage in ("init", "iter10"):
        centres = _centres(cp, X, k, stage,
                           os.path.join(centres_dir, f"centres-{n}-{d}-{k}-{kind}-{stage}.npy"))
        expected = cp.zeros(n, dtype=cp.int32)
        tiled(X, centres, expected)
        scratch = cp.zeros(n, dtype=cp.int32)
        row = {"n": n, "d": d, "k": k, "data": kind, "dtype": dtype, "centres": stage,
               "queued": queued_rows(X, centres),
               "assign_s": device_time(cp, partial(assign, X, centres, scratch), 5)}
        labels = cp.full(n, -7, dtype=cp.int32)
        assign(X, centres, labels)
        row["labels_equal_tiled"] = bool((labels == expected).all())  # sync: the check
        print(row, flush=True)
        rows.append(row)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--centres", default="/tmp", help="where iter10 centres are kept")
    parser.add_argument("--tag", default="", help="appended to the record's name")
    parser.add_argument("--dtype", default="float32", choices=("float32", "float64"))
    parser.add_argument("--only", nargs="*", default=None, metavar="N,D,K,DATA",
                        help="run these of the cases alone")
    args = parser.parse_args()
    from gpumine.backend import get_backend
    from gpumine.bench.record import context

    backend = get_backend("gpu")
    cp = backend.xp
    record = {**context(backend), "rows": []}
    cases = CASES
    if args.only is not None:
        cases = [case for case in CASES if ",".join(map(str, case)) in args.only]
        if len(cases) != len(args.only):
            parser.error(f"--only takes cases of {[','.join(map(str, c)) for c in CASES]}")
    for n, d, k, kind in cases:
        record["rows"].extend(measure(cp, n, d, k, kind, args.centres, args.dtype))
        cp.get_default_memory_pool().free_all_blocks()
    save(args.out, "tc-clustered" + (f"-{args.tag}" if args.tag else ""), record)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
