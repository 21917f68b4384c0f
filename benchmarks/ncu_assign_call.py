"""One assignment call of a fit under Nsight Compute: ``hamerly``'s (shifts, filter, the
listed tensor-core scan and its re-check) or ``tc-exact``'s, at the same iteration of the same
fit, so that each kernel's time and throughput compare row for row.

Usage (repository root, GPU machine with ncu)::

    ncu --profile-from-start off --section SpeedOfLight --section LaunchStats \
        --section Occupancy --section MemoryWorkloadAnalysis -f -o OUT \
        python benchmarks/ncu_assign_call.py hamerly|tc-exact CALL n,d,k

The fit: uniform data (``fit_vs_flash.py``'s), the first k rows as centres, tol=0,
``update="atomic-fixed"``, graphs off; the CALL-th assignment call runs between
``cudaProfilerStart`` and ``cudaProfilerStop`` (hamerly's also prints the share of rows it
queued). Records: ``ncu-listed-*-h200-*.txt.gz``.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ["GPUMINE_GRAPHS"] = "0"
import cupy as cp
from fit_vs_flash import _data

from gpumine import GPUKMeans
from gpumine.kmeans import bounds, tensor_cores

mode, target = sys.argv[1], int(sys.argv[2])
n, d, k = (int(v) for v in sys.argv[3].split(","))
X = cp.asarray(_data(n, d, "uniform"))
cls = bounds.BoundAssign if mode == "hamerly" else tensor_cores.ScreenedRun
orig = cls.__call__
calls = [0]


def call(self, *args, **kwargs):
    calls[0] += 1
    if calls[0] == target:
        cp.cuda.Device().synchronize()
        cp.cuda.profiler.start()
    orig(self, *args, **kwargs)
    if calls[0] == target:
        cp.cuda.Device().synchronize()
        cp.cuda.profiler.stop()
        if mode == "hamerly":
            print("scanned share", self.scanned() / n, flush=True)


cls.__call__ = call
GPUKMeans(k, init=X[:k].copy(), max_iter=target + 2, tol=0, assign=mode,
          update="atomic-fixed", device="gpu").fit(X)
print(mode, "calls", calls[0])
