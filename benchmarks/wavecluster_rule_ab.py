"""WaveCluster's ``threshold="auto"``: the split step's rule on the tree compiled
(``cpu_fast.decide``) against its Python lists (``hierarchy._decide_lists``), in turns.

Usage (repository root; ``--device gpu`` on a GPU machine)::

    python benchmarks/wavecluster_rule_ab.py --out benchmarks/results [--repeats 15]

The rule reads a tree of a few components a level over tens of levels, on the host for
the CPU's trees and the GPU's alike (``hierarchy._COMPILED_RULE``). On the sets of
``wavecluster_auto_cost.py`` at 1x and 10x: the median of whole ``fit`` calls with the rule
compiled, with the lists, and given the threshold auto chose (the fixed fit), taken in
turns in one process so that drift touches all alike; both autos' labels and thresholds
are checked equal. Writes ``wavecluster-rule-ab-<date>-<commit>.json``.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import numpy as np
from fit_timing import save  # the script's folder is on sys.path
from wavecluster_auto_cost import SETS  # the same sets

from gpumine.bench.record import commit


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--scales", type=float, nargs="+", default=[1.0, 10.0])
    args = parser.parse_args()
    from gpumine import WaveCluster
    from gpumine.backend import get_backend
    from gpumine.datasets import make_shape_sets
    from gpumine.wavecluster import cpu_fast, hierarchy

    if not cpu_fast.available():
        raise SystemExit("Numba (the fast extra) is not installed: no compiled rule")
    backend = get_backend(args.device)
    sync = backend.synchronize if backend.is_gpu else (lambda: None)
    rows = []
    for scale in args.scales:
        drawn = make_shape_sets(scale=scale, random_state=0)
        for name in SETS:
            X_host, _ = drawn[name]
            X = backend.to_device(X_host) if backend.is_gpu else X_host
            auto = WaveCluster(device=args.device).fit(X)  # warm-up: compiles, imports
            ways = {"compiled": True, "lists": False, "fixed": None}
            times = {way: [] for way in ways}
            models = {}
            for _ in range(args.repeats):
                for way, compiled in ways.items():
                    make = (WaveCluster(device=args.device) if compiled is not None else
                            WaveCluster(device=args.device, threshold=auto.threshold_))
                    hierarchy._COMPILED_RULE = bool(compiled)
                    start = time.perf_counter()
                    models[way] = make.fit(X)
                    sync()
                    times[way].append(time.perf_counter() - start)
            hierarchy._COMPILED_RULE = True
            median = {way: statistics.median(t) for way, t in times.items()}
            row = {"set": name, "scale": scale, "n": len(X_host), "d": X_host.shape[1],
                   "median_s": median,
                   "compiled_over_lists": median["compiled"] / median["lists"],
                   "auto_over_fixed": {way: median[way] / median["fixed"]
                                       for way in ("compiled", "lists")},
                   "same_labels": bool(np.array_equal(backend.to_host(models["compiled"].labels_),
                                                      backend.to_host(models["lists"].labels_))),
                   "same_threshold": models["compiled"].threshold_ == models["lists"].threshold_}
            print(row, flush=True)
            rows.append(row)
    save(args.out, "wavecluster-rule-ab", {
        "device": args.device, "commit": commit(), "repeats": args.repeats,
        "host": platform.processor() or platform.machine(),
        "versions": {"numpy": np.__version__, "python": platform.python_version()},
        "rows": rows})


if __name__ == "__main__":
    main()
