"""Per call of ``assign="hamerly"`` in a default fit: points scanned, each kernel's device time.

Usage (repository root, on a GPU machine; writes ``hamerly-calls-<commit>[-tag].json`` to
$OUT)::

    GPUMINE_COMMIT=<hash> OUT=benchmarks/results python benchmarks/hamerly_calls.py \
        [--shapes 4000000,8,200 1000000,4,400] [--data uniform blobs:64] \
        [--init k-means++|first] [--max-iter 300] [--tol 1e-4] [--tag NAME]

Graphs are off (``GPUMINE_GRAPHS=0``): each call re-issues the launches of
``BoundAssign.__call__`` with CUDA events between them. Defaults: 4M x 8 uniform data, k =
200, and 1M x 4, k = 400 (k-means++, default tol). ``--data blobs:C`` draws rows around C
centres in [-10, 10]^d with unit normal noise (``fit_vs_flash.py``'s blobs); ``--init first``
takes the first k rows as centres (``fit_vs_flash.py``'s init).
"""

from __future__ import annotations

import argparse
import json
import os

os.environ["GPUMINE_GRAPHS"] = "0"

import cupy as cp
import numpy as np
from fit_vs_flash import _data  # the script's folder is on sys.path: the fits' data

from gpumine import GPUKMeans
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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", default=["4000000,8,200", "1000000,4,400"])
    parser.add_argument("--data", nargs="+", default=["uniform"])
    parser.add_argument("--init", default="k-means++", choices=["k-means++", "first"])
    parser.add_argument("--max-iter", type=int, default=300)
    parser.add_argument("--tol", type=float, default=1e-4)
    parser.add_argument("--tag", default="")
    args = parser.parse_args()
    bounds.BoundAssign.__call__ = timed_call
    name = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    out = {"commit": os.environ.get("GPUMINE_COMMIT"), "device": name,
           "graphs": "off (events between launches)", "cupy": cp.__version__,
           "init": args.init, "max_iter": args.max_iter, "tol": args.tol, "runs": {}}
    for shape in args.shapes:
        n, d, k = (int(v) for v in shape.split(","))
        for data in args.data:
            X = cp.asarray(_data(n, d, data))
            init = "k-means++" if args.init == "k-means++" else X[:k].copy()
            GPUKMeans(k, init=init, random_state=0, max_iter=3, assign="hamerly",
                      device="gpu").fit(X)  # compile and warm
            LOG.clear()
            model = GPUKMeans(k, init=init, random_state=0, assign="hamerly", device="gpu",
                              max_iter=args.max_iter, tol=args.tol).fit(X)
            _log(out, model, n, d, k, data)
            del X
    tag = f"-{args.tag}" if args.tag else ""
    path = os.path.join(os.environ["OUT"], f"hamerly-calls-{out['commit']}{tag}.json")
    with open(path, "w") as handle:
        json.dump(out, handle)


def _log(out: dict, model, n: int, d: int, k: int, data: str) -> None:
    """The fit's calls from LOG into ``out["runs"]``, and a summary line."""
    calls = np.array(LOG)
    out["runs"][f"{n}x{d}x{k}" + ("" if data == "uniform" else f"-{data}")] = {
        "n_iter": int(model.n_iter_),
        "scanned_share": (calls[:, 0] / n).round(4).tolist(),
        "shifts_ms": calls[:, 1].round(4).tolist(),
        "filter_ms": calls[:, 2].round(4).tolist(),
        "scan_ms": calls[:, 3].round(4).tolist()}
    print(n, d, k, data, "mean scanned", calls[:, 0].mean() / n, "last 20 calls scanned",
          calls[-20:, 0].mean() / n, "ms sums (shifts, filter, scan)", calls[:, 1:].sum(0),
          flush=True)


if __name__ == "__main__":
    main()
