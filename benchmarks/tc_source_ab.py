"""tc-exact's kernels from two versions of ``kmeans_assign_tc.cu`` in one process, in turns
(issue 13).

Usage (repository root, on a machine with a CUDA GPU and CuPy)::

    git show BASE:kernels/kmeans_assign_tc.cu > kernels/kmeans_assign_tc_base.cu
    python benchmarks/tc_source_ab.py --out benchmarks/results --tag TAG
        [--only 1000000,128,1024,uniform,float32 ...]
    rm kernels/kmeans_assign_tc_base.cu

The base file sits beside the source under another name, and the module's source name
(``tensor_cores._SOURCE``) switches between the two, so both versions' kernels run with
the same Python code (the base's ``assign_tc_half`` given its own number of template
arguments, ``--base-arity``: 4 before its KEYS argument). For each case (uniform MT19937
seed 5489 or 64 blobs, as ``fit_vs_flash.py`` makes them; centres the first k rows): the
device time of one assignment (10 calls after a warm-up, three rounds in turns) of a bound
run settled on its plan (``screened``), of ``assign_tc_exact`` outside a fit (the split
kernel on every row, ``split``) and of ``tc-fast``; whether ``screened`` and ``split``
give ``tiled``'s labels on every row (poisoned labels in); tc-fast's agreement with them;
and the run's plan and counters (rows queued, rows the screen left or would leave). Then
the wall time of 20-iteration ``GPUKMeans(assign="tc-exact")`` fits from device data
(``tol=0``), each version three times in turns after an untimed fit, with their inertia
(equal fits: equal inertia). ``--only`` takes some of the cases, and the fits of their
shapes and data. Writes ``tc-source-ab[-tag]-<date>-<commit>.json``.
"""

from __future__ import annotations

import argparse
import time
from functools import partial

from fit_timing import save  # the script's folder is on sys.path
from fit_vs_flash import _data
from gpu_check import device_time

CASES = [(1_000_000, 128, 1024, "uniform", "float32"),
         (1_000_000, 128, 1024, "blobs:64", "float32"),
         (1_000_000, 128, 256, "uniform", "float32"), (1_000_000, 64, 1024, "uniform", "float32"),
         (10_000_000, 32, 1024, "uniform", "float32"), (2_000_000, 16, 64, "uniform", "float32"),
         (1_000_000, 100, 1000, "uniform", "float32"), (1_000_000, 100, 300, "uniform", "float32"),
         (1_000_000, 128, 1024, "uniform", "float64")]
FIT_CASES = [(1_000_000, 128, 1024, "uniform"), (1_000_000, 128, 1024, "blobs:64"),
             (10_000_000, 32, 1024, "uniform")]
SOURCES = {"base": "kmeans_assign_tc_base.cu", "new": "kmeans_assign_tc.cu"}


def _base_arity(get_kernel, arity: int):
    """``get_kernel`` that launches the base's ``assign_tc_half`` with its own number of
    template arguments (``arity``; 4 before the KEYS argument of e5c3eda, 0: as given)."""
    def wrapped(source, name, *args, **kwargs):
        if source == SOURCES["base"] and name == "assign_tc_half" and arity:
            args = args[:arity]
        return get_kernel(source, name, *args, **kwargs)

    return wrapped


def _counters(cp, run) -> dict:
    """The run's last call's counters (a sync)."""
    values = cp.asnumpy(run.scratch.empty("counters", 5, "uint32"))  # sync: a record
    return {"queued": int(values[1]), "screen_left": int(values[3]),  # sync: none, host
            "screen_would_leave": int(values[4])}  # sync: none, host values


