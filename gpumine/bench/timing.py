"""Timing on either backend, and the floors measured in the same process.

Every time is taken after a warm-up call (which includes NVRTC compilation on the
GPU); GPU calls are bracketed by CUDA events on the current stream, CPU calls by
``perf_counter``; the reported figure is the median of the repeats. Floors are
measured, not taken from data sheets: :func:`copy_bandwidth` (a device-to-device
or host copy) and :func:`gemm_rate` (a float32 matrix product), so that
"time / floor" compares a kernel with what this machine can do right now.
:func:`summation` is the update step every benchmark times (experiments, gate,
peers, the pytest-benchmark suite): a strategy bound once, unit weights.

Examples
--------
>>> from gpumine.backend import get_backend
>>> from gpumine.bench.timing import measure
>>> m = measure(lambda: sum(range(1000)), get_backend("cpu"), repeats=3)
>>> m.repeats, m.seconds > 0
(3, True)
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

__all__ = ["SUITE_SCALE", "Measurement", "copy_bandwidth", "floor_seconds", "gemm_rate",
           "measure", "summation"]

#: Multiplier of the pytest-benchmark suite's point counts (``GPUMINE_BENCH_SCALE``; 1 in CI).
SUITE_SCALE = int(os.environ.get("GPUMINE_BENCH_SCALE", "1"))


@dataclass
class Measurement:
    """Median seconds per call over ``repeats`` timed calls (after one warm-up)."""

    seconds: float
    repeats: int
    warmup_seconds: float


def _clock(fn, backend):
    if backend.is_gpu:
        cupy = backend.xp
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        return cupy.cuda.get_elapsed_time(start, stop) / 1e3
    begin = time.perf_counter()
    fn()
    return time.perf_counter() - begin


def measure(fn: Callable[[], object], backend, *, repeats: int = 5,
            budget_seconds: float = 2.0) -> Measurement:
    """Median time of ``fn()`` on ``backend``.

    One warm-up call first; then ``repeats`` timed calls, fewer (at least one)
    when the warm-up shows they would take more than ``budget_seconds``.
    """
    backend.synchronize()
    begin = time.perf_counter()
    fn()
    backend.synchronize()
    warmup = time.perf_counter() - begin
    count = max(1, min(repeats, int(budget_seconds / max(warmup, 1e-9))))
    times = [_clock(fn, backend) for _ in range(count)]
    return Measurement(statistics.median(times), count, warmup)


def summation(xp, update, X, labels, k: int):
    """The update step of ``update`` on X with unit weights, bound once as a fit binds it.

    Returns ``(step, sums, weights)``: ``step()`` writes the per-cluster sums (k, d)
    and weights (k) of ``labels`` into the two float64 buffers.
    """
    from gpumine.kmeans.lloyd import bind_update

    weight = xp.ones(X.shape[0], dtype=X.dtype)
    sums, weights = xp.empty((k, X.shape[1])), xp.empty(k)
    update = bind_update(update, X, weight)
    return (lambda: update(X, labels, weight, sums, weights)), sums, weights


def copy_bandwidth(backend, nbytes: int = 1 << 28) -> float:
    """Bytes per second of a plain copy (read + write counted) of ``nbytes`` on ``backend``."""
    xp = backend.xp
    source = xp.ones(nbytes // 4, dtype=xp.float32)
    target = xp.empty_like(source)
    seconds = measure(lambda: xp.copyto(target, source), backend, repeats=5).seconds
    return 2 * source.nbytes / seconds


def gemm_rate(backend, size: int = 4096, dtype=np.float32) -> float:
    """Floating-point operations per second of a ``size``-cubed matrix product."""
    xp = backend.xp
    a = xp.ones((size, size), dtype=dtype)
    b = xp.ones((size, size), dtype=dtype)
    seconds = measure(lambda: a @ b, backend, repeats=3).seconds
    return 2.0 * size ** 3 / seconds


def floor_seconds(nbytes: float, flops: float, bandwidth: float, rate: float) -> float:
    """The larger of the memory time and the compute time at the measured ceilings."""
    return max(nbytes / bandwidth, flops / rate)
