"""Where the CPU time of WaveCluster's ``threshold="auto"`` goes, stage by stage, inside
whole fits.

Usage (repository root)::

    python benchmarks/wavecluster_auto_breakdown.py --out benchmarks/results \\
        [--scales 1 10] [--sets moons spirals rings] [--repeats 60]

For each generated set (``make_shape_sets``) and scale: the median of ``--repeats`` whole
``fit`` calls with ``threshold="auto"`` and with the threshold it chose (taken in turns), and,
inside the auto fits, the median time of each call of the rule's stages, timed by wrapping
the :mod:`gpumine.wavecluster.engine` functions the fit calls: ``_base_and_split`` per grid
(the transformed grid's own rule, then each coarser level's, keyed by the grid's shape),
``_split_down`` (the coarser levels' opinions) and ``add_border_cells``. The wrappers add a
``perf_counter`` pair a call. CPU only (``device="cpu"``). Writes
``wavecluster-auto-breakdown-<date>-<commit>.json``.
"""

from __future__ import annotations

import argparse
import collections
import platform
import statistics
import time

import numpy as np
from fit_timing import save  # the script's folder is on sys.path

from gpumine.bench.record import commit

STAGES = ("_base_and_split", "_split_down", "add_border_cells")


def _wrap(engine, timings):
    """Wrap the engine's stages; returns a function that puts them back."""
    originals = {name: getattr(engine, name) for name in STAGES}

    def wrapped(name, function):
        def call(*args, **kwargs):
            start = time.perf_counter()
            result = function(*args, **kwargs)
            seconds = time.perf_counter() - start
            key = name
            if name == "_base_and_split":
                role = "coarse" if kwargs.get("grow", True) else "coarser"
                key = f"{name} {role} {'x'.join(map(str, args[0].shape))}"
            timings[key].append(seconds)
            return result
        return call

    for name, function in originals.items():
        setattr(engine, name, wrapped(name, function))

    def restore():
        for name, function in originals.items():
            setattr(engine, name, function)
    return restore


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--scales", type=float, nargs="+", default=[1.0, 10.0])
    parser.add_argument("--sets", nargs="+", default=["moons", "spirals", "rings"])
    parser.add_argument("--repeats", type=int, default=60)
    parser.add_argument("--tag", default="", help="appended to the record's name")
    args = parser.parse_args()
    from gpumine import WaveCluster
    from gpumine.datasets import make_shape_sets
    from gpumine.wavecluster import engine

    rows = []
    for scale in args.scales:
        drawn = make_shape_sets(scale=scale, random_state=0)
        for name in args.sets:
            X, _ = drawn[name]
            auto = WaveCluster(device="cpu").fit(X)  # warm-up: compiled functions, imports
            fixed_threshold = auto.threshold_
            timings = collections.defaultdict(list)
            whole = {"auto": [], "fixed": []}
            for _ in range(args.repeats):
                restore = _wrap(engine, timings)
                try:
                    start = time.perf_counter()
                    WaveCluster(device="cpu").fit(X)
                    whole["auto"].append(time.perf_counter() - start)
                finally:
                    restore()
                start = time.perf_counter()
                WaveCluster(device="cpu", threshold=fixed_threshold).fit(X)
                whole["fixed"].append(time.perf_counter() - start)
            row = {"set": name, "scale": scale, "n": len(X),
                   "auto_ms": statistics.median(whole["auto"]) * 1e3,
                   "fixed_ms": statistics.median(whole["fixed"]) * 1e3,
                   "stages_ms": {key: statistics.median(values) * 1e3
                                 for key, values in sorted(timings.items())}}
            row["auto_over_fixed"] = row["auto_ms"] / row["fixed_ms"]
            print(row, flush=True)
            rows.append(row)
    record = {"device": f"cpu ({platform.processor() or platform.machine()})",
              "commit": commit(), "repeats": args.repeats,
              "versions": {"numpy": np.__version__, "python": platform.python_version()},
              "rows": rows}
    save(args.out, "wavecluster-auto-breakdown" + args.tag, record)


if __name__ == "__main__":
    main()
