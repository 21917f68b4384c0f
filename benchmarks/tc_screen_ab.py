"""tc-exact with the screen (a fit's bound run) against the split kernel on every row, in one
process (issue 13).

Usage (repository root, on a machine with a CUDA GPU and CuPy; flash-kmeans when
importable)::

    python benchmarks/tc_screen_ab.py --out benchmarks/results [--tag ...]

``single`` is ``assign_tc_exact`` called as it is outside a fit (the split products on
every row), ``screened`` the :class:`~gpumine.kmeans.tensor_cores.ScreenedRun` a fit binds
(the one-product screen first while it leaves at most ``SCREEN_SHARE`` of the rows, the
split kernel on what it leaves). For each case (``tc_clustered.py``'s data: uniform
MT19937 seed 5489 or 64 blobs; centres the first k rows, ``init``, or those of 10 ``tiled``
iterations, ``iter10``): the plan the run settles on after two calls, the rows the screen
leaves, the device time of one assignment (5 calls after a warm-up, in turns, twice each)
and whether each one's labels equal ``tiled``'s on every row (poisoned labels in). Then what
a user sees: the device time of one Lloyd iteration (``atomic`` update, from the same
centres, as ``tc_assign.py`` times it) with each, beside flash-kmeans' in the same process,
and the wall time of ``GPUKMeans(assign="tc-exact")`` fits from device data (20
iterations, ``tol=0``, ``update="atomic-f64"``), with the screen and without it
(``SCREEN_SHARE`` emptied), each with the loop's CUDA graphs and without them
(``GPUMINE_GRAPHS=0``), in turns after an untimed fit of each: the same labels give the
same fit (a digest of the labels and the inertia of every fit). Back-to-back calls here
issue the next call before the last plan's copy has landed, so they launch both passes (the
other leaving at once), as a fit's CUDA graph does; a fit's loop without graphs, which reads
its status each iteration, launches only the one it takes.
Writes ``tc-screen-ab[-tag]-<date>-<commit>.json``.
"""

from __future__ import annotations

import argparse
import os
import time
from functools import partial

import numpy as np
from fit_timing import save  # the script's folder is on sys.path
from fit_vs_flash import _data
from gpu_check import device_time
from tc_clustered import staged_cases

CASES = [(1_000_000, 128, 1024, "uniform"), (1_000_000, 128, 1024, "blobs:64"),
         (10_000_000, 32, 1024, "uniform"), (10_000_000, 32, 1024, "blobs:64"),
         (1_000_000, 64, 1024, "uniform"), (1_000_000, 64, 1024, "blobs:64")]
ITERATION_CASES = [(1_000_000, 128, 1024, "uniform"), (10_000_000, 32, 1024, "uniform")]
FIT_CASES = [(1_000_000, 128, 1024, "uniform"), (1_000_000, 128, 1024, "blobs:64"),
             (10_000_000, 32, 1024, "uniform"), (10_000_000, 32, 1024, "blobs:64")]


