"""Per call of ``assign="hamerly"`` in a default fit: points scanned, each kernel's device time.

Usage (repository root, on a GPU machine; writes ``hamerly-calls-<commit>.json`` to $OUT)::

    GPUMINE_COMMIT=<hash> OUT=benchmarks/results python benchmarks/hamerly_calls.py

Graphs are off (``GPUMINE_GRAPHS=0``): each call re-issues the launches of
``BoundAssign.__call__`` with CUDA events between them, on 4M x 8 uniform data, k = 200, and
1M x 4, k = 400 (k-means++, default tol).
"""

from __future__ import annotations

import json
import os

os.environ["GPUMINE_GRAPHS"] = "0"

import cupy as cp
import numpy as np

from gpumine import GPUKMeans
from gpumine.datasets import make_uniform
from gpumine.kmeans import bounds

LOG: list[tuple] = []


def timed_call(self, X, centers, labels, changed=None):
    """``BoundAssign.__call__`` with events between its launches; logs (scanned, 3 x ms)."""
    events = [cp.cuda.Event() for _ in range(4)]
    events[0].record()
    for event, launch_step in zip(events[1:], self.launches(centers, labels, changed), strict=True):
        launch_step()
        event.record()
    events[3].synchronize()
    LOG.append((self.scanned(), *[cp.cuda.get_elapsed_time(events[i], events[i + 1])
                                  for i in range(3)]))


def main() -> None:
    bounds.BoundAssign.__call__ = timed_call
    name = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    out = {"commit": os.environ.get("GPUMINE_COMMIT"), "device": name,
           "graphs": "off (events between launches)", "runs": {}}
    for n, d, k in [(4_000_000, 8, 200), (1_000_000, 4, 400)]:
        X = cp.asarray(make_uniform(n, d, random_state=5489).astype(np.float32))
        GPUKMeans(k, init="k-means++", random_state=0, max_iter=3, assign="hamerly",
                  device="gpu").fit(X)  # compile and warm
        LOG.clear()
        model = GPUKMeans(k, init="k-means++", random_state=0, assign="hamerly",
                          device="gpu").fit(X)
        calls = np.array(LOG)
        out["runs"][f"{n}x{d}x{k}"] = {
            "n_iter": int(model.n_iter_),
            "scanned_share": (calls[:, 0] / n).round(4).tolist(),
            "shifts_ms": calls[:, 1].round(4).tolist(),
            "filter_ms": calls[:, 2].round(4).tolist(),
            "scan_ms": calls[:, 3].round(4).tolist()}
        print(n, d, k, "mean scanned", calls[:, 0].mean() / n, "last 20 calls scanned",
              calls[-20:, 0].mean() / n, "sums", calls[:, 1:].sum(0))
    path = os.path.join(os.environ["OUT"], f"hamerly-calls-{out['commit']}.json")
    with open(path, "w") as handle:
        json.dump(out, handle)


if __name__ == "__main__":
    main()