def assignments(cp, tc, tiled, n, d, k, kind, dtype) -> dict:
    X = cp.ascontiguousarray(cp.asarray(_data(n, d, kind), dtype=dtype).T).T
    centres = X[:k].copy()
    expected = cp.zeros(n, dtype=cp.int32)
    tiled(X, centres, expected)
    row = {"n": n, "d": d, "k": k, "data": kind, "dtype": dtype, "ms": {},
           "equal_tiled": {}, "fast_agrees_tiled": {}, "run": {}}
    runs = {}
    for rnd in range(3):
        for name, source in SOURCES.items():
            tc._SOURCE = source
            if name not in runs:  # settled on its plan (and every kernel compiled)
                runs[name] = tc.assign_tc_exact.bind(X)
                for _ in range(3):
                    runs[name](X, centres, cp.zeros(n, dtype=cp.int32))
            scratch = cp.zeros(n, dtype=cp.int32)
            for way, call in (("screened", runs[name]), ("split", tc.assign_tc_exact),
                              ("fast", tc.assign_tc_fast)):
                row["ms"].setdefault(f"{way}/{name}", []).append(
                    device_time(cp, partial(call, X, centres, scratch), 10) * 1e3)
            if rnd:
                continue
            row["run"][name] = {"plan": int(runs[name].plan.get()[0]),  # sync: a record
                                **_counters(cp, runs[name])}
            for way, call in (("screened", runs[name]), ("split", tc.assign_tc_exact),
                              ("fast", tc.assign_tc_fast)):
                labels = cp.full(n, -7, dtype=cp.int32)
                call(X, centres, labels)
                same = labels == expected
                if way == "fast":
                    row["fast_agrees_tiled"][name] = float(same.mean())  # sync: a record
                else:
                    row["equal_tiled"][f"{way}/{name}"] = bool(same.all())  # sync: the check
    tc._SOURCE = SOURCES["new"]
    return row


def fits(cp, tc, n, d, k, kind) -> dict:
    from gpumine import GPUKMeans

    X = cp.asarray(_data(n, d, kind))
    init = cp.asnumpy(X[:k])  # sync: the fits' init, once a case
    row = {"n": n, "d": d, "k": k, "data": kind, "max_iter": 20, "fit_s": {}, "inertia": {}}
    for timed in (False, True, True, True):
        for name, source in SOURCES.items():
            tc._SOURCE = source
            cp.cuda.Device().synchronize()
            start = time.perf_counter()
            fit = GPUKMeans(k, init=init, n_init=1, max_iter=20, tol=0, assign="tc-exact",
                            device="gpu").fit(X)
            cp.cuda.Device().synchronize()
            if timed:
                row["fit_s"].setdefault(name, []).append(time.perf_counter() - start)
                inertia = float(fit.inertia_)  # sync: a fitted number, after the timing
                row["inertia"].setdefault(name, []).append(inertia)
    tc._SOURCE = SOURCES["new"]
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--tag", default="")
    parser.add_argument("--base-arity", type=int, default=4,
                        help="the base's assign_tc_half template arguments (0: as given)")
    parser.add_argument("--only", nargs="*", default=None, metavar="N,D,K,DATA,DTYPE",
                        help="these assignment cases (and the fits of the same shape)")
    args = parser.parse_args()
    cases, fit_cases = CASES, FIT_CASES
    if args.only is not None:
        cases = [case for case in CASES if ",".join(map(str, case)) in args.only]
        if len(cases) != len(args.only):
            parser.error(f"--only takes cases of {[','.join(map(str, c)) for c in CASES]}")
        fit_cases = [case for case in FIT_CASES if any(case == c[:4] for c in cases)]
    from gpumine import registry
    from gpumine.backend import get_backend
    from gpumine.bench.record import context
    from gpumine.kmeans import tensor_cores as tc

    backend = get_backend("gpu")
    cp = backend.xp
    tc.get_kernel = _base_arity(tc.get_kernel, args.base_arity)
    tiled = registry.load_strategy("kmeans.assign", "tiled")
    record = {**context(backend), "sources": SOURCES, "rows": [], "fits": []}
    for case in cases:
        record["rows"].append(assignments(cp, tc, tiled, *case))
        print(record["rows"][-1], flush=True)
        cp.get_default_memory_pool().free_all_blocks()
    for case in fit_cases:
        record["fits"].append(fits(cp, tc, *case))
        print(record["fits"][-1], flush=True)
        cp.get_default_memory_pool().free_all_blocks()
    save(args.out, "tc-source-ab" + (f"-{args.tag}" if args.tag else ""), record)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
