"""The split kernel's centre ranges over the rows the screen left, by their two settings
(issue 13).

Usage (repository root, on a machine with a CUDA GPU and CuPy)::

    python benchmarks/tc_ranges.py --out benchmarks/results [--tag ...]

A bound tc-exact run (the screen, then the split kernel on the rows it left) splits that
pass's centres into up to ``RANGES`` ranges, its blocks in all up to ``RANGE_WAVES`` of the
kernel's resident blocks (``gpumine.kmeans.tensor_cores``). For each case (uniform MT19937
seed 5489 or blobs, as ``fit_vs_flash.py`` makes them; centres the first k rows or those
of ten ``tiled`` iterations, as ``tc_clustered.py`` stages them) and each pair of settings
(``RANGES`` 1: none), in turns, three rounds: the device time of one assignment of a run
settled on its plan (5 calls after a warm-up), the ranges it took, the rows the screen
left, and whether its labels equal ``tiled``'s on every row (poisoned labels in).
Writes ``tc-ranges[-tag]-<date>-<commit>.json``.
"""

from __future__ import annotations

import argparse
from functools import partial

from fit_timing import save  # the script's folder is on sys.path
from gpu_check import device_time
from tc_clustered import staged_cases

CASES = [(1_000_000, 128, 1024, "uniform"), (1_000_000, 64, 1024, "uniform"),
         (1_000_000, 128, 256, "uniform"), (1_000_000, 100, 1000, "uniform"),
         (1_000_000, 128, 1024, "blobs:256"), (200_000, 128, 1024, "uniform")]
SETTINGS = [(1, 4), (4, 4), (16, 2), (16, 4), (16, 8)]


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
    saved = tc.RANGES, tc.RANGE_WAVES
    record = {**context(backend), "settings": SETTINGS, "rows": []}
    try:
        for n, d, k, kind, stage, X, centres, expected in staged_cases(cp, CASES, args.centres):
            row = {"n": n, "d": d, "k": k, "data": kind, "centres": stage, "ms": {},
                   "ranges": {}, "screen_left": {}, "equal_tiled": {}}
            runs = {}
            for _ in range(3):
                for most, waves in SETTINGS:
                    name = f"{most}x{waves}"
                    tc.RANGES, tc.RANGE_WAVES = most, waves
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
                    counters = cp.asnumpy(run.scratch.empty("counters", 6, cp.uint32))  # sync
                    row["ranges"][name] = int(counters[5])  # sync: none, host values
                    row["screen_left"][name] = int(counters[3])  # sync: none, host values
                    row["equal_tiled"][name] = bool((labels == expected).all())  # sync
            print({"n": n, "d": d, "k": k, "data": kind, "centres": stage,
                   "ms": {key: round(min(v), 4) for key, v in row["ms"].items()},
                   "ranges": row["ranges"], "left": row["screen_left"]["1x4"],
                   "equal": all(row["equal_tiled"].values())}, flush=True)
            record["rows"].append(row)
    finally:
        tc.RANGES, tc.RANGE_WAVES = saved
    save(args.out, "tc-ranges" + (f"-{args.tag}" if args.tag else ""), record)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
