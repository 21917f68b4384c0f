"""How many blocks the privatized atomic update should use: device time per update call.

Usage (on a GPU machine): ``python benchmarks/atomic_blocks.py --out DIR``. For each
shape, the update runs with ``ATOMIC_POINTS_PER_CLUSTER`` in {1, 4, 16, 64} (blocks =
n / (that x k), capped at 8 per multiprocessor), timed as 200 back-to-back calls
between two CUDA events; the sums are checked equal to the first setting's.
"""

from __future__ import annotations

import argparse
import json
import os
from functools import partial
from pathlib import Path

import numpy as np
from gpu_check import device_time  # the script's folder is on sys.path


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args()
    import cupy as cp

    from gpumine import registry
    from gpumine.kmeans import gpu

    update = registry.load_strategy("kmeans.update", "atomic")
    rows = []
    for n, d, k in [(17695, 18, 128), (50_000, 32, 2048), (1_000_000, 4, 400),
                    (4_000_000, 8, 200), (1_000_000, 8, 10)]:
        rng = np.random.default_rng(n + d + k)
        X = cp.ascontiguousarray(cp.asarray(rng.random((n, d), dtype=np.float32)).T).T
        labels = cp.asarray(rng.integers(0, k, n).astype(np.int32))
        ones = cp.ones(n, cp.float32)
        sums, weights = cp.zeros((k, d)), cp.zeros(k)
        reference = None
        for per in (1, 4, 16, 64):
            gpu.ATOMIC_POINTS_PER_CLUSTER = per
            update(X, labels, ones, sums, weights)
            got = cp.asnumpy(sums)
            if reference is None:
                reference = got
            assert np.allclose(got, reference, rtol=1e-5, atol=1e-5)
            seconds = device_time(cp, partial(update, X, labels, ones, sums, weights), 200)
            rows.append({"n": n, "d": d, "k": k, "points_per_cluster": per,
                         "update_device_s": seconds})
            print(n, d, k, per, f"{seconds * 1e6:.1f} us")
    record = {"device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
              "commit": os.environ.get("GPUMINE_COMMIT", "unknown"), "rows": rows}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"atomic-blocks-{record['commit']}.json").write_text(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
