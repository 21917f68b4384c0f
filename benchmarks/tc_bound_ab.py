"""tc-exact with the accumulation model of 2026-11-28 against the chain model before it, in
one process (issue 13).

Usage (repository root, on a machine with a CUDA GPU and CuPy; flash-kmeans when
importable)::

    python benchmarks/tc_bound_ab.py --out benchmarks/results [--tag ...]

``old`` is :func:`gpumine.kmeans.tensor_cores.error_bound` with the FP32 accumulation of the
fused kernel modelled as a chain of d additions of ``2**-21`` each (the code before
2026-11-28), ``new`` the code as it is (blocks of at most four products cut to 24 bits);
the two are swapped in turns in one process (the cached device bounds cleared at each
swap). For each case (``tc_clustered.py``'s data: uniform MT19937 seed 5489 or 64 blobs;
centres the first k rows, ``init``, or those of 10 ``tiled`` iterations, ``iter10``): the
rows each bound queues for the re-check, the device time of one assignment (5 calls after
a warm-up, two rounds in turns) and whether the labels equal ``tiled``'s on every row
(poisoned labels in). Then what a user sees: the device time of one Lloyd iteration
(``tc-exact`` + ``atomic``, from the same centres, as ``tc_assign.py`` times it) beside
flash-kmeans' in the same process, and the wall time of ``GPUKMeans(assign="tc-exact")``
fits from device data (20 iterations, ``tol=0``) on the blobs, with the update the fit picks
and with ``update="atomic-f64"``, whose sums do not depend on the order the atomics land in:
the same labels from both bounds give the same fit there (a digest of the labels and the
inertia of every fit), where float32 partials can differ run to run in the last bits. Writes
``tc-bound-ab[-tag]-<date>-<commit>.json``.
"""

from __future__ import annotations

import argparse
import time
from functools import partial

import numpy as np
from fit_timing import save  # the script's folder is on sys.path
from fit_vs_flash import _data
from gpu_check import device_time
from tc_clustered import staged_cases

CASES = [(1_000_000, 128, 1024, "uniform"), (1_000_000, 128, 1024, "blobs:64"),
         (10_000_000, 32, 1024, "uniform"), (10_000_000, 32, 1024, "blobs:64"),
         (1_000_000, 64, 1024, "blobs:64"), (1_000_000, 128, 1024, "blobs:1024"),
         (50_000, 32, 2048, "uniform"), (1_000_000, 16, 256, "blobs:64")]
ITERATION_CASES = [(1_000_000, 128, 1024, "uniform"), (10_000_000, 32, 1024, "uniform")]
FIT_CASES = [(1_000_000, 128, 1024, "blobs:64"), (1_000_000, 64, 1024, "blobs:64")]


def chain_bound(block_bound, d, dtype, path="half"):
    """``block_bound`` (error_bound as the code has it) with the chain model of the
    accumulation instead (the code before 2026-11-28)."""
    from gpumine.kmeans import tensor_cores as tc

    bound = block_bound(d, dtype, path)
    if path == "half":
        kappa_p = (3.01 * 2.0 ** -22 + 1.01 * 2.0 ** -24 + 2.0 ** -34 * d**0.5
                   + 1.002 * (tc._gamma(d, 2.0 ** -21) + 2.0 ** -10 * tc._gamma(3 * d, 2.0 ** -21)))
        bound[0] = (kappa_p + 3 * 2.0 ** -24) * (1 + 2.0 ** -20)
    return bound


