"""Where a WaveCluster fit with ``threshold="auto"`` spends its time, stage by stage.

Usage (repository root; ``--device gpu`` on a GPU machine)::

    python benchmarks/wavecluster_auto_stages.py --device gpu --out benchmarks/results

Beside :mod:`wavecluster_auto_cost` (whole ``fit`` calls, the user's view): each stage of
the rule -- the grids' summaries, the trees, the split's painting, the coarser levels'
split, the border, and the backend's steps (``Stages``) -- is wrapped with a device
synchronization at both ends, and its wall time summed over 20 fits from device data (host
data on the CPU), with and without ``"auto"``. The synchronizations serialize what would
overlap, so each stage's time is an upper bound and the stages' times add to more than the
fit's; nested stages count in their parents too. With ``--no-sync`` the stages are timed
without the synchronizations: the host's time in each (Python, CuPy's calls, the launches
and the syncs the code makes itself), which is what a fit from device data waits on when
the device's work is short. Writes ``wavecluster-auto-stages-<date>-<commit>.json``.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import functools
import platform
import time

import numpy as np
from fit_timing import save  # the script's folder is on sys.path

from gpumine.bench.record import commit

SETS = (("moons", 1.0), ("spirals", 1.0), ("blobs-noise20-d5", 1.0), ("blobs-noise20-d5", 40.0))
FITS = 20
#: (module, function) of the rule's stages, timed where the rule calls them.
STAGES = (("engine", "_summaries"), ("engine", "_coarser_grids"), ("engine", "_split_down"),
          ("engine", "add_border_cells"), ("engine", "_base_and_opinions"),
          ("hierarchy", "_read"), ("hierarchy", "_decide"), ("hierarchy", "_paint"),
          ("hierarchy", "_paint_kept"), ("hierarchy", "_profile_boxes"),
          ("hierarchy", "stack_levels"), ("hierarchy", "resolve_stacked"),
          ("hierarchy", "plan_levels"), ("engine", "_joint_tables"))
#: The backend's steps (``Stages`` fields), timed where the pipeline calls them.
STEPS = ("histogram", "lowpass", "joint", "nearest", "summaries", "tree", "plane", "paint",
         "spread", "planes")


def _timer(function, label, totals, counts, sync):
    @functools.wraps(function)
    def timed(*args, **kwargs):
        sync()
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            sync()
            totals[label] += time.perf_counter() - start
            counts[label] += 1
    return timed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--tag", default="", help="appended to the record's name")
    parser.add_argument("--no-sync", dest="synced", action="store_false",
                        help="time each stage on the host alone (no synchronization)")
    args = parser.parse_args()

    from gpumine import WaveCluster
    from gpumine.backend import get_backend
    from gpumine.datasets import make_shape_sets
    from gpumine.wavecluster import engine, hierarchy, pipeline

    backend = get_backend(args.device)
    sync = backend.synchronize if backend.is_gpu else (lambda: None)
    stage_sync = sync if args.synced else (lambda: None)
    totals, counts = collections.Counter(), collections.Counter()
    modules = {"engine": engine, "hierarchy": hierarchy}
    for module, name in STAGES:
        if hasattr(modules[module], name):
            setattr(modules[module], name, _timer(getattr(modules[module], name),
                                                  f"{module}.{name}", totals, counts,
                                                  stage_sync))
    stages_for = pipeline.stages_for

    def timed_stages(*a, **k):
        stages = stages_for(*a, **k)
        names = {field.name for field in dataclasses.fields(stages)}
        return dataclasses.replace(stages, **{
            step: _timer(getattr(stages, step), f"stages.{step}", totals, counts, stage_sync)
            for step in STEPS if step in names and getattr(stages, step) is not None})

    pipeline.stages_for = timed_stages
    rows = []
    for name, scale in SETS:
        X_host, _ = make_shape_sets(scale=scale, random_state=0)[name]
        X = backend.to_device(X_host) if backend.is_gpu else X_host
        auto = WaveCluster(device=args.device).fit(X)
        threshold = auto.threshold_
        for mode, make in (("auto", lambda: WaveCluster(device=args.device)),
                           ("fixed", lambda t=threshold: WaveCluster(device=args.device,
                                                                     threshold=t))):
            for _ in range(3):
                make().fit(X)
            totals.clear()
            counts.clear()
            sync()
            start = time.perf_counter()
            for _ in range(FITS):
                make().fit(X)
            sync()
            row = {"set": name, "scale": scale, "n": len(X_host), "d": X_host.shape[1],
                   "mode": mode, "fit_ms": (time.perf_counter() - start) / FITS * 1e3,
                   "stages_ms": {k: v / FITS * 1e3 for k, v in totals.most_common()},
                   "calls_per_fit": {k: counts[k] / FITS for k in totals}}
            print(f"{name} x{scale} {mode}: {row['fit_ms']:.3f} ms a fit; " + ", ".join(
                f"{k} {v:.3f}" for k, v in list(row["stages_ms"].items())[:6]), flush=True)
            rows.append(row)
    record = {"device": args.device, "commit": commit(), "fits": FITS,
              "stages_synchronized": args.synced,
              "versions": {"numpy": np.__version__, "python": platform.python_version()},
              "rows": rows}
    if backend.is_gpu:
        import cupy as cp

        record["device"] = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
        record["versions"]["cupy"] = cp.__version__
    save(args.out, "wavecluster-auto-stages" + args.tag, record)


if __name__ == "__main__":
    main()