def screen_left(cp, run, X, centres) -> dict:
    """The run's plan and counters after one more call on scratch labels (a sync)."""
    from gpumine.kmeans import tensor_cores as tc

    scratch = cp.zeros(X.shape[0], dtype=cp.int32)
    plan = int(run.plan.get()[0])  # sync: the plan this call takes
    queued = tc._assign(X, centres, scratch, None, exact=True, run=run)
    counters = cp.asnumpy(queued.base if queued.base is not None else queued)  # sync
    return {"plan": plan, "queued": int(counters[1]), "screen_left": int(counters[3]),
            "screen_would_leave": int(counters[4])}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--centres", default="/tmp")
    parser.add_argument("--tag", default="")
    parser.add_argument("--skip-fits", action="store_true")
    parser.add_argument("--fits-only", action="store_true")
    args = parser.parse_args()
    from gpumine import GPUKMeans, registry
    from gpumine.backend import get_backend
    from gpumine.bench.peers import gpumine_step, peer_steps
    from gpumine.bench.record import context
    from gpumine.kmeans import tensor_cores as tc

    backend = get_backend("gpu")
    cp = backend.xp
    record = {**context(backend), "screen_share": {str(k): v for k, v in tc.SCREEN_SHARE.items()},
              "rows": [], "iterations": [], "fits": []}
    single = tc.assign_tc_exact
    for n, d, k, kind, stage, X, centres, expected in staged_cases(
            cp, [] if args.fits_only else CASES, args.centres):
        row = {"n": n, "d": d, "k": k, "data": kind, "centres": stage}
        run = single.bind(X)
        row["calls"] = [screen_left(cp, run, X, centres) for _ in range(3)]
        scratch = cp.zeros(n, dtype=cp.int32)
        ways = {"single": single, "screened": run}
        for which in ("single", "screened", "single", "screened"):
            row.setdefault(f"assign_ms_{which}", []).append(
                device_time(cp, partial(ways[which], X, centres, scratch), 5) * 1e3)
            labels = cp.full(n, -7, dtype=cp.int32)
            ways[which](X, centres, labels)
            row[f"labels_equal_tiled_{which}"] = bool((labels == expected).all())  # sync
        print(row, flush=True)
        record["rows"].append(row)
    update = registry.load_strategy("kmeans.update", "atomic")
    for n, d, k, kind in ([] if args.fits_only else ITERATION_CASES):
        host = _data(n, d, kind)
        X = cp.ascontiguousarray(cp.asarray(host).T).T
        centres = X[:k].copy()
        row = {"n": n, "d": d, "k": k, "data": kind}
        ways = {"single": single, "screened": single.bind(X)}
        for which in ("single", "screened", "single", "screened"):
            step, _ = gpumine_step(backend, X, centres, ways[which], update)
            row.setdefault(f"iteration_ms_{which}", []).append(device_time(cp, step, 10) * 1e3)
        row["plan"] = int(ways["screened"].plan.get()[0])  # sync: the plan it settled on
        # sync: the centres for the peers, once a case
        steps, skipped = peer_steps(host, cp.asnumpy(centres), "cuda")
        if "flash-kmeans" in steps:
            row["flash_iteration_ms"] = [device_time(cp, steps["flash-kmeans"], 10) * 1e3
                                         for _ in range(2)]
        else:
            row["flash_skipped"] = skipped.get("flash-kmeans")
        del steps
        print(row, flush=True)
        record["iterations"].append(row)
        del X
        cp.get_default_memory_pool().free_all_blocks()
    shares = dict(tc.SCREEN_SHARE)
    graphs = os.environ.get("GPUMINE_GRAPHS")
    for n, d, k, kind in ([] if args.skip_fits else FIT_CASES):
        X = cp.asarray(_data(n, d, kind))
        init = cp.asnumpy(X[:k])  # sync: the fits' init, once a case
        row = {"n": n, "d": d, "k": k, "data": kind, "max_iter": 20, "update": "atomic-f64"}
        # each way once untimed first (its kernels compiled, the screen's too)
        for timed in (False, True, True, True):
            for which in ("single", "screened", "single-nographs", "screened-nographs"):
                tc.SCREEN_SHARE = {} if which.startswith("single") else shares
                os.environ["GPUMINE_GRAPHS"] = "0" if which.endswith("nographs") else "1"
                cp.cuda.Device().synchronize()
                start = time.perf_counter()
                fit = GPUKMeans(k, init=init, n_init=1, max_iter=20, tol=0, assign="tc-exact",
                                update="atomic-f64", device="gpu").fit(X)
                cp.cuda.Device().synchronize()
                if not timed:
                    continue
                row.setdefault(f"fit_s_{which}", []).append(time.perf_counter() - start)
                inertia = float(fit.inertia_)  # sync: a fitted number, after the timing
                row.setdefault(f"inertia_{which}", []).append(inertia)
                # sync: the fit's labels (device data in, device labels out), after its timing
                labels = cp.asnumpy(fit.labels_).astype(np.int64)
                row.setdefault(f"labels_digest_{which}", []).append(
                    int(labels @ np.arange(n) % (1 << 61)))  # sync: none, host arrays
        tc.SCREEN_SHARE = shares
        if graphs is None:
            os.environ.pop("GPUMINE_GRAPHS", None)
        else:
            os.environ["GPUMINE_GRAPHS"] = graphs
        print(row, flush=True)
        record["fits"].append(row)
        del X
        cp.get_default_memory_pool().free_all_blocks()
    save(args.out, "tc-screen-ab" + (f"-{args.tag}" if args.tag else ""), record)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
