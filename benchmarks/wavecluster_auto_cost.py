"""What WaveCluster's ``threshold="auto"`` costs over a fit given the threshold it chose.

Usage (repository root; ``--device gpu`` on a GPU machine)::

    python benchmarks/wavecluster_auto_cost.py --device gpu --out benchmarks/results
    python benchmarks/wavecluster_auto_cost.py --device gpu --scales 100 --tag=-large

On generated sets where the split step fires (spirals, 5-d blobs in noise) and where it
does not (moons, rings) at 1x, 10x and 40x the quality benchmark's size (``--scales``, up
to 100x: 1.25M points for the 5-d blobs): the median of 15 whole ``fit`` calls with
``threshold="auto"`` and of 15 with ``threshold=<the one auto chose>`` (same grid,
labelling by the base level alone), taken in turns so that drift (clocks, other load)
touches both alike, from host data and, on the GPU, from device data; the ratio is what
``auto`` (base rule + split step) costs. Writes ``wavecluster-auto-cost-<date>-<commit>.json``.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import numpy as np
from fit_timing import save  # the script's folder is on sys.path

from gpumine.bench.record import commit

SETS = ("spirals", "blobs-noise20-d5", "moons", "rings")
SCALES = (1.0, 10.0, 40.0)
REPEATS = 15


def _median_fits(makes, X, sync):
    """Median seconds of REPEATS whole fits of each estimator factory, taken in turns."""
    times = [[] for _ in makes]
    models = [None] * len(makes)
    for _ in range(REPEATS):
        for k, make in enumerate(makes):
            start = time.perf_counter()
            models[k] = make().fit(X)
            sync()
            times[k].append(time.perf_counter() - start)
    return [statistics.median(t) for t in times], models


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--host-tree-work", type=int, default=None,
                        help="override hierarchy.HOST_TREE_WORK (0: every GPU grid's levels "
                             "labelled on the device)")
    parser.add_argument("--tag", default="", help="appended to the record's name")
    parser.add_argument("--scales", type=float, nargs="+", default=list(SCALES),
                        help="sizes as multiples of the quality benchmark's (default: %(default)s)")
    parser.add_argument("--sets", nargs="+", default=list(SETS), choices=SETS,
                        help="the generated sets to time (default: all four)")
    args = parser.parse_args()
    from gpumine.wavecluster import hierarchy

    if args.host_tree_work is not None:
        hierarchy.HOST_TREE_WORK = args.host_tree_work

    from gpumine import WaveCluster
    from gpumine.backend import get_backend
    from gpumine.datasets import make_shape_sets

    backend = get_backend(args.device)
    inputs = ["host", "device"] if backend.is_gpu else ["host"]
    sync = backend.synchronize if backend.is_gpu else (lambda: None)
    rows = []
    for scale in args.scales:
        drawn = make_shape_sets(scale=scale, random_state=0)
        for name in args.sets:
            X_host, _ = drawn[name]
            for where in inputs:
                X = backend.to_device(X_host) if where == "device" else X_host
                auto = WaveCluster(device=args.device).fit(X)  # warm-up: kernels, imports
                (auto_s, fixed_s), (auto, fixed) = _median_fits(
                    [lambda: WaveCluster(device=args.device),
                     lambda auto=auto: WaveCluster(device=args.device,
                                                   threshold=auto.threshold_)], X, sync)
                row = {"set": name, "scale": scale, "n": len(X_host), "d": X_host.shape[1],
                       "input": where, "grid": list(auto.grid_shape_),
                       "coarse_cells": int(np.prod(auto.grid_labels_.shape)),
                       "clusters_auto": auto.n_clusters_, "clusters_fixed": fixed.n_clusters_,
                       "auto_s": auto_s, "fixed_s": fixed_s, "auto_over_fixed": auto_s / fixed_s}
                print(row, flush=True)
                rows.append(row)
    record = {"device": args.device, "commit": commit(), "repeats": REPEATS,
              "versions": {"numpy": np.__version__, "python": platform.python_version()},
              "host_tree_work": hierarchy.HOST_TREE_WORK, "rows": rows}
    if backend.is_gpu:
        import cupy as cp

        record["device"] = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
        record["versions"]["cupy"] = cp.__version__
    else:
        record["device"] = f"cpu ({platform.processor() or platform.machine()})"
    save(args.out, "wavecluster-auto-cost" + args.tag, record)


if __name__ == "__main__":
    main()
