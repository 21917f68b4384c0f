"""The performance regression gate: ratios measured in one run, against a committed baseline.

Absolute times move with the machine, its load and its clocks, so the gate never
compares them across runs. It measures, in one process, pairs whose ratio is a
property of the code: a gpumine step against its floor measured right beside it
(a GEMM of the same shape, a pass over the same bytes), a strategy against a
reference strategy, and a whole fit against scikit-learn. Each ratio is the best
of interleaved timings of the two. A ratio more than ``tolerance`` times its baseline
(default 1.6) fails the gate: a step made 2x slower doubles its ratio and is
caught, while run-to-run noise of the ratios stays well inside 1.6x.

Baselines live in ``benchmarks/baselines/<backend>.json``; ``gpumine bench gate
--update-baseline`` rewrites the one of this backend after a deliberate change.

Examples
--------
>>> from gpumine.bench.gate import check
>>> check({"a": 2.1, "b": 1.0}, {"ratios": {"a": 1.0, "b": 1.0}, "tolerance": 1.6})
['a: 2.1 against a baseline of 1, over the 1.6x tolerance']
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from gpumine import registry
from gpumine.bench.timing import summation

__all__ = ["DEFAULT_TOLERANCE", "baseline_path", "check", "measure_baseline", "measure_ratios",
           "write_baseline"]

DEFAULT_TOLERANCE = 1.6
_PAIRS = 7
_MIN_TIMING = 0.02


def baseline_path(backend, directory=None) -> Path:
    """``benchmarks/baselines/<cpu|gpu>.json`` of the repository (or of ``directory``)."""
    root = Path(directory) if directory else Path(__file__).resolve().parents[2] / "benchmarks" \
        / "baselines"
    return root / f"{backend.name}.json"


def _time(fn, backend, calls=1) -> float:
    backend.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    backend.synchronize()
    return (time.perf_counter() - start) / calls


def _calls_for(fn, backend) -> int:
    """Calls per timing so that one timing lasts at least ``_MIN_TIMING`` seconds."""
    return max(1, math.ceil(_MIN_TIMING / max(_time(fn, backend), 1e-7)))


def _ratio(numerator: Callable, denominator: Callable, backend) -> float:
    """Best-of-``_PAIRS`` numerator time over best-of-``_PAIRS`` denominator time.

    The two are timed alternately (so both see the same machine state), each timing
    long enough to dwarf the clock's resolution; the minimum is the estimate least
    disturbed by other work on the machine, which only ever adds time.
    """
    numerator(), denominator()  # warm-up: compilation, caches, thread pools
    calls = (_calls_for(numerator, backend), _calls_for(denominator, backend))
    top, bottom = [], []
    for _ in range(_PAIRS):
        top.append(_time(numerator, backend, calls[0]))
        bottom.append(_time(denominator, backend, calls[1]))
    return min(top) / min(bottom)


def _update(kind_name, backend, X, labels, k):
    update = registry.load_strategy("kmeans.update", kind_name)  # looked up now: patchable
    return summation(backend.xp, update, X, labels, k)[0]


def _assign(name, X, centers, labels):
    assign = registry.load_strategy("kmeans.assign", name)
    return lambda: assign(X, centers, labels)


def _cpu_ratios(backend) -> dict[str, float]:
    import warnings

    import pyarrow as pa
    from scipy import ndimage
    from sklearn.cluster import KMeans

    from gpumine import GPUKMeans
    from gpumine.adapters import as_columns
    from gpumine.datasets import make_uniform
    from gpumine.wavecluster import labeling

    n, d, k = 200_000, 8, 64
    X = make_uniform(n, d, random_state=5489, dtype=np.float64)
    centers = X[:k].copy()
    labels = np.empty(n, dtype=np.int32)
    registry.load_strategy("kmeans.assign", "numpy")(X, centers, labels)
    ratios = {
        "assign numpy / GEMM of the same shape": _ratio(
            _assign("numpy", X, centers, labels), lambda: X @ centers.T, backend),
        "update numpy / one pass over X": _ratio(
            _update("numpy", backend, X, labels, k), lambda: X.sum(axis=0), backend),
    }
    mask = np.random.RandomState(1).random_sample((512, 512)) < 0.45
    structure = np.ones((3, 3), bool)
    ratios["label union-find / scipy.ndimage.label"] = _ratio(
        lambda: labeling.label_union_find(mask, 2), lambda: ndimage.label(mask, structure),
        backend)
    table = pa.table({f"x{j}": X[:, j] for j in range(d)})
    ratios["as_columns(Arrow table) / a fresh column-major copy of its bytes"] = _ratio(
        lambda: as_columns(table, backend=backend), lambda: X.copy(order="F"), backend)
    small = X[:50_000]

    def ours():
        GPUKMeans(16, init=small[:16], max_iter=5, tol=0.0, device="cpu").fit(small)

    def theirs():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            KMeans(16, init=small[:16], n_init=1, max_iter=5, tol=0.0).fit(small)

    ratios["GPUKMeans cpu fit / scikit-learn KMeans fit"] = _ratio(ours, theirs, backend)
    return ratios


def _gpu_ratios(backend) -> dict[str, float]:
    import pyarrow as pa

    from gpumine.adapters import as_columns
    from gpumine.datasets import make_uniform

    cp = backend.xp
    n, d, k = 1_000_000, 8, 100
    host = make_uniform(n, d, random_state=5489)
    X = backend.to_device_columns(host)
    centers = X[:k].copy()
    labels = cp.empty(n, dtype=cp.int32)
    registry.load_strategy("kmeans.assign", "tiled")(X, centers, labels)
    reference = _update("atomic", backend, X, labels, k)
    ratios = {f"update {name} / atomic": _ratio(_update(name, backend, X, labels, k),
                                                reference, backend)
              for name in ("irregular-reduction", "sort", "masked-tree", "sm-cl", "gm-dt")}
    Xf = X.astype(cp.float32)
    ratios["assign tiled / cuBLAS GEMM of the same shape"] = _ratio(
        _assign("tiled", X, centers, labels), lambda: Xf @ centers.T, backend)
    table = pa.table({f"x{j}": host[:, j] for j in range(d)})
    ratios["as_columns(Arrow table) to the GPU / cupy.asarray of the same bytes"] = _ratio(
        lambda: as_columns(table, backend=backend), lambda: cp.asarray(host), backend)
    return ratios


def measure_ratios(backend) -> dict[str, float]:
    """The gate's ratios on ``backend`` (see the module docstring), measured now.

    On the CPU every thread pool (BLAS, OpenMP) is limited to one thread while
    measuring: ratios of single-threaded code do not move with the core count or
    with other work competing for cores.
    """
    if backend.is_gpu:
        return _gpu_ratios(backend)
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1):
        return _cpu_ratios(backend)


def measure_baseline(backend, runs: int = 3) -> dict[str, float]:
    """Per ratio, the median of ``runs`` :func:`measure_ratios` runs: what a baseline records."""
    measured = [measure_ratios(backend) for _ in range(runs)]
    return {name: float(np.median([m[name] for m in measured])) for name in measured[0]}


def check(ratios: dict[str, float], baseline: dict, tolerance: float | None = None) -> list[str]:
    """Failures: ratios over ``tolerance`` x their baseline, and baseline ratios not measured."""
    tolerance = tolerance or baseline.get("tolerance", DEFAULT_TOLERANCE)
    failures = []
    for name, expected in baseline["ratios"].items():
        if name not in ratios:
            failures.append(f"{name}: not measured")
        elif ratios[name] > tolerance * expected:
            failures.append(f"{name}: {ratios[name]:.3g} against a baseline of {expected:.3g}, "
                            f"over the {tolerance}x tolerance")
    return failures


def write_baseline(path, backend, ratios, tolerance=DEFAULT_TOLERANCE) -> None:
    """Record ``ratios`` (for example the median of a few :func:`measure_ratios` runs)."""
    from gpumine.bench.record import context

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps({"tolerance": tolerance, "ratios": ratios,
                                      "measured_on": context(backend)}, indent=2) + "\n")
