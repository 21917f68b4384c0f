"""tc-exact's shift (the centres' mean, ``tc_center_mean``) by its threads a feature, in
one process (issue 13).

Usage (repository root, on a machine with a CUDA GPU and CuPy)::

    python benchmarks/tc_center_mean.py --out benchmarks/results [--tag ...]

For each (k, d) of the issue's shapes, centres from MT19937 seed 5489: the device time of
one launch (100 launches back to back after a warm-up, three rounds in turns) with a block
of 32 x Y threads for each Y, and whether every Y's shift is within 2^-40 of the float64
mean NumPy computes (the summation order differs by Y; each Y's is fixed).
Writes ``tc-center-mean[-tag]-<date>-<commit>.json``.
"""

from __future__ import annotations

import argparse

import numpy as np
from fit_timing import save  # the script's folder is on sys.path
from gpu_check import device_time

SHAPES = [(1024, 128), (1024, 32), (1000, 100), (2048, 32), (400, 4), (200, 8), (16384, 32)]
ROWS = (8, 16, 32)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--tag", default="")
    args = parser.parse_args()
    from gpumine.backend import get_backend
    from gpumine.bench.record import context
    from gpumine.datasets import make_uniform
    from gpumine.kernels import get_kernel, launch
    from gpumine.kmeans import tensor_cores as tc

    backend = get_backend("gpu")
    cp = backend.xp
    record = {**context(backend), "rows_per_feature": list(ROWS), "shapes": []}
    for k, d in SHAPES:
        host = make_uniform(k, d, random_state=5489).astype(np.float32)
        centres = cp.asarray(host)
        shift = cp.empty(d, dtype=cp.float64)
        kernel = get_kernel(tc._SOURCE, "tc_center_mean", centres.dtype)
        expected = host.astype(np.float64).mean(axis=0)

        def once(y, kernel=kernel, centres=centres, shift=shift, k=k, d=d):
            launch(kernel, (-(-d // 32),), (32, y), (centres, np.int32(k), np.int32(d), shift))

        row = {"k": k, "d": d, "us": {}, "close": {}}
        for _ in range(3):
            for y in ROWS:
                row["us"].setdefault(str(y), []).append(
                    device_time(cp, lambda y=y: once(y), 100) * 1e6)
                once(y)
                got = cp.asnumpy(shift)  # sync: the check
                close = np.abs(got - expected) <= 2.0**-40 * (1 + np.abs(expected))
                row["close"][str(y)] = bool(close.all())  # sync: none, host arrays
        print({"k": k, "d": d, "us": {y: round(min(v), 2) for y, v in row["us"].items()},
               "close": all(row["close"].values())}, flush=True)
        record["shapes"].append(row)
    save(args.out, "tc-center-mean" + (f"-{args.tag}" if args.tag else ""), record)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
