"""tc-exact's bound call under settings of ``gpumine.kmeans.tensor_cores``, in turns in one
process (issue 13).

Usage (repository root, on a machine with a CUDA GPU and CuPy)::

    python benchmarks/tc_settings.py --out benchmarks/results --tag TAG \\
        --set INDIRECT_WAVES=0,2,4 [--set _RECHECK_RANGES=16,32 ...]

Each ``--set NAME=v1,v2,...`` names a module constant of ``gpumine.kmeans.tensor_cores``
and its values (integers); every combination of the values is a setting. For each case
(uniform MT19937 seed 5489, or 64 blobs, as ``fit_vs_flash.py`` makes them; centres the
first k rows or those of ten ``tiled`` iterations, as ``tc_clustered.py`` stages them) and
each setting, in turns, three rounds: the device time of one assignment of a bound run
(``assign_tc_exact.bind``, the screen where its plan keeps it) settled on its plan (5 calls
after a warm-up), the rows queued for the re-check and left by the screen, and whether its
labels equal ``tiled``'s on every row (poisoned labels in). ``--cases`` picks some of the
cases by their number. Writes ``tc-settings[-tag]-<date>-<commit>.json``. The records
``tc-recheck-ranges-*`` came from this script under its former name (``_RECHECK_RANGES``,
``_RECHECK_TILE``, ``_RECHECK_SPLIT_BLOCKS``).
"""

from __future__ import annotations

import argparse
import itertools
from functools import partial

from fit_timing import save  # the script's folder is on sys.path
from gpu_check import device_time
from tc_clustered import staged_cases

CASES = [(1_000_000, 128, 1024, "uniform"), (1_000_000, 64, 1024, "uniform"),
         (10_000_000, 32, 1024, "uniform"), (1_000_000, 100, 1000, "uniform"),
         (50_000, 32, 2048, "uniform"), (4_000_000, 8, 200, "uniform"),
         (1_000_000, 4, 400, "uniform"), (1_000_000, 128, 1024, "blobs:64")]


def _settings(specs: list[str]) -> list[dict]:
    names, values = [], []
    for spec in specs:
        name, _, listed = spec.partition("=")
        names.append(name)
        values.append([int(v) for v in listed.split(",")])  # sync: none, text
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*values)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--centres", default="/tmp")
    parser.add_argument("--tag", default="")
    parser.add_argument("--set", action="append", required=True, dest="sets")
    parser.add_argument("--cases", type=int, nargs="*", default=None)
    args = parser.parse_args()
    from gpumine.backend import get_backend
    from gpumine.bench.record import context
    from gpumine.kmeans import tensor_cores as tc

    backend = get_backend("gpu")
    cp = backend.xp
    settings = _settings(args.sets)
    saved = {name: getattr(tc, name) for name in settings[0]}
    cases = CASES if args.cases is None else [CASES[i] for i in args.cases]
    record = {**context(backend), "settings": settings, "rows": []}
    try:
        for n, d, k, kind, stage, X, centres, expected in staged_cases(cp, cases, args.centres):
            row = {"n": n, "d": d, "k": k, "data": kind, "centres": stage, "ms": {},
                   "queued": {}, "screen_left": {}, "equal_tiled": {}}
            runs = {}
            for _ in range(3):
                for setting in settings:
                    name = ",".join(f"{key}={value}" for key, value in setting.items())
                    for key, value in setting.items():
                        setattr(tc, key, value)
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
                    counters = cp.asnumpy(  # sync: the record's counters
                        run.scratch.empty("counters", 5, cp.uint32))
                    row["queued"][name] = int(counters[1])  # sync: none, host values
                    row["screen_left"][name] = int(counters[3])  # sync: none, host values
                    row["equal_tiled"][name] = bool((labels == expected).all())  # sync
            print({"n": n, "d": d, "k": k, "data": kind, "centres": stage,
                   "ms": {key: round(min(v), 4) for key, v in row["ms"].items()},
                   "queued": max(row["queued"].values()),
                   "left": max(row["screen_left"].values()),
                   "equal": all(row["equal_tiled"].values())}, flush=True)
            record["rows"].append(row)
    finally:
        for key, value in saved.items():
            setattr(tc, key, value)
    save(args.out, "tc-settings" + (f"-{args.tag}" if args.tag else ""), record)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
