"""Where a small device fit's host time goes: cProfile of a user-level ``GPUKMeans.fit``.

Usage (repository root, on a GPU machine)::

    python benchmarks/profile_fit.py [--iters 10] [--calls 30] [--top 45]

The case is fit_timing's Corel-size fit: 17,695 x 18 float32 blobs, k = 128, 10 Lloyd
iterations from fixed centres (tol = 0), data already on the device. Prints the
median wall time of a fit, then the functions sorted by cumulative time per fit, then
who calls the costliest CuPy operations (the ones that synchronize or sort).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats

import numpy as np
from fit_timing import blobs  # the script's folder is on sys.path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--top", type=int, default=45)
    args = parser.parse_args()

    import cupy as cp

    from gpumine.backend import get_backend
    from gpumine.bench.timing import measure
    from gpumine.kmeans import GPUKMeans

    X_host = blobs(17_695, 18, 128, seed=1)
    X = cp.ascontiguousarray(cp.asarray(X_host).T).T
    centres = X_host[np.random.RandomState(0).choice(len(X_host), 128, replace=False)]

    def fit():
        return GPUKMeans(128, init=centres, max_iter=args.iters, tol=0, device="gpu").fit(X)

    times = measure(fit, get_backend("gpu"), repeats=args.calls, warmup=3, budget_seconds=None,
                    clock="host").times
    print(f"fit, {args.iters} iterations: median {1e3 * np.median(times):.3f} ms "
          f"(min {1e3 * min(times):.3f})")

    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(args.calls):
        fit()
    cp.cuda.get_current_stream().synchronize()
    profiler.disable()
    stats = pstats.Stats(profiler)
    stats.sort_stats("cumulative").print_stats(args.top)
    stats.sort_stats("tottime").print_stats(args.top)
    stats.print_callers("argpartition|unravel_index|bincount|any|get|_check_finite|tolerance"
                        "|count_nonzero|mean")


if __name__ == "__main__":
    main()
