"""Where a short ``auto`` fit's device time goes: a CUPTI listing of whole fits.

Usage (repository root, on a machine with a CUDA GPU, CuPy and PyTorch)::

    python benchmarks/profile_auto_fits.py [--shape 1000000,128,1024] [--data uniform] \
        [--iterations 1 20] [--assign auto] [--host 20] > prof.txt

``GPUKMeans(k, init=C, max_iter=m, tol=0, assign=...).fit(X)`` from device data (the data
of ``fit_vs_flash.py``: uniform MT19937 or ``blobs:C``, the first k rows as centres): the
median wall time of 3 fits for each m, then one fit of each m under PyTorch's profiler
(CUPTI): every kernel's count and total time, the CUDA runtime calls' on the host, and for
the shortest fit every kernel in launch order with its start (from the first) and duration,
so the gaps where the device waits on the host show; with ``--host F``, F fits of the
fewest iterations under cProfile (the host's functions). Prints a text listing (commit it as a
record: ``prof-...-<commit>.txt``).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from fit_vs_flash import _data  # the script's folder is on sys.path


def _fit(cp, X, C, k, m, assign):
    from gpumine import GPUKMeans

    return GPUKMeans(k, init=C, max_iter=m, tol=0.0, assign=assign, device="gpu").fit(X)


def main() -> int:
    import cupy as cp
    import torch
    from torch.profiler import ProfilerActivity, profile

    from gpumine.bench.record import commit

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="1000000,128,1024")
    parser.add_argument("--data", default="uniform")
    parser.add_argument("--iterations", type=int, nargs="+", default=[1, 20])
    parser.add_argument("--assign", default="auto")
    parser.add_argument("--host", type=int, default=0,
                        help="also this many fits of the fewest iterations under cProfile "
                             "(no CUPTI): the host's functions by own and cumulative time")
    args = parser.parse_args()
    n, d, k = (int(v) for v in args.shape.split(","))
    X = cp.asarray(_data(n, d, args.data))
    C = X[:k].copy()
    print(f"# device {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()} cupy "
          f"{cp.__version__} torch {torch.__version__} commit {commit()} {args.data} "
          f"{n} x {d}, k = {k}, assign={args.assign}, first k rows as init, tol=0")
    walls = {}
    for m in args.iterations:
        _fit(cp, X, C, k, m, args.assign)  # compile and warm
        times = []
        for _ in range(3):
            cp.cuda.Device().synchronize()
            start = time.perf_counter()
            _fit(cp, X, C, k, m, args.assign)
            cp.cuda.Device().synchronize()
            times.append(time.perf_counter() - start)
        walls[m] = round(1e3 * float(np.median(times)), 2)
    print("== walls ms", walls)
    for m in args.iterations:
        cp.cuda.Device().synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            model = _fit(cp, X, C, k, m, args.assign)
            cp.cuda.Device().synchronize()
        print(f"== {m} iterations: {model.strategies_}")
        print(f"   {model.strategy_reasons_['assign']}")
        kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        by_name: dict = {}
        for event in kernels:
            count, total = by_name.get(event.name, (0, 0.0))
            by_name[event.name] = (count + 1, total + event.time_range.elapsed_us())
        busy = sum(total for _, total in by_name.values())
        span = (max(e.time_range.end for e in kernels)
                - min(e.time_range.start for e in kernels)) if kernels else 0
        print(f"   device busy {busy / 1e3:.3f} ms of a {span / 1e3:.3f} ms span "
              f"(first kernel to last)")
        for name, (count, total) in sorted(by_name.items(), key=lambda i: -i[1][1]):
            print(f"   {count:6d} {total / 1e3:9.3f} ms  {name[:110]}")
        runtime: dict = {}
        for event in prof.events():
            if event.device_type == torch.autograd.DeviceType.CPU and event.name.startswith(
                    ("cuda", "cu")):
                count, total = runtime.get(event.name, (0, 0.0))
                runtime[event.name] = (count + 1, total + event.time_range.elapsed_us())
        for name, (count, total) in sorted(runtime.items(), key=lambda i: -i[1][1])[:10]:
            print(f"   cpu {count:6d} {total / 1e3:9.3f} ms  {name}")
        if m == min(args.iterations):
            first = min(e.time_range.start for e in kernels)
            print("   in launch order: start us, duration us, kernel")
            for event in sorted(kernels, key=lambda e: e.time_range.start):
                print(f"   {event.time_range.start - first:9.0f} "
                      f"{event.time_range.elapsed_us():8.0f}  {event.name[:90]}")
    if args.host:
        _host_profile(cp, X, C, k, min(args.iterations), args.assign, args.host)
    return 0


def _host_profile(cp, X, C, k, m, assign, fits):
    """cProfile over ``fits`` fits of m iterations (the host's side: no CUPTI running),
    the top functions by own time and by cumulative time, per fit."""
    import cProfile
    import io
    import pstats

    profiler = cProfile.Profile()
    cp.cuda.Device().synchronize()
    start = time.perf_counter()
    profiler.enable()
    for _ in range(fits):
        _fit(cp, X, C, k, m, assign)
    cp.cuda.Device().synchronize()
    profiler.disable()
    wall = (time.perf_counter() - start) / fits
    print(f"== host: {fits} fits of {m} iterations under cProfile, {1e3 * wall:.2f} ms a fit "
          "(cProfile's own cost included); times below are totals over the fits")
    for key in ("tottime", "cumulative"):
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats(key).print_stats(40)
        print(f"   -- by {key}")
        for line in text.getvalue().splitlines():
            if line.strip() and not line.startswith(("   Ordered", "   List")):
                print("  ", line[:160])


if __name__ == "__main__":
    raise SystemExit(main())
