"""CPU Lloyd iteration and whole fit against scikit-learn, in one process (issue 16, item 5).

Usage (repository root)::

    python benchmarks/cpu_step.py --out benchmarks/results

On uniform data (MT19937 seed 5489) from the same initial centres, tol = 0: the marginal
time of one iteration, ``(T(45 iterations) - T(5 iterations)) / 40`` with the median of
eleven fits each (the best of them is recorded too: on a 2-core machine single
iterations are preempted for milliseconds now and then, so the median is the steadier),
for scikit-learn's ``KMeans(algorithm="lloyd")`` and gpumine's CPU path
with the compiled (``numba``) and the reference (``numpy``) strategies; then the whole
default fit (k-means++, default tol) of each, best of three. The runs alternate so that
machine noise falls on all of them. Writes ``cpu-step-<date>-<commit>.json`` with the
CPU count and versions.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform

import numpy as np
from fit_timing import save  # the script's folder is on sys.path

from gpumine.bench.record import commit
from gpumine.bench.timing import timed

SHAPES = [(100_000, 8, 8), (100_000, 32, 64), (1_000_000, 8, 16)]


def _fit_seconds(make, X) -> float:
    model = make()
    return timed(lambda: model.fit(X))[1]


def measure(n, d, k) -> dict:
    from sklearn.cluster import KMeans

    from gpumine import GPUKMeans
    from gpumine.datasets import make_uniform

    X = make_uniform(n, d, random_state=5489).astype(np.float32)
    init = X[:k].copy()
    makers = {
        "sklearn": lambda it: KMeans(k, init=init, n_init=1, max_iter=it, tol=0,
                                     algorithm="lloyd"),
        "gpumine-numba": lambda it: GPUKMeans(k, init=init, n_init=1, max_iter=it, tol=0,
                                              device="cpu", assign="numba", update="numba"),
        "gpumine-numpy": lambda it: GPUKMeans(k, init=init, n_init=1, max_iter=it, tol=0,
                                              device="cpu", assign="numpy", update="numpy"),
    }
    for make in makers.values():  # warm-up: Numba's compilation, BLAS and OpenMP pools
        _fit_seconds(lambda make=make: make(2), X)
    runs = {name: {5: [], 45: []} for name in makers}
    for _ in range(11):
        for name, make in makers.items():
            for iterations in (5, 45):
                runs[name][iterations].append(
                    _fit_seconds(lambda make=make, it=iterations: make(it), X))
    per_iteration = {name: (np.median(r[45]) - np.median(r[5])) / 40
                     for name, r in runs.items()}
    per_iteration_best = {name: (min(r[45]) - min(r[5])) / 40 for name, r in runs.items()}
    whole = {}
    defaults = {"sklearn": lambda: KMeans(k, random_state=0),
                "gpumine-numba": lambda: GPUKMeans(k, random_state=0, device="cpu"),
                "gpumine-numpy": lambda: GPUKMeans(k, random_state=0, device="cpu",
                                                   assign="numpy", update="numpy")}
    for name, make in defaults.items():
        whole[name] = min(_fit_seconds(make, X) for _ in range(3))
    row = {"n": n, "d": d, "k": k, "iteration_s": per_iteration,
           "iteration_best_s": per_iteration_best, "whole_fit_s": whole,
           "numba_iteration_over_sklearn": per_iteration["gpumine-numba"]
           / per_iteration["sklearn"],
           "numba_whole_fit_over_sklearn": whole["gpumine-numba"] / whole["sklearn"]}
    print(row, flush=True)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--quick", action="store_true", help="the first shape only")
    args = parser.parse_args()
    import numba
    import sklearn

    record = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "machine": platform.node(), "cpu_count": os.cpu_count(),
              "processor": platform.processor(), "numpy": np.__version__,
              "numba": numba.__version__, "sklearn": sklearn.__version__, "commit": commit()}
    record["shapes"] = [measure(*shape) for shape in (SHAPES[:1] if args.quick else SHAPES)]
    save(args.out, "cpu-step", record)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
