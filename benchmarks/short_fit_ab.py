"""Short ``auto`` fits, one process, in turns: the code as it is against one change undone.

Usage (repository root, on a machine with a CUDA GPU, CuPy and PyTorch; flash-kmeans when
importable)::

    python benchmarks/short_fit_ab.py --out benchmarks/results \
        [--only 1000000,128,1024,uniform 10000000,32,1024,uniform] [--iterations 1 2 20] \
        [--repeats 9]

For each case (``N,D,K,DATA``: the data of ``fit_vs_flash.py``, the first k rows as
centres) ``GPUKMeans(k, init=C, max_iter=m, tol=0, assign="auto").fit(X)`` from device data,
the wall time of each variant taken in turns, ``repeats`` rounds (each fit once a round,
the variants' order rotating), the median kept:

* ``head``: the code as it is;
* ``no-sample``: a run's first ``tc-exact`` call without its sample
  (``tensor_cores.SCREEN_SAMPLE_ROWS`` past n: the split kernel on every row, as before);
* ``broadcast-shift``: the fit's centring of X as CuPy's broadcast over the (d, n)
  buffer, as before ``column_stats.shift_columns``;
* ``new-stream``: a new capture stream for each fit, as before ``gpu.capture_stream``
  (CuPy's pool keeps freed blocks per stream);

and flash-kmeans' ``batch_kmeans_Euclid`` for m iterations from the same centres in the same
rounds. Every variant's labels are compared with ``head``'s (they must be equal).

Writes ``short-fit-ab-<date>-<commit>.json``.
"""

from __future__ import annotations

import argparse

import numpy as np
from fit_timing import save  # the script's folder is on sys.path
from fit_vs_flash import _data, _wall

#: (enter, leave) of a run with nothing undone: the code as it is, and flash-kmeans
_AS_IS = (lambda: None, lambda: None)


def _variants():
    """name -> (enter, leave): monkeypatches that undo one change each."""
    import gpumine.adapters.column_stats as column_stats
    from gpumine.backend import cupy_module
    from gpumine.kmeans import gpu, tensor_cores

    saved = {"sample": tensor_cores.SCREEN_SAMPLE_ROWS, "shift": column_stats.shift_columns,
             "stream": gpu.capture_stream}

    def broadcast(XT, by, sign):
        if sign < 0:
            XT -= by[:, None]
        else:
            XT += by[:, None]

    def set_sample(value):
        tensor_cores.SCREEN_SAMPLE_ROWS = value

    def set_shift(value):
        column_stats.shift_columns = value

    def set_stream(value):
        gpu.capture_stream = value

    return {
        "head": _AS_IS,
        "no-sample": (lambda: set_sample(1 << 62), lambda: set_sample(saved["sample"])),
        "broadcast-shift": (lambda: set_shift(broadcast), lambda: set_shift(saved["shift"])),
        "new-stream": (lambda: set_stream(lambda: cupy_module().cuda.Stream(non_blocking=True)),
                       lambda: set_stream(saved["stream"])),
    }


def measure(cp, n, d, k, data, iterations, repeats) -> dict:
    import torch

    from gpumine import GPUKMeans

    host = _data(n, d, data)
    X = cp.asarray(host)
    C = X[:k].copy()
    X_rows = torch.as_tensor(host, device="cuda")
    C_rows = torch.as_tensor(cp.asnumpy(C), device="cuda")
    variants = _variants()
    row = {"n": n, "d": d, "k": k, "data": data, "repeats": repeats, "ms": {},
           "labels_equal_head": {}, "strategies": {}}
    try:
        import flash_kmeans
    except ImportError as exc:  # said in the record and on the console, not silently left out
        flash_kmeans = None
        row["flash_skipped"] = str(exc)
        print(f"flash-kmeans not importable ({exc}): the rows have no peer", flush=True)
    for m in iterations:
        def fit(m=m):
            return GPUKMeans(k, init=C, n_init=1, max_iter=m, tol=0.0, assign="auto",
                             device="gpu").fit(X)

        def flash(m=m):
            return flash_kmeans.batch_kmeans_Euclid(X_rows[None], k, max_iters=m, tol=-1.0,
                                                    init_centroids=C_rows[None])
        runs = {name: fit for name in variants}
        if flash_kmeans is not None:
            runs["flash-kmeans"] = flash
        labels = {}
        for name, run in runs.items():  # compile and warm, and each variant's labels
            enter, leave = variants.get(name, _AS_IS)
            enter()
            try:
                result = run()
            finally:
                leave()
            if name in variants:
                labels[name] = cp.asnumpy(result.labels_)
                row["strategies"][f"{name}/{m}"] = dict(result.strategies_)
        for name in variants:
            row["labels_equal_head"][f"{name}/{m}"] = bool(
                np.array_equal(labels[name], labels["head"]))
        times = {name: [] for name in runs}
        names = list(runs)
        for r in range(repeats):
            for name in names[r % len(names):] + names[:r % len(names)]:
                enter, leave = variants.get(name, _AS_IS)
                enter()
                try:
                    seconds, _ = _wall(cp, runs[name])
                finally:
                    leave()
                times[name].append(seconds)
        for name, values in times.items():
            row["ms"][f"{name}/{m}"] = round(1e3 * float(np.median(values)), 3)
            print(n, d, k, data, m, name, row["ms"][f"{name}/{m}"], flush=True)
    return row


def main() -> int:
    import cupy as cp

    from gpumine.backend import get_backend
    from gpumine.bench.record import context

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--only", nargs="+",
                        default=["1000000,128,1024,uniform", "10000000,32,1024,uniform"])
    parser.add_argument("--iterations", type=int, nargs="+", default=[1, 2, 20])
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    record = {**context(get_backend("gpu")), "script": "benchmarks/short_fit_ab.py",
              "iterations": args.iterations, "rows": []}
    for case in args.only:
        n, d, k, data = case.split(",")
        record["rows"].append(measure(cp, int(n), int(d), int(k), data, args.iterations,
                                      args.repeats))
    save(args.out, "short-fit-ab", record)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