def bound_switch():
    """``use(which)``: tensor_cores' error_bound set to the ``"new"`` (block) or ``"old"``
    (chain) model, its cached device bounds cleared."""
    from gpumine.kmeans import tensor_cores as tc

    models = {"new": tc.error_bound, "old": partial(chain_bound, tc.error_bound)}

    def use(which):
        tc.error_bound = models[which]
        tc._BOUNDS.clear()

    return use


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--centres", default="/tmp")
    parser.add_argument("--tag", default="")
    args = parser.parse_args()
    from gpumine import GPUKMeans, registry
    from gpumine.backend import get_backend
    from gpumine.bench.peers import gpumine_step, peer_steps
    from gpumine.bench.record import context
    from gpumine.kmeans.tensor_cores import queued_rows

    backend = get_backend("gpu")
    cp = backend.xp
    use_bound = bound_switch()
    record = {**context(backend), "rows": [], "iterations": [], "fits": []}
    assign = registry.load_strategy("kmeans.assign", "tc-exact")
    for n, d, k, kind, stage, X, centres, expected in staged_cases(cp, CASES, args.centres):
        row = {"n": n, "d": d, "k": k, "data": kind, "centres": stage}
        scratch = cp.zeros(n, dtype=cp.int32)
        for which in ("old", "new", "old", "new"):
            use_bound(which)
            if f"queued_{which}" not in row:  # a count and a sync: once a bound
                row[f"queued_{which}"] = queued_rows(X, centres)
            row.setdefault(f"assign_ms_{which}", []).append(
                device_time(cp, partial(assign, X, centres, scratch), 5) * 1e3)
            labels = cp.full(n, -7, dtype=cp.int32)
            assign(X, centres, labels)
            row[f"labels_equal_tiled_{which}"] = bool((labels == expected).all())  # sync
        print(row, flush=True)
        record["rows"].append(row)
    update = registry.load_strategy("kmeans.update", "atomic")
    for n, d, k, kind in ITERATION_CASES:
        host = _data(n, d, kind)
        X = cp.ascontiguousarray(cp.asarray(host).T).T
        centres = X[:k].copy()
        row = {"n": n, "d": d, "k": k, "data": kind}
        for which in ("old", "new", "old", "new"):
            use_bound(which)
            step, _ = gpumine_step(backend, X, centres, assign, update)
            row.setdefault(f"iteration_ms_{which}", []).append(device_time(cp, step, 10) * 1e3)
        # sync: the centres for the peers, once a case
        steps, skipped = peer_steps(host, cp.asnumpy(centres), "cuda")
        if "flash-kmeans" in steps:
            row["flash_iteration_ms"] = device_time(cp, steps["flash-kmeans"], 10) * 1e3
        else:
            row["flash_skipped"] = skipped.get("flash-kmeans")
        del steps
        print(row, flush=True)
        record["iterations"].append(row)
        del X
        cp.get_default_memory_pool().free_all_blocks()
    for n, d, k, kind in FIT_CASES:
        X = cp.asarray(_data(n, d, kind))
        init = cp.asnumpy(X[:k])  # sync: the fits' init, once a case
        for update_name in ("auto", "atomic-f64"):
            row = {"n": n, "d": d, "k": k, "data": kind, "max_iter": 20, "update": update_name}
            for which in ("old", "new", "old", "new", "old", "new"):
                use_bound(which)
                cp.cuda.Device().synchronize()
                start = time.perf_counter()
                fit = GPUKMeans(k, init=init, n_init=1, max_iter=20, tol=0, assign="tc-exact",
                                update=update_name, device="gpu").fit(X)
                cp.cuda.Device().synchronize()
                row.setdefault(f"fit_s_{which}", []).append(time.perf_counter() - start)
                inertia = float(fit.inertia_)  # sync: a fitted number, after the timing
                row.setdefault(f"inertia_{which}", []).append(inertia)
                # sync: the fit's labels (device data in, device labels out), after its timing
                labels = cp.asnumpy(fit.labels_).astype(np.int64)
                row.setdefault(f"labels_digest_{which}", []).append(
                    int(labels @ np.arange(n) % (1 << 61)))  # sync: none, host arrays
            row["update_picked"] = fit.strategies_.get("update") if hasattr(
                fit, "strategies_") else None
            print(row, flush=True)
            record["fits"].append(row)
        del X
        cp.get_default_memory_pool().free_all_blocks()
    use_bound("new")
    save(args.out, "tc-bound-ab" + (f"-{args.tag}" if args.tag else ""), record)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
