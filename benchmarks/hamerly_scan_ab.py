"""``assign="hamerly"`` with its queued points scanned on the tensor cores or by the register
loop, beside ``tc-exact``: steady Lloyd iterations from device data, in one process.

Usage (repository root, on a GPU machine; writes ``hamerly-scan-ab-<commit>[-tag].json`` to
$OUT)::

    GPUMINE_COMMIT=<hash> OUT=benchmarks/results python benchmarks/hamerly_scan_ab.py \\
        [--shapes 10000000,32,1024 2000000,32,1024] [--data uniform blobs:64] [--tag NAME]

For each shape and data set: ``GPUKMeans(k, init=<first k rows>, tol=0,
update="atomic-fixed")`` with ``assign="hamerly"`` scanning on the tensor cores
(``registry.TC_SCAN_MIN_WORK = 0``; with the screen's plan, and the split kernel alone,
``TC_SCAN_SCREEN`` False), ``"hamerly"`` scanning by the register loop (the threshold out
of reach) and ``"tc-exact"``; each timed as the best of two fits of 20 and of
100 iterations after a 3-iteration warm fit, steady = ``(t100 - t20) / 80``; the labels' sum
and the inertia of a 100-iteration fit (the three must agree: every one is exact).
"""

from __future__ import annotations

import argparse
import json
import os
import time

import cupy as cp
import numpy as np
from fit_vs_flash import _data  # the script's folder is on sys.path: the fits' data

from gpumine import GPUKMeans, registry
from gpumine.kmeans import bounds

#: (name, assign, registry.TC_SCAN_MIN_WORK, bounds.TC_SCAN_SCREEN); None: as shipped
VARIANTS = (("hamerly-tensor", "hamerly", 0, True), ("hamerly-tensor-split", "hamerly", 0, False),
            ("hamerly-registers", "hamerly", 1 << 62, None), ("tc-exact", "tc-exact", None, None))


def _fit(X, k: int, assign: str, iterations: int):
    cp.cuda.Device().synchronize()
    start = time.perf_counter()
    model = GPUKMeans(k, init=X[:k].copy(), max_iter=iterations, tol=0, assign=assign,
                      update="atomic-fixed", device="gpu").fit(X)
    cp.cuda.Device().synchronize()
    return time.perf_counter() - start, model


def measure(n: int, d: int, k: int, data: str) -> dict:
    X = cp.asarray(_data(n, d, data))
    row = {}
    default = registry.TC_SCAN_MIN_WORK, bounds.TC_SCAN_SCREEN
    try:
        for name, assign, work, screen in VARIANTS:
            if name == "hamerly-registers" and d > bounds.REGISTER_FEATURES:
                continue  # past the register loop's width: the tensor cores only
            if work is not None:
                registry.TC_SCAN_MIN_WORK = work
            if screen is not None:
                bounds.TC_SCAN_SCREEN = screen
            _fit(X, k, assign, 3)
            times = {m: min(_fit(X, k, assign, m)[0] for _ in range(2)) for m in (20, 100)}
            model = _fit(X, k, assign, 100)[1]
            row[name] = {"t20_ms": times[20] * 1e3, "t100_ms": times[100] * 1e3,
                         "steady_ms": (times[100] - times[20]) / 80 * 1e3,
                         "labels_sum": int(cp.asnumpy(model.labels_).astype(np.int64).sum()),
                         "inertia": float(model.inertia_)}
            registry.TC_SCAN_MIN_WORK, bounds.TC_SCAN_SCREEN = default
    finally:
        registry.TC_SCAN_MIN_WORK, bounds.TC_SCAN_SCREEN = default
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", default=["10000000,32,1024", "2000000,32,1024",
                                                         "4000000,16,512", "2000000,24,256"])
    parser.add_argument("--data", nargs="+", default=["uniform", "blobs:64"])
    parser.add_argument("--tag", default="")
    args = parser.parse_args()
    out = {"commit": os.environ.get("GPUMINE_COMMIT"),
           "device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
           "cupy": cp.__version__, "rows": {}}
    for shape in args.shapes:
        n, d, k = (int(v) for v in shape.split(","))
        for data in args.data:
            row = out["rows"][f"{n}x{d}x{k}-{data}"] = measure(n, d, k, data)
            print(n, d, k, data, {name: (round(v["steady_ms"], 3), round(v["t20_ms"], 1),
                                         v["labels_sum"]) for name, v in row.items()},
                  flush=True)
            cp.get_default_memory_pool().free_all_blocks()
    tag = f"-{args.tag}" if args.tag else ""
    with open(os.path.join(os.environ["OUT"], f"hamerly-scan-ab-{out['commit']}{tag}.json"),
              "w") as handle:
        json.dump(out, handle, indent=1)


if __name__ == "__main__":
    main()
