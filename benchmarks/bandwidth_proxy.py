"""The issue's tensor rows with part of the GPU's memory bandwidth taken: an H200 as a
proxy for the H100 the issue names (80 GB HBM3: the same 132 multiprocessors and clocks,
3.35 TB/s of memory bandwidth against the H200's 4.8).

Usage (repository root, on a GPU machine)::

    GPUMINE_COMMIT=<hash> python benchmarks/bandwidth_proxy.py --out $OUT \\
        [--only 10000000,32,1024 1000000,128,1024] [--hog-blocks 16 32] [--repeats 3]

A copy kernel on a few blocks (``--hog-blocks``, 1024 threads each) copies one 1 GiB
buffer into another, over and over (until a flag set from a third stream, or 2.5 times the
fit's time alone at most), on a non-blocking stream of its own while ``"auto"``
fits (the first k rows as centres, ``tol=0``, uniform data: ``fit_vs_flash.py``'s) run on
the default stream; each fit of 20 and of 100 iterations ``--repeats`` times without the
copy and with it, in turns; a steady iteration is ``(t(100) - t(20)) / 80`` of the
medians, over the issue's TF32 floor (``tc_assign.TF32_RATE``). The copy's rate alone and
during the fits (bytes read and written over its running time) says how much of the
memory bandwidth it took. It also takes a share of those multiprocessors' issue slots and
of L2's bandwidth, which an H100 keeps: the proxy is pessimistic. The fits' labels with
and without the copy must be equal. Writes ``bandwidth-proxy-<date>-<commit>.json``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import cupy as cp
import numpy as np
from fit_timing import save  # the script's folder is on sys.path
from fit_vs_flash import _data
from tc_assign import TF32_RATE

from gpumine import GPUKMeans
from gpumine.backend import get_backend
from gpumine.bench.record import context

_HOG = r"""
extern "C" __global__ void __launch_bounds__(1024)
hog(const float4* __restrict__ src,        // IN  (n4)
    float4* __restrict__ dst,              // OUT (n4)
    long long n4,                          // IN
    const volatile int* stop,              // IN  (1) set to 1 from another stream: the end
    long long max_passes,                  // IN  the most passes
    unsigned long long duration,           // IN  ns: it stops then at the latest
    unsigned long long* passes)            // INOUT (1) passes summed over the blocks
{
    unsigned long long now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    const unsigned long long end = now + duration;
    long long pass = 0;
    for (; pass < max_passes && *stop == 0 && now < end; ++pass) {
        for (long long j = blockIdx.x * (long long)blockDim.x + threadIdx.x; j < n4;
             j += (long long)gridDim.x * blockDim.x)
            dst[j] = src[j];
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    }
    if (threadIdx.x == 0) atomicAdd(passes, (unsigned long long)pass);
}
"""
_BYTES = 1 << 30  # each of the copy's two buffers
_MAX_PASSES = 2000  # a few seconds: a fit that waited on the copy would not hang


class Hog:
    """The copy kernel on ``blocks`` blocks: :meth:`start`, then :meth:`stop`, which
    returns its rate in bytes per second (read and written) over the time it ran."""

    def __init__(self, blocks: int, threads: int):
        self.blocks, self.threads = blocks, threads
        self.kernel = cp.RawKernel(_HOG, "hog")
        self.src = cp.random.random(_BYTES // 4, dtype=cp.float32)
        self.dst = cp.empty_like(self.src)
        self.passes = cp.zeros(1, dtype=cp.uint64)
        self.stream = cp.cuda.Stream(non_blocking=True)
        self.stopper = cp.cuda.Stream(non_blocking=True)  # sets the flag while it runs
        self.flag = cp.zeros(1, dtype=cp.int32)
        self.events = (cp.cuda.Event(), cp.cuda.Event())

    def start(self, seconds: float) -> None:
        """Start the copy; it runs until :meth:`stop` or for ``seconds`` at most."""
        self.flag.fill(0)
        self.passes.fill(0)
        cp.cuda.Device().synchronize()
        with self.stream:
            self.events[0].record()
            self.kernel((self.blocks,), (self.threads,),
                        (self.src, self.dst, np.int64(self.src.size // 4), self.flag,
                         np.int64(_MAX_PASSES), np.uint64(seconds * 1e9), self.passes))
        time.sleep(0.002)  # running before the fit starts

    def stop(self) -> float:
        with self.stopper:
            self.flag.fill(1)
        with self.stream:
            self.events[1].record()
        self.stream.synchronize()
        seconds = self.seconds = cp.cuda.get_elapsed_time(*self.events) * 1e-3
        passes = int(self.passes.get()[0]) / self.blocks  # sync: the benchmark's readback
        if passes >= _MAX_PASSES:
            raise RuntimeError("the copy ran out of passes before the fit ended")
        return passes * 2 * _BYTES / seconds


def _fit(X, C, k, iterations):
    start = time.perf_counter()
    model = GPUKMeans(k, init=C, n_init=1, max_iter=iterations, tol=0.0,
                      device="gpu").fit(X)
    cp.cuda.Stream.null.synchronize()  # not the device: the copy's stream runs on
    return time.perf_counter() - start, model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--only", nargs="+", default=["10000000,32,1024", "1000000,128,1024"])
    parser.add_argument("--hog-blocks", nargs="+", type=int, default=[16, 32])
    parser.add_argument("--hog-threads", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    hogs = {blocks: Hog(blocks, args.hog_threads) for blocks in args.hog_blocks}
    alone = {}
    for blocks, hog in hogs.items():  # each copy's rate with nothing else running
        hog.start(0.3)
        time.sleep(0.3)
        alone[blocks] = hog.stop()
        print("copy alone", blocks, "blocks", f"{alone[blocks] / 1e12:.2f} TB/s", flush=True)
    rows = []
    for shape in args.only:
        n, d, k = map(int, shape.split(","))
        X = cp.asarray(_data(n, d, "uniform"))
        C = X[:k].copy()
        floor = 2 * n * d * k / TF32_RATE
        for blocks, hog in [(0, None), *hogs.items()]:
            seconds = {(arm, m): [] for arm in ("plain", "copy") for m in (20, 100)}
            rates, copy_seconds, models = [], [], {}
            for m in (20, 100):
                plain, _ = _fit(X, C, k, m)  # warm-up: compiles, binds
                for _ in range(args.repeats):
                    for arm in ("plain", "copy"):
                        if arm == "copy" and hog is not None:
                            hog.start(2.5 * plain + 0.01)
                        t, models[arm] = _fit(X, C, k, m)
                        if arm == "copy" and hog is not None:
                            rates.append(hog.stop())
                            copy_seconds.append(hog.seconds)
                        seconds[arm, m].append(t)
            median = {key: statistics.median(v) for key, v in seconds.items()}
            steady = {arm: (median[arm, 100] - median[arm, 20]) / 80 for arm in ("plain", "copy")}
            row = {"n": n, "d": d, "k": k, "hog_blocks": blocks, "hog_threads": args.hog_threads,
                   "seconds": {f"{arm}/{m}": v for (arm, m), v in median.items()},
                   "steady_iteration_s": steady,
                   "over_tf32_floor": {arm: s / floor for arm, s in steady.items()},
                   "copy_over_plain": steady["copy"] / steady["plain"],
                   "copy_rate_during_fits_Bps": statistics.median(rates) if rates else None,
                   "copy_rate_alone_Bps": alone.get(blocks),
                   "copy_seconds": copy_seconds,
                   "labels_equal": bool(cp.array_equal(models["plain"].labels_,
                                                       models["copy"].labels_)),
                   "assign": models["plain"].strategies_["assign"]}
            print(row, flush=True)
            rows.append(row)
        del X, C
        cp.get_default_memory_pool().free_all_blocks()
    record = {**context(get_backend("gpu")), "repeats": args.repeats, "rows": rows,
              "tf32_rate": TF32_RATE, "copy_bytes": _BYTES, "numpy": np.__version__}
    save(args.out, "bandwidth-proxy", record)


if __name__ == "__main__":
    main()
