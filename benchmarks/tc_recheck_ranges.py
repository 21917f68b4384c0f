"""tc-exact's re-check of the queued rows over ranges of the centres, by its settings
(issue 13).

Usage (repository root, on a machine with a CUDA GPU and CuPy)::

    python benchmarks/tc_recheck_ranges.py --out benchmarks/results [--tag ...]

The rows the bound leaves are gathered into a compact buffer and assigned against up to
``_RECHECK_RANGES`` ranges of the centres at once (``assign_recheck_split``: a block row a
range, a thread a row, centre tiles of at most ``_RECHECK_TILE``), the ranges' answers then
merged (``gpumine.kmeans.tensor_cores._recheck``). A few thousand queued rows are a few
dozen blocks a range, each thread walking its range's centres over every feature. For each
case (uniform MT19937 seed 5489, or 64 blobs, as ``fit_vs_flash.py`` makes them; centres
the first k rows or those of ten ``tiled`` iterations, as ``tc_clustered.py`` stages them)
and each set of settings (ranges, tile, and ``_RECHECK_SPLIT_BLOCKS``: the split
re-check's blocks a multiprocessor over all the ranges), in turns, three rounds: the device
time of one assignment of a bound run settled on its plan (5 calls after a warm-up), the
rows queued, and whether its labels equal ``tiled``'s on every row (poisoned labels in).
Writes ``tc-recheck-ranges[-tag]-<date>-<commit>.json``.
"""

from __future__ import annotations

import argparse
from functools import partial

from fit_timing import save  # the script's folder is on sys.path
from gpu_check import device_time
from tc_clustered import staged_cases

CASES = [(1_000_000, 128, 1024, "uniform"), (1_000_000, 64, 1024, "uniform"),
         (10_000_000, 32, 1024, "uniform"), (1_000_000, 100, 1000, "uniform"),
         (50_000, 32, 2048, "uniform"), (4_000_000, 8, 200, "uniform"),
         (1_000_000, 4, 400, "uniform"), (1_000_000, 128, 1024, "blobs:64")]
SETTINGS = [(32, 32, 64), (32, 32, 16), (32, 32, 8), (32, 32, 4), (16, 32, 8)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--centres", default="/tmp")
    parser.add_argument("--tag", default="")
    args = parser.parse_args()
    from gpumine.backend import get_backend
    from gpumine.bench.record import context
    from gpumine.kmeans import tensor_cores as tc

    backend = get_backend("gpu")
    cp = backend.xp
    saved = tc._RECHECK_RANGES, tc._RECHECK_TILE, tc._RECHECK_SPLIT_BLOCKS
    record = {**context(backend), "settings": SETTINGS, "rows": []}
    try:
        for n, d, k, kind, stage, X, centres, expected in staged_cases(cp, CASES, args.centres):
            row = {"n": n, "d": d, "k": k, "data": kind, "centres": stage, "ms": {},
                   "queued": None, "equal_tiled": {}}
            runs = {}
            for _ in range(3):
                for most, tile, blocks in SETTINGS:
                    name = f"{most}x{tile}/{blocks}"
                    tc._RECHECK_RANGES, tc._RECHECK_TILE, tc._RECHECK_SPLIT_BLOCKS = \
                        most, tile, blocks
                    if name not in runs:  # settled on its plan, its kernels compiled
                        runs[name] = tc.assign_tc_exact.bind(X)
                        for _ in range(3):
                            runs[name](X, centres, cp.zeros(n, dtype=cp.int32))
                    run = runs[name]
                    scratch = cp.zeros(n, dtype=cp.int32)
                    row["ms"].setdefault(name, []).append(
                        device_time(cp, partial(run, X, centres, scratch), 5) * 1e3)
                    labels = cp.full(n, -7, dtype=cp.int32)
                    run(X, centres, labels)
                    counters = run.scratch.empty("counters", 5, cp.uint32)
                    row["queued"] = int(counters[1].get())  # sync: the record's count
                    row["equal_tiled"][name] = bool((labels == expected).all())  # sync
            print({"n": n, "d": d, "k": k, "data": kind, "centres": stage,
                   "ms": {key: round(min(v), 4) for key, v in row["ms"].items()},
                   "queued": row["queued"], "equal": all(row["equal_tiled"].values())},
                  flush=True)
            record["rows"].append(row)
    finally:
        tc._RECHECK_RANGES, tc._RECHECK_TILE, tc._RECHECK_SPLIT_BLOCKS = saved
    save(args.out, "tc-recheck-ranges" + (f"-{args.tag}" if args.tag else ""), record)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
