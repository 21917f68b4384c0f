"""Run the device k-means++ of the issue's case (4M x 8 uniform float32, k = 200) for a profiler.

Usage (repository root, on a GPU machine)::

    ncu --kernel-name regex:kmeans_plusplus --launch-skip 1 --launch-count 1 \\
        --section SpeedOfLight --section MemoryWorkloadAnalysis \\
        python benchmarks/profile_kpp.py

Two calls: the first compiles and warms up (skipped by the profiler), the second is the one
profiled. Prints the second call's device time.
"""

from __future__ import annotations

import numpy as np

from gpumine.backend import cupy_module, get_backend
from gpumine.bench.timing import measure
from gpumine.datasets import make_uniform
from gpumine.kmeans import gpu


def main() -> None:
    cp = cupy_module()
    X = cp.asarray(make_uniform(4_000_000, 8, random_state=5489))
    weight = cp.ones(X.shape[0], dtype=X.dtype)
    seconds = measure(lambda: gpu.kmeans_plusplus(X, 200, sample_weight=weight,
                                                  random_state=np.random.RandomState(0)),
                      get_backend("gpu"), repeats=1, budget_seconds=None).seconds
    print(f"kmeans_plusplus 4M x 8, k = 200: {1e3 * seconds:.1f} ms")


if __name__ == "__main__":
    main()
