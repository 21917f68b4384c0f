"""Does ``assign="auto"`` pick well? Its fits against each exact assignment alone, on a grid.

Usage (repository root, on a machine with a CUDA GPU and CuPy)::

    python benchmarks/auto_vs_alone.py --out benchmarks/results [--iterations 20] \
        [--repeats 3] [--data uniform blobs:64]

For every (n, d, k) of a grid of moderate shapes (n 200k / 1M / 4M, d 16 / 48 / 96, k 64 /
256 / 1024) and each ``--data`` (as ``fit_vs_flash.py``'s), in one process and in turns:
``GPUKMeans(k, init=C, max_iter=m, tol=0).fit(X)`` from device data with ``assign="auto"``
and with each exact GPU assignment alone (``tiled``, ``tc-exact``, and ``hamerly`` up to
32 features), ``update="auto"``; the median wall time of ``--repeats`` rounds, what
``auto`` used and why, and ``auto`` over the fastest one alone. A ratio well above 1 is a
wrong pick (the race or the table), which this grid is meant to find.

Writes ``auto-vs-alone-<date>-<commit>.json``.
"""

from __future__ import annotations

import argparse

import numpy as np
from fit_timing import save  # the script's folder is on sys.path
from fit_vs_flash import _data, _wall

GRID = [(n, d, k) for n in (200_000, 1_000_000, 4_000_000) for d in (16, 48, 96)
        for k in (64, 256, 1024)]


def measure(cp, n, d, k, data, m, repeats) -> dict:
    from gpumine import GPUKMeans

    X = cp.asarray(_data(n, d, data))
    C = X[:k].copy()
    names = ["auto", "tiled", "tc-exact"] + (["hamerly"] if d <= 32 else [])

    def fit(assign):
        return GPUKMeans(k, init=C, max_iter=m, tol=0.0, assign=assign, device="gpu").fit(X)

    models = {name: fit(name) for name in names}  # compile and warm
    times = {name: [] for name in names}
    for _ in range(repeats):
        for name in names:
            seconds, models[name] = _wall(cp, lambda name=name: fit(name))
            times[name].append(seconds)
    seconds = {name: float(np.median(t)) for name, t in times.items()}
    alone = {name: t for name, t in seconds.items() if name != "auto"}
    best = min(alone, key=alone.get)
    row = {"n": n, "d": d, "k": k, "data": data, "iterations": m, "seconds": seconds,
           "auto_used": models["auto"].strategies_["assign"],
           "auto_reason": models["auto"].strategy_reasons_["assign"],
           "best_alone": best, "auto_over_best": seconds["auto"] / alone[best],
           "n_iter": {name: int(model.n_iter_) for name, model in models.items()}}
    print(n, d, k, data, f"auto {1e3 * seconds['auto']:.2f} ms ({row['auto_used']})",
          " ".join(f"{name} {1e3 * t:.2f}" for name, t in alone.items()),
          f"auto/best {row['auto_over_best']:.2f}", flush=True)
    return row


def main() -> int:
    from gpumine.backend import get_backend
    from gpumine.bench.record import context

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--data", nargs="+", default=["uniform", "blobs:64"])
    args = parser.parse_args()
    backend = get_backend("gpu")
    cp = backend.xp
    record = {**context(backend), "iterations": args.iterations, "shapes": []}
    for data in args.data:
        for n, d, k in GRID:
            record["shapes"].append(measure(cp, n, d, k, data, args.iterations,
                                            args.repeats))
            cp.get_default_memory_pool().free_all_blocks()
    save(args.out, "auto-vs-alone", record)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
