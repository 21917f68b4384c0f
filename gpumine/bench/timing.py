"""Timing on either backend, and the floors measured in the same process.

The one clock of every benchmark (experiments, gate, quality, the scripts under
``benchmarks/``): :func:`measure` times repeated calls after a warm-up call (which
includes NVRTC compilation on the GPU) and reports their median; :func:`timed` times
one call (a fit too long to repeat, or one whose result is needed). Clocks:
``"device"`` brackets each call by CUDA events on the current stream (the device time
of GPU work, launches included; ``perf_counter`` on the CPU), ``"host"`` is
``perf_counter`` around the call and a synchronize (what a user waits for, host data
in and results out), ``"batch"`` issues the repeats back to back between two events
(a call's device time without single-call launch gaps). Floors are
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
from dataclasses import dataclass, field

import numpy as np

from gpumine.exceptions import InvalidParameterError

__all__ = ["CLOCKS", "SUITE_SCALE", "Measurement", "copy_bandwidth", "floor_seconds",
           "gemm_rate", "measure", "summation", "timed"]

#: The clocks of :func:`measure`.
CLOCKS = ("device", "host", "batch")

#: Multiplier of the pytest-benchmark suite's point counts (``GPUMINE_BENCH_SCALE``; 1 in CI).
SUITE_SCALE = int(os.environ.get("GPUMINE_BENCH_SCALE", "1"))


@dataclass
class Measurement:
    """Median seconds per call over ``repeats`` timed calls (after the warm-up)."""

    seconds: float
    repeats: int
    warmup_seconds: float
    #: Every timed call's seconds, in order (one figure per batch for the "batch" clock).
    times: list[float] = field(default_factory=list)


def timed(fn: Callable[[], object], backend=None) -> tuple[object, float]:
    """``(fn(), seconds)``: one call on a host clock, ``backend`` synchronized around it.

    No warm-up: for calls too long to repeat (a scikit-learn fit) or whose result is
    needed; :func:`measure` for anything that can be repeated.
    """
    if backend is not None:
        backend.synchronize()
    begin = time.perf_counter()
    result = fn()
    if backend is not None:
        backend.synchronize()
    return result, time.perf_counter() - begin


def _events(fn, backend, calls=1):
    cupy = backend.xp
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    start.record()
    for _ in range(calls):
        fn()
    stop.record()
    stop.synchronize()
    return cupy.cuda.get_elapsed_time(start, stop) / 1e3 / calls


def _clock(fn, backend, clock="device"):
    if clock == "host":
        return timed(fn, backend)[1]
    if backend.is_gpu:
        return _events(fn, backend)
    return timed(fn)[1]


def measure(fn: Callable[[], object], backend, *, repeats: int = 5,
            budget_seconds: float | None = 2.0, warmup: int = 1,
            clock: str = "device") -> Measurement:
    """Median time of ``fn()`` on ``backend``.

    ``warmup`` untimed calls first; then ``repeats`` timed calls on ``clock`` (one of
    :data:`CLOCKS`, see the module), fewer (at least one) when the warm-up shows they
    would take more than ``budget_seconds`` (None: no budget). The ``"batch"`` clock
    issues the ``repeats`` calls back to back and reports their mean.
    """
    if clock not in CLOCKS:
        raise InvalidParameterError(f"clock must be one of {CLOCKS}, got {clock!r}")
    backend.synchronize()
    begin = time.perf_counter()
    for _ in range(warmup):
        fn()
    backend.synchronize()
    warmed = (time.perf_counter() - begin) / max(warmup, 1)
    count = repeats if budget_seconds is None else max(
        1, min(repeats, int(budget_seconds / max(warmed, 1e-9))))
    if clock == "batch":
        times = [_events(fn, backend, count) if backend.is_gpu
                 else timed(lambda: [fn() for _ in range(count)])[1] / count]
        return Measurement(times[0], count, warmed, times)
    times = [_clock(fn, backend, clock) for _ in range(count)]
    return Measurement(statistics.median(times), count, warmed, times)


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
