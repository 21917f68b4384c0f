"""Fixtures of the pytest-benchmark suite: backends, sizes, a synchronizing runner.

Sizes are small enough for CI, where the suite runs each case once with benchmarking
disabled (a correctness pass); ``GPUMINE_BENCH_SCALE=10`` multiplies the point counts
for a real measurement run (README: Benchmarks).
"""

from __future__ import annotations

import pytest

from gpumine.backend import get_backend

BACKENDS = ["cpu", pytest.param("gpu", marks=pytest.mark.gpu)]


@pytest.fixture(params=BACKENDS)
def backend(request):
    return get_backend(request.param)


@pytest.fixture
def run_timed(benchmark):
    """``run_timed(backend, fn)``: warm up (kernel compilation), then time ``fn`` + a sync."""

    def run(backend, fn, rounds=5):
        fn()
        backend.synchronize()

        def timed():
            out = fn()
            backend.synchronize()  # GPU work is finished inside the timed function
            return out

        return benchmark.pedantic(timed, rounds=rounds, iterations=1, warmup_rounds=1)

    return run
