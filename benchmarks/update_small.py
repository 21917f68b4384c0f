"""The GPU update strategies on small problems: ``gather`` against ``atomic``, per call.

Usage (repository root, on a GPU machine)::

    python benchmarks/update_small.py --out benchmarks/results

For each (n, d, k) of a grid around the registry's ``gather`` rule (n * k <= 2**23,
k >= 32, d <= 32), float32 blobs with random labels: the device time of one update
call (calls issued back to back between CUDA events), the zeroing of the sums
included, and which one ``auto`` picks. Writes ``update-small-<date>-<commit>.json``.
"""

from __future__ import annotations

import argparse
import platform

import numpy as np
from fit_timing import save  # the script's folder is on sys.path
from gpu_check import device_time

from gpumine.bench.record import commit

SHAPES = [(17_695, 18, 128), (17_695, 18, 32), (17_695, 8, 1024), (65_536, 32, 128),
          (100_000, 8, 64), (262_144, 4, 32), (4_096, 16, 2048), (1_000_000, 8, 8)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args()

    import cupy as cp

    from gpumine import registry

    rows = []
    rng = np.random.default_rng(0)
    for n, d, k in SHAPES:
        X = cp.ascontiguousarray(cp.asarray(rng.normal(size=(n, d)).astype(np.float32)).T).T
        labels = cp.asarray(rng.integers(0, k, n).astype(np.int32))
        ones = cp.ones(n, dtype=cp.float32)
        sums, weights = cp.zeros((k, d)), cp.zeros(k)
        row = {"n": n, "d": d, "k": k, "auto": registry.resolve_strategy(
            "kmeans.update", "auto", "gpu", n_samples=n, n_features=d, n_clusters=k).name}
        for name in ("atomic", "gather"):
            update = registry.load_strategy("kmeans.update", name)
            call = (X, labels, ones, sums, weights)
            row[f"{name}_s"] = device_time(
                cp, lambda update=update, call=call: update(*call), repeats=100)
        row["gather_over_atomic"] = row["gather_s"] / row["atomic_s"]
        print(row)
        rows.append(row)
    save(args.out, "update-small", {
        "device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
        "commit": commit(), "versions": {"cupy": cp.__version__, "numpy": np.__version__,
                                          "python": platform.python_version()},
        "rows": rows})


if __name__ == "__main__":
    main()
