"""WaveCluster's ``threshold="auto"`` on the CPU: the component tree against stacks.

Usage (repository root)::

    python benchmarks/wavecluster_tree_ab.py --out benchmarks/results

The CPU stages take the rule's levels from one compiled component tree per grid
(``Stages.levels_tree``, with Numba); without it, from stacks of labelled levels (small
grids) or level by level (large ones). On the sets of ``wavecluster_auto_cost.py`` at 1x,
10x and 40x: the median of whole ``fit`` calls with the tree, with stacks, and given the
threshold that auto chose (which labels one level: no tree), taken in turns in one process
so that drift touches all alike; each auto's labels are checked equal. Writes
``wavecluster-tree-ab-<date>-<commit>.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import platform
import statistics
import time

import numpy as np
from fit_timing import save  # the script's folder is on sys.path
from wavecluster_auto_cost import SCALES, SETS  # the same sets and sizes

from gpumine.bench.record import commit


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--scales", type=float, nargs="*", default=SCALES)
    args = parser.parse_args()
    import numba

    from gpumine import WaveCluster
    from gpumine.datasets import make_shape_sets
    from gpumine.wavecluster import cpu_fast, pipeline

    tree = dataclasses.replace(pipeline._CPU, levels_tree=cpu_fast.levels_tree)
    stacks = dataclasses.replace(pipeline._CPU, levels_tree=None)
    rows = []
    for scale in args.scales:
        drawn = make_shape_sets(scale=scale, random_state=0)
        for name in SETS:
            X, _ = drawn[name]
            pipeline._CPU = tree
            threshold = WaveCluster(device="cpu").fit(X).threshold_  # warm-up too
            ways = {"tree": (tree, "auto"), "stacks": (stacks, "auto"),
                    "fixed": (tree, threshold)}
            times = {way: [] for way in ways}
            labels = {}
            for _ in range(args.repeats):
                for way, (stages, chosen) in ways.items():
                    pipeline._CPU = stages
                    start = time.perf_counter()
                    model = WaveCluster(device="cpu", threshold=chosen).fit(X)
                    times[way].append(time.perf_counter() - start)
                    labels[way] = model.labels_
            pipeline._CPU = tree
            same = bool(np.array_equal(labels["tree"], labels["stacks"]))
            med = {way: statistics.median(t) for way, t in times.items()}
            row = {"set": name, "scale": scale, "n": len(X), "d": X.shape[1],
                   "tree_s": med["tree"], "stacks_s": med["stacks"], "fixed_s": med["fixed"],
                   "tree_over_fixed": med["tree"] / med["fixed"],
                   "stacks_over_fixed": med["stacks"] / med["fixed"],
                   "tree_over_stacks": med["tree"] / med["stacks"], "same_labels": same}
            print({k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()},
                  flush=True)
            rows.append(row)
    record = {"device": f"cpu ({platform.processor() or platform.machine()})",
              "commit": commit(), "repeats": args.repeats,
              "versions": {"numpy": np.__version__, "numba": numba.__version__,
                           "python": platform.python_version()},
              "rows": rows}
    save(args.out, "wavecluster-tree-ab", record)


if __name__ == "__main__":
    main()
